package gitrepo

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// tierTree encodes a folder of tenant files named by names, plus a
// subfolder "sub" and the kustomization.
func tierTree(t testing.TB, names []string, salt string) string {
	t.Helper()
	var entries []treeEntry
	for _, n := range append([]string{"kustomization.yaml"}, names...) {
		entries = append(entries, treeEntry{name: n, mode: filemode.Regular, hash: plumbing.ComputeHash(plumbing.BlobObject, []byte(n+salt))})
	}
	entries = append(entries, treeEntry{name: "sub", mode: filemode.Dir, hash: plumbing.ComputeHash(plumbing.TreeObject, []byte("sub"))})
	slices.SortFunc(entries, compareEntries)
	b, err := encodeTree(entries)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTreeDelta: deltas between tree versions apply (with go-git's own
// patcher) to give the target, and stay small for a few changes anywhere
// in a large folder.
func TestTreeDelta(t *testing.T) {
	var names []string
	for i := range 20000 { // 20,000 entries: copies longer than 64 KiB
		names = append(names, fmt.Sprintf("tenant-%05d.yaml", i))
	}
	base := tierTree(t, names, "")
	with := func(extra ...string) []string { return append(slices.Clone(names), extra...) }
	without := func(drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(drop, n) })
	}
	for name, c := range map[string]struct {
		target   string
		maxBytes int
	}{
		"add first":          {tierTree(t, with("a.yaml"), ""), 200},
		"add last":           {tierTree(t, with("zz.yaml"), ""), 200},
		"add two far apart":  {tierTree(t, with("a.yaml", "zz.yaml"), ""), 300},
		"add before sub":     {tierTree(t, with("sub.yaml", "su.yaml", "sub-a"), ""), 300},
		"remove":             {tierTree(t, without("tenant-10000.yaml"), ""), 200},
		"remove and add":     {tierTree(t, append(without("tenant-00007.yaml"), "tenant-19999-b.yaml"), ""), 300},
		"every hash changed": {tierTree(t, names, "x"), 0},
		"same":               {base, 100},
	} {
		d := treeDelta(base, c.target)
		if c.maxBytes == 0 {
			if d != nil {
				t.Errorf("%s: delta of %d bytes for a tree changed all over; want none", name, len(d))
			}
			continue
		}
		if d == nil || len(d) > c.maxBytes {
			t.Errorf("%s: delta of %d bytes, want at most %d", name, len(d), c.maxBytes)
			continue
		}
		got, err := packfile.PatchDelta([]byte(base), d)
		if err != nil || string(got) != c.target {
			t.Errorf("%s: delta gives %d bytes (%v), want %d", name, len(got), err, len(c.target))
		}
	}
	if d := treeDelta(base, "not a tree"); d != nil {
		t.Errorf("delta to a malformed tree: %d bytes, want none", len(d))
	}
}

// TestFileDelta: deltas between file versions apply (with go-git's own
// patcher) to give the target, including sizes that need several copy
// instructions, and are small for a line added or removed.
func TestFileDelta(t *testing.T) {
	big := bytes.Repeat([]byte("  - tenant.yaml\n"), 20000) // 320 KB: several 64 KiB copies
	for name, c := range map[string][2][]byte{
		"insert":  {big, append(append(append([]byte{}, big[:150001]...), "new entry"...), big[150001:]...)},
		"append":  {big, append(slices.Clone(big), "  - new.yaml\n"...)},
		"remove":  {big, append(append([]byte{}, big[:1000]...), big[1300:]...)},
		"replace": {big, append(append(slices.Clone(big[:100]), bytes.Repeat([]byte("x"), 300)...), big[400:]...)},
		"same":    {big, big},
	} {
		d := fileDelta(string(c[0]), string(c[1]))
		if d == nil || len(d) > 400 {
			t.Errorf("%s: delta of %d bytes, want at most 400", name, len(d))
			continue
		}
		got, err := packfile.PatchDelta(c[0], d)
		if err != nil || !bytes.Equal(got, c[1]) {
			t.Errorf("%s: delta gives %d bytes (%v), want %d", name, len(got), err, len(c[1]))
		}
	}
	if d := fileDelta("abc", "something else entirely"); d != nil {
		t.Errorf("delta between unrelated files: %d bytes, want none", len(d))
	}
}

// FuzzTreeDelta: whatever the two inputs, a delta, when there is one,
// turns base into target exactly (trees and files alike).
func FuzzTreeDelta(f *testing.F) {
	a := tierTree(f, []string{"a.yaml", "b.yaml", "c.yaml"}, "")
	f.Add([]byte(a), []byte(tierTree(f, []string{"a.yaml", "b.yaml", "b0.yaml", "c.yaml"}, "")))
	f.Add([]byte(a), []byte(tierTree(f, []string{"b.yaml"}, "x")))
	f.Add([]byte(a), []byte("100644 x\x00"))
	f.Fuzz(func(t *testing.T, base, target []byte) {
		for _, d := range [][]byte{treeDelta(string(base), string(target)), fileDelta(string(base), string(target))} {
			if d == nil {
				continue
			}
			got, err := packfile.PatchDelta(base, d)
			if err != nil || !bytes.Equal(got, target) {
				t.Fatalf("delta gives %q (%v), want %q", got, err, target)
			}
		}
	})
}

// TestThinPackPushes: a chain of commits editing a large folder is pushed
// as one thin pack with tree deltas, and git on the server checks every
// object and ends with exactly the tree of the last commit.
func TestThinPackPushes(t *testing.T) {
	srv, _ := startServer(t)
	seed := fstest.MapFS{}
	var list strings.Builder
	list.WriteString("resources:\n")
	for i := range 3000 {
		seed[fmt.Sprintf("tier/tenant-%04d.yaml", i)] = &fstest.MapFile{Data: []byte(fmt.Sprintf("id: %d\n", i))}
		fmt.Fprintf(&list, "  - tenant-%04d.yaml\n", i)
	}
	seed["tier/kustomization.yaml"] = &fstest.MapFile{Data: []byte(list.String())}
	grown := list.String() + "  - tenant-5000.yaml\n"
	shrunk := strings.Replace(grown, "  - tenant-0001.yaml\n", "", 1)
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
		{"tier/tenant-5000.yaml": []byte("new\n"), "tier/kustomization.yaml": []byte(grown)},
		{"tier/tenant-0001.yaml": nil, "tier/kustomization.yaml": []byte(shrunk)},
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
		t.Errorf("pack of four small commits is %d bytes: the 100 KB tree or the 60 KB kustomization was not sent as a delta", pack.Len())
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
	if got, _ := srv.Output("big.git", "show", "main:tier/kustomization.yaml"); got != shrunk {
		t.Errorf("kustomization.yaml has %d bytes on the server, want %d", len(got), len(shrunk))
	}
}
