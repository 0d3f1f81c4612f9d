package gitobj

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// Tree is one decoded tree object, kept as its encoded content plus where
// each entry starts. A tier folder of 10,000 tenants is a 440 KB tree that every
// message reads and rewrites: held this way it costs no allocation per
// entry, holds no pointers for the garbage collector to follow, and a new
// version is the old content with a few entries spliced in or out, with
// the same bytes written to storage (go-git's decoder allocates twice per
// entry, and its encoder formats every mode with fmt and sorts the whole
// tree again on each write).
type Tree struct {
	hash plumbing.Hash
	raw  string
	offs []int32 // start of each entry in raw
	// sorted is false for a tree whose entries are out of git's order
	// (written by a broken client); lookups then scan.
	sorted bool
}

// TreeEntry is one entry of a tree. An entry read from a tree keeps its
// mode as written (ModeText), so that rewriting a tree leaves the entries
// it does not change byte for byte, zero-padded modes included.
type TreeEntry struct {
	Name string
	Mode filemode.FileMode
	// ModeText is the mode as the tree spells it (empty: Mode, in octal).
	ModeText string
	Hash     plumbing.Hash
}

// Kind is the entry's mode as git reads it (for example 100664, written by
// old versions of git, is a regular file).
func (e TreeEntry) Kind() filemode.FileMode {
	switch e.Mode & 0o170000 {
	case 0o040000:
		return filemode.Dir
	case 0o100000:
		if e.Mode&0o111 != 0 {
			return filemode.Executable
		}
		return filemode.Regular
	case 0o120000:
		return filemode.Symlink
	default:
		return filemode.Submodule
	}
}

// IsDir reports whether the entry is a tree (a directory).
func (e TreeEntry) IsDir() bool { return e.Kind() == filemode.Dir }

var errMalformedTree = errors.New("malformed tree")

const hashLen = len(plumbing.Hash{})

// DecodeTree indexes raw, the content of the tree object h, checking its
// format. The Tree shares raw: decoding allocates only the entries'
// offsets. A tree whose entries are out of git's order is accepted (a
// broken client may have written it); lookups in it then scan, and a new
// version of it is sorted.
func DecodeTree(h plumbing.Hash, raw string) (*Tree, error) {
	if len(raw) > 1<<31-1 {
		return nil, fmt.Errorf("%w %s: %d bytes", errMalformedTree, h, len(raw))
	}
	t := &Tree{hash: h, raw: raw, sorted: true, offs: make([]int32, 0, strings.Count(raw, "\x00"))}
	var prev TreeEntry
	for off := 0; off < len(raw); {
		e, next, err := parseEntry(raw, off)
		if err != nil {
			return nil, fmt.Errorf("%w %s: %w", errMalformedTree, h, err)
		}
		if len(t.offs) > 0 && CompareEntries(prev, e) >= 0 {
			t.sorted = false
		}
		t.offs = append(t.offs, int32(off))
		prev, off = e, next
	}
	return t, nil
}

// parseEntry reads the entry at off of a tree's content and returns where
// the next one starts.
func parseEntry(raw string, off int) (TreeEntry, int, error) {
	s := raw[off:]
	sp := strings.IndexByte(s, ' ')
	if sp <= 0 {
		return TreeEntry{}, 0, errors.New("bad mode")
	}
	mode, err := strconv.ParseUint(s[:sp], 8, 32)
	if err != nil {
		return TreeEntry{}, 0, fmt.Errorf("bad mode %q", s[:sp])
	}
	nul := strings.IndexByte(s, 0)
	if nul <= sp+1 || len(s) < nul+1+hashLen {
		return TreeEntry{}, 0, errors.New("bad entry")
	}
	e := TreeEntry{Name: s[sp+1 : nul], Mode: filemode.FileMode(mode), ModeText: s[:sp]}
	copy(e.Hash[:], s[nul+1:])
	return e, off + nul + 1 + hashLen, nil
}

// Hash is the tree's hash (zero for a tree not written yet).
func (t *Tree) Hash() plumbing.Hash { return t.hash }

// Len is the number of entries.
func (t *Tree) Len() int { return len(t.offs) }

// At returns entry i, in the tree's order (its name shares the tree's content: no allocation).
func (t *Tree) At(i int) TreeEntry {
	e, _, _ := parseEntry(t.raw, int(t.offs[i])) // checked by DecodeTree
	return e
}

// RawHash is the 20 bytes of entry i's hash, as a string that shares the
// tree's content (no copy): an identifier of the entry's object, equal for
// equal objects.
func (t *Tree) RawHash(i int) string {
	end := t.start(i + 1)
	return t.raw[end-hashLen : end]
}

// start is where entry i starts, and len(raw) past the last one.
func (t *Tree) start(i int) int {
	if i < len(t.offs) {
		return int(t.offs[i])
	}
	return len(t.raw)
}

