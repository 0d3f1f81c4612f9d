package gitobj

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
	entries := []TreeEntry{
		{Name: "a.b", Mode: filemode.Regular, Hash: h},
		{Name: "a", Mode: filemode.Dir, Hash: h},
		{Name: "a0", Mode: filemode.Regular, Hash: h},
	}
	b, err := EncodeTree(entries)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := DecodeTree(h, b)
	if err != nil || !tr.sorted {
		t.Fatalf("decode: %v, sorted %v", err, tr.sorted)
	}
	for _, name := range []string{"a.b", "a", "a0"} {
		if e, ok := tr.Entry(name); !ok || e.Name != name {
			t.Errorf("entry(%q) = %v, %v", name, e, ok)
		}
	}
	if _, ok := tr.Entry("a.c"); ok {
		t.Error("entry(a.c) found")
	}
	if e, _ := tr.Entry("a"); !e.IsDir() {
		t.Error("a is not a directory")
	}
	if _, err := EncodeTree([]TreeEntry{entries[1], entries[0]}); err == nil {
		t.Error("entries out of git's order encoded without an error")
	}
	if _, err := EncodeTree([]TreeEntry{{Name: "a/b", Mode: filemode.Regular, Hash: h}}); err == nil {
		t.Error("a name with a slash encoded without an error")
	}
}

// FuzzDecodeTree: whatever the input, the decoder does not panic; what it
// accepts, go-git reads as the same entries, and a sorted tree encodes back
// to the same bytes (entries a commit does not touch stay as they were,
// modes included).
func FuzzDecodeTree(f *testing.F) {
	h := plumbing.ComputeHash(plumbing.BlobObject, []byte("x"))
	good, _ := EncodeTree([]TreeEntry{{Name: "a", Mode: 0o100664, Hash: h}, {Name: "d", Mode: filemode.Dir, Hash: h}})
	f.Add([]byte(good))
	f.Add([]byte("100644 \x00"))
	f.Add(append([]byte("40000 z\x00"), append(h[:], append([]byte("100644 a\x00"), h[:]...)...)...))
	f.Fuzz(func(t *testing.T, content []byte) {
		tr, err := DecodeTree(h, string(content))
		if err != nil {
			return
		}
		obj := &plumbing.MemoryObject{}
		obj.SetType(plumbing.TreeObject)
		_, _ = obj.Write(content)
		var ref object.Tree
		if err := ref.Decode(obj); err == nil {
			if len(ref.Entries) != tr.Len() {
				t.Fatalf("%d entries, go-git reads %d", tr.Len(), len(ref.Entries))
			}
			for i, e := range ref.Entries {
				if got := tr.At(i); got.Name != e.Name || got.Hash != e.Hash || got.Kind() != e.Mode {
					t.Fatalf("entry %d: %q %o %s, go-git reads %q %o %s", i, got.Name, got.Kind(), got.Hash, e.Name, e.Mode, e.Hash)
				}
			}
		}
		if !tr.sorted {
			return
		}
		var entries []TreeEntry
		for i := range tr.Len() {
			entries = append(entries, tr.At(i))
		}
		again, err := EncodeTree(entries)
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
	entry := func() TreeEntry {
		e := TreeEntry{Name: names[rng.IntN(len(names))], Mode: filemode.Regular}
		if rng.IntN(3) == 0 {
			e.Mode = filemode.Dir
		}
		e.Hash[0] = byte(rng.IntN(256))
		return e
	}
	for range 5000 {
		var entries []TreeEntry
		seen := map[string]bool{}
		for range rng.IntN(len(names) + 1) {
			if e := entry(); !seen[e.Name] {
				seen[e.Name] = true
				entries = append(entries, e)
			}
		}
		slices.SortFunc(entries, CompareEntries)
		raw, err := EncodeTree(entries)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := DecodeTree(plumbing.ZeroHash, raw)
		if err != nil {
			t.Fatal(err)
		}
		changes := map[string]*TreeEntry{}
		for range rng.IntN(4) {
			e := entry()
			if rng.IntN(3) == 0 {
				changes[e.Name] = nil
			} else {
				changes[e.Name] = &e
			}
		}
		var want []TreeEntry
		for _, e := range entries {
			if _, ok := changes[e.Name]; !ok {
				want = append(want, e)
			}
		}
		for _, e := range changes {
			if e != nil {
				want = append(want, *e)
			}
		}
		slices.SortFunc(want, CompareEntries)
		wantRaw, err := EncodeTree(want)
		if err != nil {
			t.Fatal(err)
		}
		for _, sorted := range []bool{true, false} { // false: the path for trees out of order
			tr.sorted = sorted
			got, err := tr.with(changes)
			if err != nil || got.raw != wantRaw || !got.sorted {
				t.Fatalf("tree %v with %v (sorted %v): %v\ngot  %q\nwant %q", entries, changes, sorted, err, got.raw, wantRaw)
			}
			again, err := DecodeTree(plumbing.ZeroHash, got.raw)
			if err != nil || !slices.Equal(again.offs, got.offs) {
				t.Fatalf("offsets %v, decoding gives %v (%v)", got.offs, again.offs, err)
			}
		}
	}
}
