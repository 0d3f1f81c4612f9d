package gitrepo

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// TestTreeOrderAndLookup: entries sort as git sorts them (a directory as if
// its name ended in "/"), and lookups find files and directories alike.
func TestTreeOrderAndLookup(t *testing.T) {
	h := plumbing.ComputeHash(plumbing.BlobObject, []byte("x"))
	// git's order: "a" (file) < "a.b" < "a" (dir, "a/") < "a0"
	entries := []treeEntry{
		{name: "a.b", mode: filemode.Regular, hash: h},
		{name: "a", mode: filemode.Dir, hash: h},
		{name: "a0", mode: filemode.Regular, hash: h},
	}
	b, err := encodeTree(entries)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := decodeTree(h, b)
	if err != nil || !tr.sorted {
		t.Fatalf("decode: %v, sorted %v", err, tr.sorted)
	}
	for _, name := range []string{"a.b", "a", "a0"} {
		if e, ok := tr.entry(name); !ok || e.name != name {
			t.Errorf("entry(%q) = %v, %v", name, e, ok)
		}
	}
	if _, ok := tr.entry("a.c"); ok {
		t.Error("entry(a.c) found")
	}
	if e, _ := tr.entry("a"); !e.isDir() {
		t.Error("a is not a directory")
	}
	if _, err := encodeTree([]treeEntry{entries[1], entries[0]}); err == nil {
		t.Error("entries out of git's order encoded without an error")
	}
	if _, err := encodeTree([]treeEntry{{name: "a/b", mode: filemode.Regular, hash: h}}); err == nil {
		t.Error("a name with a slash encoded without an error")
	}
}

// FuzzDecodeTree: whatever the input, the decoder does not panic; what it
// accepts, go-git reads as the same entries, and a sorted tree encodes back
// to the same bytes (entries a commit does not touch stay as they were,
// modes included).
func FuzzDecodeTree(f *testing.F) {
	h := plumbing.ComputeHash(plumbing.BlobObject, []byte("x"))
	good, _ := encodeTree([]treeEntry{{name: "a", mode: 0o100664, hash: h}, {name: "d", mode: filemode.Dir, hash: h}})
	f.Add([]byte(good))
	f.Add([]byte("100644 \x00"))
	f.Add(append([]byte("40000 z\x00"), append(h[:], append([]byte("100644 a\x00"), h[:]...)...)...))
	f.Fuzz(func(t *testing.T, content []byte) {
		tr, err := decodeTree(h, string(content))
		if err != nil {
			return
		}
		obj := &plumbing.MemoryObject{}
		obj.SetType(plumbing.TreeObject)
		_, _ = obj.Write(content)
		var ref object.Tree
		if err := ref.Decode(obj); err == nil {
			if len(ref.Entries) != tr.len() {
				t.Fatalf("%d entries, go-git reads %d", tr.len(), len(ref.Entries))
			}
			for i, e := range ref.Entries {
				if got := tr.at(i); got.name != e.Name || got.hash != e.Hash || got.kind() != e.Mode {
					t.Fatalf("entry %d: %q %o %s, go-git reads %q %o %s", i, got.name, got.kind(), got.hash, e.Name, e.Mode, e.Hash)
				}
			}
		}
		if !tr.sorted {
			return
		}
		var entries []treeEntry
		for i := range tr.len() {
			entries = append(entries, tr.at(i))
		}
		again, err := encodeTree(entries)
		if err != nil {
			return // names git would refuse ("/" inside)
		}
		if again != string(content) {
			t.Fatalf("encodes back to %q, want %q", again, content)
		}
	})
}

// TestWithMatchesSort: merging changes into a tree gives what removing the
// changed names, appending the new entries and sorting everything gives,
// for random trees and changes (files and directories of the same names
// included).
func TestWithMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "a.b", "a0", "b", "k.yaml", "t-1", "t-10", "t-2", "z"}
	entry := func() treeEntry {
		e := treeEntry{name: names[rng.IntN(len(names))], mode: filemode.Regular}
		if rng.IntN(3) == 0 {
			e.mode = filemode.Dir
		}
		e.hash[0] = byte(rng.IntN(256))
		return e
	}
	for range 5000 {
		var entries []treeEntry
		seen := map[string]bool{}
		for range rng.IntN(len(names) + 1) {
			if e := entry(); !seen[e.name] {
				seen[e.name] = true
				entries = append(entries, e)
			}
		}
		slices.SortFunc(entries, compareEntries)
		raw, err := encodeTree(entries)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := decodeTree(plumbing.ZeroHash, raw)
		if err != nil {
			t.Fatal(err)
		}
		changes := map[string]*treeEntry{}
		for range rng.IntN(4) {
			e := entry()
			if rng.IntN(3) == 0 {
				changes[e.name] = nil
			} else {
				changes[e.name] = &e
			}
		}
		var want []treeEntry
		for _, e := range entries {
			if _, ok := changes[e.name]; !ok {
				want = append(want, e)
			}
		}
		for _, e := range changes {
			if e != nil {
				want = append(want, *e)
			}
		}
		slices.SortFunc(want, compareEntries)
		wantRaw, err := encodeTree(want)
		if err != nil {
			t.Fatal(err)
		}
		for _, sorted := range []bool{true, false} { // false: the path for trees out of order
			tr.sorted = sorted
			got, err := tr.with(changes)
			if err != nil || got.raw != wantRaw || !got.sorted {
				t.Fatalf("tree %v with %v (sorted %v): %v\ngot  %q\nwant %q", entries, changes, sorted, err, got.raw, wantRaw)
			}
			again, err := decodeTree(plumbing.ZeroHash, got.raw)
			if err != nil || !slices.Equal(again.offs, got.offs) {
				t.Fatalf("offsets %v, decoding gives %v (%v)", got.offs, again.offs, err)
			}
		}
	}
}