// writeEntry appends the encoding of e to b.
func writeEntry(b *strings.Builder, e TreeEntry) error {
	if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") {
		return fmt.Errorf("invalid tree entry name %q", e.Name)
	}
	if e.ModeText != "" {
		b.WriteString(e.ModeText)
	} else {
		var buf [12]byte
		b.Write(strconv.AppendUint(buf[:0], uint64(e.Mode), 8))
	}
	b.WriteByte(' ')
	b.WriteString(e.Name)
	b.WriteByte(0)
	b.Write(e.Hash[:])
	return nil
}

// EncodeTree returns the content of a tree object holding entries, which
// must be in git's order.
func EncodeTree(entries []TreeEntry) (string, error) {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 && CompareEntries(entries[i-1], e) >= 0 {
			return "", fmt.Errorf("tree entries out of order at %q", e.Name)
		}
		if err := writeEntry(&b, e); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// CompareEntries orders entries as git does: by name, a directory compared
// as if its name ended in "/".
func CompareEntries(a, b TreeEntry) int {
	return compareNames(a.Name, a.IsDir(), b.Name, b.IsDir())
}

func compareNames(a string, aDir bool, b string, bDir bool) int {
	n := min(len(a), len(b))
	if c := strings.Compare(a[:n], b[:n]); c != 0 {
		return c
	}
	return int(nameEnd(a, n, aDir)) - int(nameEnd(b, n, bDir))
}

// nameEnd is the byte of name at n, or what git compares past its end.
func nameEnd(name string, n int, dir bool) byte {
	switch {
	case n < len(name):
		return name[n]
	case dir:
		return '/'
	default:
		return 0
	}
}

// search returns where the entry called name (a directory if dir) is or
// would be inserted in a sorted tree, and whether it is there.
func (t *Tree) search(name string, dir bool) (int, bool) {
	return slices.BinarySearchFunc(t.offs, 0, func(off int32, _ int) int {
		e, _, _ := parseEntry(t.raw, int(off))
		return compareNames(e.Name, e.IsDir(), name, dir)
	})
}

// find returns the index of the entry called name (a file or a directory).
func (t *Tree) find(name string) (int, bool) {
	if !t.sorted {
		for i := range t.offs {
			if t.At(i).Name == name {
				return i, true
			}
		}
		return -1, false
	}
	for _, dir := range []bool{false, true} {
		if i, ok := t.search(name, dir); ok {
			return i, true
		}
	}
	return -1, false
}

// Contains reports whether t has an entry called name.
func (t *Tree) Contains(name string) bool {
	_, ok := t.find(name)
	return ok
}

// Entry returns the entry called name (a file or a directory).
func (t *Tree) Entry(name string) (TreeEntry, bool) {
	i, ok := t.find(name)
	if !ok {
		return TreeEntry{}, false
	}
	return t.At(i), true
}

// with returns the content of t with changes applied: each name maps to
// its new entry, or to nil to remove it. The old content is copied in runs
// between the changed entries, so the cost is one copy of the folder
// whatever its size, and no sort.
func (t *Tree) with(changes map[string]*TreeEntry) (*Tree, error) {
	var added []TreeEntry
	var drop []int // indexes of replaced or removed entries
	for name, e := range changes {
		if i, ok := t.find(name); ok {
			drop = append(drop, i)
		}
		if e != nil {
			added = append(added, *e)
		}
	}
	slices.SortFunc(added, CompareEntries)
	if !t.sorted {
		return t.withSorting(drop, added)
	}
	slices.Sort(drop)
	out := &Tree{sorted: true, offs: make([]int32, 0, len(t.offs)+len(added))}
	var b strings.Builder // its String() is the new content, without a copy
	b.Grow(len(t.raw) + len(added)*64)
	next := 0 // the next old entry to copy
	copyTo := func(end int) {
		for next < end {
			for len(drop) > 0 && drop[0] < next {
				drop = drop[1:]
			}
			stop := end
			if len(drop) > 0 && drop[0] < end {
				stop = drop[0]
			}
			shift := int32(b.Len() - t.start(next))
			for _, off := range t.offs[next:stop] {
				out.offs = append(out.offs, off+shift)
			}
			b.WriteString(t.raw[t.start(next):t.start(stop)])
			next = stop
			if len(drop) > 0 && drop[0] == next {
				next++
			}
		}
	}
	for _, e := range added {
		at, _ := t.search(e.Name, e.IsDir())
		copyTo(at)
		out.offs = append(out.offs, int32(b.Len()))
		if err := writeEntry(&b, e); err != nil {
			return nil, err
		}
	}
	copyTo(len(t.offs))
	out.raw = b.String()
	return out, nil
}

// withSorting is with for a tree out of git's order: decode everything,
// apply, sort (git would refuse to read the result otherwise).
func (t *Tree) withSorting(drop []int, added []TreeEntry) (*Tree, error) {
	var entries []TreeEntry
	for i := range t.offs {
		if !slices.Contains(drop, i) {
			entries = append(entries, t.At(i))
		}
	}
	entries = append(entries, added...)
	slices.SortStableFunc(entries, CompareEntries)
	raw, err := EncodeTree(entries)
	if err != nil {
		return nil, err
	}
	return DecodeTree(plumbing.ZeroHash, raw)
}
