package artifact

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheBytesAreThisFilesAlone: the archive of a fixed folder has a fixed
// digest, so that a change of the bytes (a Go release's archive/tar or
// compress/gzip, which the format no longer uses, or an edit here) is
// caught before two replicas of different builds serve one folder under
// two digests. Change the digest only with a change of the format, and
// say so where it is deployed: every shard Kustomization applies its
// folder once again after such an upgrade.
func TestTheBytesAreThisFilesAlone(t *testing.T) {
	src := tree{
		"root/shard-01/kustomization.yaml": "resources:\n  - t1.yaml\n  - t2.yaml\n",
		"root/shard-01/t1.yaml":            "kind: Namespace\nmetadata:\n  name: t1\n",
		"root/shard-01/t2.yaml":            strings.Repeat("# a long file\n", 6000),
		"root/shard-01/sub/x.yaml":         "x: 1\n",
	}
	a, err := Build(src, "root/shard-01")
	if err != nil {
		t.Fatal(err)
	}
	const want = "sha256:8ff5563e07b3a0576ee93a8df40ffee26162cef15e3486fa7de5a94454bb8d96"
	if a.Digest != want {
		t.Errorf("digest %s, want %s: the archive's bytes changed", a.Digest, want)
	}
	again, _ := Build(src, "root/shard-01")
	if !bytes.Equal(again.Data, a.Data) {
		t.Fatal("two builds of one folder differ")
	}
}

// TestGNUTarReadsTheArchive: the archive is read by GNU tar and gzip (as
// kustomize-controller reads it with Go's readers, which unpack checks),
// names longer than ustar's 100 bytes and files larger than a stored
// deflate block included.
func TestGNUTarReadsTheArchive(t *testing.T) {
	long := strings.Repeat("d", 60) + "/" + strings.Repeat("e", 60) + "/" + strings.Repeat("f", 90) + ".yaml"
	src := tree{
		"root/shard-01/kustomization.yaml": "resources: []\n",
		"root/shard-01/big.yaml":           strings.Repeat("0123456789abcdef", 10000), // 160,000 bytes: three blocks
		"root/shard-01/" + long:            "long: name\n",
		"root/shard-01/empty.yaml":         "",
	}
	a, err := Build(src, "root/shard-01")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "a.tar.gz")
	if err := os.WriteFile(file, a.Data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gzip", "-t", file).CombinedOutput(); err != nil {
		t.Fatalf("gzip -t: %v: %s", err, out)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command("tar", "-xzf", file, "-C", out).CombinedOutput(); err != nil {
		t.Fatalf("tar -xzf: %v: %s", err, msg)
	}
	for name, content := range src {
		got, err := os.ReadFile(filepath.Join(out, strings.TrimPrefix(name, "root/shard-01/")))
		if err != nil || string(got) != content {
			t.Errorf("%s: %d bytes read back (%v), want %d", name, len(got), err, len(content))
		}
	}
	for name, content := range unpack(t, a.Data) {
		if src["root/shard-01/"+name] != content {
			t.Errorf("%s read back by Go's readers differs", name)
		}
	}
}

// TestANameTooLongIsRefused: a path ustar cannot hold is an error, not a
// cut name.
func TestANameTooLongIsRefused(t *testing.T) {
	src := tree{"root/shard-01/" + strings.Repeat("x", 120) + ".yaml": "x\n"}
	if _, err := Build(src, "root/shard-01"); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("Build = %v, want a name too long", err)
	}
}
