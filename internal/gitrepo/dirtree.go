package gitrepo

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// dirTree is one tree object, kept as its encoded content plus where each
// entry starts. A tier folder of 10,000 tenants is a 440 KB tree that every
// message reads and rewrites: held this way it costs no allocation per
// entry, holds no pointers for the garbage collector to follow, and a new
// version is the old content with a few entries spliced in or out, with
// the same bytes written to storage (go-git's decoder allocates twice per
// entry, and its encoder formats every mode with fmt and sorts the whole
// tree again on each write).
type dirTree struct {
	hash plumbing.Hash
	raw  string
	offs []int32 // start of each entry in raw
	// sorted is false for a tree whose entries are out of git's order
	// (written by a broken client); lookups then scan.
	sorted bool
}

// treeEntry is one entry of a tree. An entry read from a tree keeps its
// mode as written (modeText), so that rewriting a tree leaves the entries
// it does not change byte for byte, zero-padded modes included.
type treeEntry struct {
	name     string
	mode     filemode.FileMode
	modeText string
	hash     plumbing.Hash
}

// kind is the entry's mode as git reads it (for example 100664, written by
// old versions of git, is a regular file).
func (e treeEntry) kind() filemode.FileMode {
	switch e.mode & 0o170000 {
	case 0o040000:
		return filemode.Dir
	case 0o100000:
		if e.mode&0o111 != 0 {
			return filemode.Executable
		}
		return filemode.Regular
	case 0o120000:
		return filemode.Symlink
	default:
		return filemode.Submodule
	}
}

func (e treeEntry) isDir() bool { return e.kind() == filemode.Dir }

var errMalformedTree = errors.New("malformed tree")

const hashLen = len(plumbing.Hash{})

// decodeTree indexes the content of a tree object, checking its format.
func decodeTree(h plumbing.Hash, raw string) (*dirTree, error) {
	if len(raw) > 1<<31-1 {
		return nil, fmt.Errorf("%w %s: %d bytes", errMalformedTree, h, len(raw))
	}
	t := &dirTree{hash: h, raw: raw, sorted: true, offs: make([]int32, 0, strings.Count(raw, "\x00"))}
	var prev treeEntry
	for off := 0; off < len(raw); {
		e, next, err := parseEntry(raw, off)
		if err != nil {
			return nil, fmt.Errorf("%w %s: %w", errMalformedTree, h, err)
		}
		if len(t.offs) > 0 && compareEntries(prev, e) >= 0 {
			t.sorted = false
		}
		t.offs = append(t.offs, int32(off))
		prev, off = e, next
	}
	return t, nil
}

// parseEntry reads the entry at off of a tree's content and returns where
// the next one starts.
func parseEntry(raw string, off int) (treeEntry, int, error) {
	s := raw[off:]
	sp := strings.IndexByte(s, ' ')
	if sp <= 0 {
		return treeEntry{}, 0, errors.New("bad mode")
	}
	mode, err := strconv.ParseUint(s[:sp], 8, 32)
	if err != nil {
		return treeEntry{}, 0, fmt.Errorf("bad mode %q", s[:sp])
	}
	nul := strings.IndexByte(s, 0)
	if nul <= sp+1 || len(s) < nul+1+hashLen {
		return treeEntry{}, 0, errors.New("bad entry")
	}
	e := treeEntry{name: s[sp+1 : nul], mode: filemode.FileMode(mode), modeText: s[:sp]}
	copy(e.hash[:], s[nul+1:])
	return e, off + nul + 1 + hashLen, nil
}

func (t *dirTree) len() int { return len(t.offs) }

// at returns entry i (its name shares the tree's content: no allocation).
func (t *dirTree) at(i int) treeEntry {
	e, _, _ := parseEntry(t.raw, int(t.offs[i])) // checked by decodeTree
	return e
}

// start is where entry i starts, and len(raw) past the last one.
func (t *dirTree) start(i int) int {
	if i < len(t.offs) {
		return int(t.offs[i])
	}
	return len(t.raw)
}

// writeEntry appends the encoding of e to b.
func writeEntry(b *strings.Builder, e treeEntry) error {
	if e.name == "" || e.name == "." || e.name == ".." || strings.ContainsAny(e.name, "/\x00") {
		return fmt.Errorf("invalid tree entry name %q", e.name)
	}
	if e.modeText != "" {
		b.WriteString(e.modeText)
	} else {
		var buf [12]byte
		b.Write(strconv.AppendUint(buf[:0], uint64(e.mode), 8))
	}
	b.WriteByte(' ')
	b.WriteString(e.name)
	b.WriteByte(0)
	b.Write(e.hash[:])
	return nil
}

// encodeTree returns the content of a tree object holding entries, which
// must be in git's order.
func encodeTree(entries []treeEntry) (string, error) {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 && compareEntries(entries[i-1], e) >= 0 {
			return "", fmt.Errorf("tree entries out of order at %q", e.name)
		}
		if err := writeEntry(&b, e); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// compareEntries orders entries as git does: by name, a directory compared
// as if its name ended in "/".
func compareEntries(a, b treeEntry) int {
	return compareNames(a.name, a.isDir(), b.name, b.isDir())
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
func (t *dirTree) search(name string, dir bool) (int, bool) {
	return slices.BinarySearchFunc(t.offs, 0, func(off int32, _ int) int {
		e, _, _ := parseEntry(t.raw, int(off))
		return compareNames(e.name, e.isDir(), name, dir)
	})
}

// find returns the index of the entry called name (a file or a directory).
func (t *dirTree) find(name string) (int, bool) {
	if !t.sorted {
		for i := range t.offs {
			if t.at(i).name == name {
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

// contains reports whether t has an entry called name.
func (t *dirTree) contains(name string) bool {
	_, ok := t.find(name)
	return ok
}

// entry returns the entry called name.
func (t *dirTree) entry(name string) (treeEntry, bool) {
	i, ok := t.find(name)
	if !ok {
		return treeEntry{}, false
	}
	return t.at(i), true
}

// with returns the content of t with changes applied: each name maps to
// its new entry, or to nil to remove it. The old content is copied in runs
// between the changed entries, so the cost is one copy of the folder
// whatever its size, and no sort.
func (t *dirTree) with(changes map[string]*treeEntry) (*dirTree, error) {
	var added []treeEntry
	var drop []int // indexes of replaced or removed entries
	for name, e := range changes {
		if i, ok := t.find(name); ok {
			drop = append(drop, i)
		}
		if e != nil {
			added = append(added, *e)
		}
	}
	slices.SortFunc(added, compareEntries)
	if !t.sorted {
		return t.withSorting(drop, added)
	}
	slices.Sort(drop)
	out := &dirTree{sorted: true, offs: make([]int32, 0, len(t.offs)+len(added))}
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
		at, _ := t.search(e.name, e.isDir())
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
func (t *dirTree) withSorting(drop []int, added []treeEntry) (*dirTree, error) {
	var entries []treeEntry
	for i := range t.offs {
		if !slices.Contains(drop, i) {
			entries = append(entries, t.at(i))
		}
	}
	entries = append(entries, added...)
	slices.SortStableFunc(entries, compareEntries)
	raw, err := encodeTree(entries)
	if err != nil {
		return nil, err
	}
	return decodeTree(plumbing.ZeroHash, raw)
}
