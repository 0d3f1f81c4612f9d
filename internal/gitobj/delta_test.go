package gitobj

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// tierTree encodes a folder of tenant files named by names, plus a
// subfolder "sub" and the kustomization.
func tierTree(t testing.TB, names []string, salt string) string {
	t.Helper()
	var entries []TreeEntry
	for _, n := range append([]string{"kustomization.yaml"}, names...) {
		entries = append(entries, TreeEntry{Name: n, Mode: filemode.Regular, Hash: plumbing.ComputeHash(plumbing.BlobObject, []byte(n+salt))})
	}
	entries = append(entries, TreeEntry{Name: "sub", Mode: filemode.Dir, Hash: plumbing.ComputeHash(plumbing.TreeObject, []byte("sub"))})
	slices.SortFunc(entries, CompareEntries)
	b, err := EncodeTree(entries)
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
