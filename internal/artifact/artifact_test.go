package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/testenv/memtree"
)

// The worker's git snapshots are a Source.
var _ Source = (*gitrepo.Snapshot)(nil)

// tree is a Source over paths to contents.
type tree = memtree.Tree

// unpack reads an archive back as kustomize-controller's untar does: gzip
// first, names relative, no way out of the folder.
func unpack(t *testing.T, data []byte) map[string]string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if path.IsAbs(h.Name) || strings.HasPrefix(path.Clean(h.Name), "..") {
			t.Fatalf("entry %q leaves the folder", h.Name)
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			out[h.Name] = string(b)
		}
	}
}

// TestBuildArchivesTheFolderAlone: the folder's files and subfolders, named
// relative to it, and nothing of its siblings; the digest is the archive's
// sha256 and the revision names it.
func TestBuildArchivesTheFolderAlone(t *testing.T) {
	src := tree{
		"root/tenants/shard-01/kustomization.yaml": "resources:\n  - t1.yaml\n",
		"root/tenants/shard-01/t1.yaml":            "kind: Namespace\n",
		"root/tenants/shard-01/sub/x.yaml":         "x\n",
		"root/tenants/shard-02/t2.yaml":            "kind: Namespace\n",
	}
	a, err := Build(src, "root/tenants/shard-01")
	if err != nil {
		t.Fatal(err)
	}
	got := unpack(t, a.Data)
	want := map[string]string{"kustomization.yaml": "resources:\n  - t1.yaml\n", "t1.yaml": "kind: Namespace\n", "sub/x.yaml": "x\n"}
	if len(got) != len(want) {
		t.Fatalf("archive holds %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	sum := sha256.Sum256(a.Data)
	if d := "sha256:" + hex.EncodeToString(sum[:]); a.Digest != d {
		t.Errorf("digest %s; the archive's sha256 is %s", a.Digest, d)
	}
}

// TestBuildDependsOnTheContentAlone: the same content gives the same bytes
// (any replica, any time, any order of listing); a change of one byte of
// the folder, or a renamed file, gives another digest, and a change
// elsewhere does not.
func TestBuildDependsOnTheContentAlone(t *testing.T) {
	base := tree{"d/a.yaml": "a\n", "d/b.yaml": "b\n", "d/s/c.yaml": "c\n", "other/z.yaml": "z\n"}
	first, err := Build(base, "d")
	if err != nil {
		t.Fatal(err)
	}
	for range 5 { // map order differs between listings
		again, err := Build(base, "d")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Data, first.Data) {
			t.Fatal("the same folder gave other bytes")
		}
	}
	for name, changed := range map[string]tree{
		"content": {"d/a.yaml": "a!\n", "d/b.yaml": "b\n", "d/s/c.yaml": "c\n"},
		"name":    {"d/a2.yaml": "a\n", "d/b.yaml": "b\n", "d/s/c.yaml": "c\n"},
		"nested":  {"d/a.yaml": "a\n", "d/b.yaml": "b\n", "d/s/c.yaml": "c!\n"},
	} {
		a, err := Build(changed, "d")
		if err != nil {
			t.Fatal(err)
		}
		if a.Digest == first.Digest {
			t.Errorf("a change of the %s keeps the digest", name)
		}
	}
	elsewhere := tree{"d/a.yaml": "a\n", "d/b.yaml": "b\n", "d/s/c.yaml": "c\n", "other/z.yaml": "changed\n"}
	if a, _ := Build(elsewhere, "d"); a.Digest != first.Digest {
		t.Error("a change outside the folder changed its digest")
	}
	if _, err := Build(base, "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing folder: %v", err)
	}
}
