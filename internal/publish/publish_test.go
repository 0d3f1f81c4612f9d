package publish

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/artifact"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/testenv/memtree"
)

// TestServeKeepsWhatAnObjectMayPointAt: each folder's current archive and
// the one before are served; a folder back to content it had serves that
// archive again; an archive two folders share stays while either needs it.
func TestServeKeepsWhatAnObjectMayPointAt(t *testing.T) {
	p := New(Options{})
	get := func(file string) int {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+file, nil))
		return rec.Code
	}
	p.serve("a", "1.tar.gz", []byte("one"))
	p.serve("a", "2.tar.gz", []byte("two"))
	p.serve("a", "1.tar.gz", []byte("one")) // back to where it was
	if get("1.tar.gz") != 200 || get("2.tar.gz") != 200 {
		t.Fatalf("after 1, 2, 1: %d %d, want both served", get("1.tar.gz"), get("2.tar.gz"))
	}
	p.serve("a", "3.tar.gz", []byte("three"))
	if get("2.tar.gz") != 404 || get("1.tar.gz") != 200 || get("3.tar.gz") != 200 {
		t.Fatalf("after 1, 2, 1, 3: 1 %d, 2 %d, 3 %d; want 2 dropped", get("1.tar.gz"), get("2.tar.gz"), get("3.tar.gz"))
	}
	p.serve("b", "3.tar.gz", []byte("three"))
	p.serve("a", "4.tar.gz", []byte("four"))
	p.serve("a", "5.tar.gz", []byte("five"))
	if get("3.tar.gz") != 200 {
		t.Fatal("an archive folder b points at was dropped with folder a's old ones")
	}
	if get("1.tar.gz") != 404 {
		t.Fatal("an archive nobody points at is still served")
	}
}

// TestServeBuildsWhatAnotherReplicaPublished: a URL this replica did not
// publish is built again from the commit's folder it names, and served
// only when its digest is the one named.
func TestServeBuildsWhatAnotherReplicaPublished(t *testing.T) {
	src := memtree.Tree{
		"root/tenants/premium/shard-01/kustomization.yaml": "resources:\n  - a.yaml\n",
		"root/tenants/premium/shard-01/a.yaml":             "kind: ConfigMap\n",
	}
	a, err := artifact.Build(src, "root/tenants/premium/shard-01")
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Layout: gitops.Layout{Root: "root"}})
	var asked []string
	p.BuildWith(func(_ context.Context, commit string, fn func(Source) error) error {
		asked = append(asked, commit)
		return fn(src)
	})
	get := func(path string) (int, []byte) {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.Bytes()
	}
	hex := strings.TrimPrefix(a.Digest, "sha256:")
	if code, body := get("/c1/premium/shard-01/" + hex + ".tar.gz"); code != 200 || !bytes.Equal(body, a.Data) {
		t.Fatalf("rebuilt: %d, %d bytes, want the %d of the archive", code, len(body), len(a.Data))
	}
	if code, _ := get("/c1/premium/shard-01/" + strings.Repeat("0", 64) + ".tar.gz"); code != 404 {
		t.Errorf("another digest: %d, want 404", code)
	}
	if code, _ := get("/c1/premium/../../etc/" + hex + ".tar.gz"); code != 404 {
		t.Errorf("a path out of the tenants folder: %d, want 404", code)
	}
	if len(asked) != 2 || asked[0] != "c1" {
		t.Errorf("commits built from: %v", asked)
	}
}
