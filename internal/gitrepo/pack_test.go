package gitrepo

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// TestPrefixSuffixDelta: the deltas apply (with go-git's own patcher) to
// give the target, for inserts, removals, replacements and sizes that need
// several copy instructions.
func TestPrefixSuffixDelta(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320 KB: several 64 KiB copies
	for name, c := range map[string][2][]byte{
		"insert":  {big, append(append(append([]byte{}, big[:150001]...), "new entry"...), big[150001:]...)},
		"remove":  {big, append(append([]byte{}, big[:1000]...), big[1300:]...)},
		"replace": {[]byte("abcXYZdef"), []byte("abc12345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890def")},
		"same":    {[]byte("same"), []byte("same")},
		"empty":   {[]byte("something"), []byte{}},
	} {
		got, err := packfile.PatchDelta(c[0], prefixSuffixDelta(c[0], c[1]))
		if err != nil || !bytes.Equal(got, c[1]) {
			t.Errorf("%s: delta gives %d bytes (%v), want %d", name, len(got), err, len(c[1]))
		}
	}
}

// TestThinPackPushes: a chain of commits editing a large folder is pushed
// as one thin pack with tree deltas, and git on the server checks every
// object and ends with exactly the tree of the last commit.
func TestThinPackPushes(t *testing.T) {
	srv, _ := startServer(t)
	seed := fstest.MapFS{}
	for i := range 3000 {
		seed[fmt.Sprintf("tier/tenant-%04d.yaml", i)] = &fstest.MapFile{Data: []byte(fmt.Sprintf("id: %d\n", i))}
	}
	url, err := srv.CreateRepo("big.git", "main", seed)
	if err != nil {
		t.Fatal(err)
	}
	r, err := open(t, url, "", token)
	if err != nil {
		t.Fatal(err)
	}
	base := r.Head()
	tip := base
	for i, files := range []map[string][]byte{
		{"tier/tenant-5000.yaml": []byte("new\n")},
		{"tier/tenant-0001.yaml": nil},
		{"tier/tenant-0002.yaml": []byte("changed\n"), "other/x.yaml": []byte("x\n")},
		{"tier/tenant-5000.yaml": nil, "tier/a-first.yaml": []byte("first\n")},
	} {
		if tip, err = r.Commit(tip, files, fmt.Sprintf("change %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	hashes, bases, ok := r.newObjects(base, tip)
	if !ok || len(bases) == 0 {
		t.Fatalf("no delta bases recorded: %v", bases)
	}
	var pack bytes.Buffer
	if err := writePack(&pack, r.repo.Storer, hashes, bases); err != nil {
		t.Fatal(err)
	}
	if pack.Len() > 5_000 {
		t.Errorf("pack of four one-file commits is %d bytes: the 100 KB tree was not sent as a delta", pack.Len())
	}
	if err := r.Push(context.Background(), base, tip); err != nil {
		t.Fatal(err)
	}
	if out, err := srv.Output("big.git", "fsck", "--strict", "--no-dangling"); err != nil {
		t.Fatalf("fsck: %v %s", err, out)
	}
	remote, err := srv.Output("big.git", "rev-parse", "main^{tree}")
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.repo.CommitObject(tip)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(remote) != c.TreeHash.String() {
		t.Errorf("remote tree %s, want %s", remote, c.TreeHash)
	}
	if got, _ := srv.Output("big.git", "show", "main:tier/tenant-0002.yaml"); got != "changed\n" {
		t.Errorf("tenant-0002 = %q", got)
	}
}
