package gitrepo

import (
	"fmt"
	"path"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
)

// Reads records what was read from snapshots made with Snapshot.Recording:
// which folders were listed, which files were read (found or not), and
// which folders were taken whole by their hash. Whatever was computed from
// those reads alone comes out the same on any tree where none of them
// differs, which Repo.Touches tells.
//
// A Reads is safe for concurrent use.
type Reads struct {
	mu      sync.Mutex
	names   map[string]bool // folders whose entry names were read
	entries map[string]bool // folders whose entries, names and file contents, were read
	files   map[string]bool // files read by path: their content, or that they are absent
	whole   map[string]bool // folders read as a whole (DirHash)
}

// NewReads returns an empty record.
func NewReads() *Reads {
	return &Reads{names: map[string]bool{}, entries: map[string]bool{}, files: map[string]bool{}, whole: map[string]bool{}}
}

// Whole records that everything below name (a folder or a file) counts,
// as if it had been read whole: for a path that is written, say.
func (r *Reads) Whole(name string) { r.add(readWhole, name) }

// Written records a commit's change (path to content, nil deletes) as
// read: each path whole, and for a deletion every folder above it as
// listed, since deleting a folder's last file drops the folder, which a
// listing of its parent then shows or not depending on what others left
// in it.
func (r *Reads) Written(files map[string][]byte) {
	for p, c := range files {
		r.Whole(p)
		if c != nil {
			continue
		}
		for d := parent(cleanPath(p)); ; d = parent(d) {
			r.add(readNames, d)
			if d == "" {
				break
			}
		}
	}
}

// readKind is how a path was read.
type readKind int

const (
	readNames readKind = iota
	readEntries
	readFile
	readWhole
)

// add records a read of name; a nil Reads records nothing.
func (r *Reads) add(kind readKind, name string) {
	if r == nil {
		return
	}
	name = cleanPath(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch kind {
	case readNames:
		r.names[name] = true
	case readEntries:
		r.entries[name] = true
	case readFile:
		r.files[name] = true
	case readWhole:
		r.whole[name] = true
	}
}

// Len is the number of paths recorded.
func (r *Reads) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.names) + len(r.entries) + len(r.files) + len(r.whole)
}

// cleanPath is name as the records keep it: the root is "".
func cleanPath(name string) string {
	name = path.Clean("/" + name)
	return strings.TrimPrefix(name, "/")
}

// Recording returns a snapshot of the same tree that records what is read
// from it in r.
func (s *Snapshot) Recording(r *Reads) *Snapshot {
	return &Snapshot{Commit: s.Commit, tree: s.tree, trees: s.trees, objects: s.objects, reads: r}
}

// Touches reports whether the change from the tree of commit from to that of
// commit to differs in anything r recorded: a file read that changed,
// appeared or went; a folder listed that gained or lost an entry (or whose
// files changed, when their contents were read); a folder read whole that
// changed at all; a path read below a folder that appeared or went. False
// means that what was computed from those reads holds on to as it did on
// from. It reads only the folders that differ.
func (r *Repo) Touches(from, to plumbing.Hash, reads *Reads) (bool, error) {
	trees := [2]*dirTree{}
	for i, c := range []plumbing.Hash{from, to} {
		commit, err := r.repo.CommitObject(c)
		if err != nil {
			return false, fmt.Errorf("read commit %s: %w", c, err)
		}
		if trees[i], err = r.treeCache().get(r.repo.Storer, commit.TreeHash); err != nil {
			return false, fmt.Errorf("read the tree of %s: %w", c, err)
		}
	}
	reads.mu.Lock()
	defer reads.mu.Unlock()
	// Every recorded path and the folders above it: a path that appears or
	// goes changes what was read at or below it.
	near := map[string]bool{"": true}
	for _, m := range []map[string]bool{reads.names, reads.entries, reads.files, reads.whole} {
		for p := range m {
			for q := p; q != "" && !near[q]; q = parent(q) {
				near[q] = true
			}
		}
	}
	return r.touches("", trees[0], trees[1], reads, near)
}

// touches is Touches for the folder dir, whose trees a and b differ.
func (r *Repo) touches(dir string, a, b *dirTree, reads *Reads, near map[string]bool) (bool, error) {
	if reads.whole[dir] {
		return true, nil
	}
	ea, eb := entriesByName(a), entriesByName(b)
	for name := range eb {
		if _, ok := ea[name]; !ok {
			ea[name] = treeEntry{} // absent on from's side
		}
	}
	for name, x := range ea {
		y, ok := eb[name]
		if ok && x.hash == y.hash && x.kind() == y.kind() {
			continue
		}
		p := path.Join(dir, name)
		if reads.whole[p] || reads.files[p] || reads.entries[dir] {
			return true, nil
		}
		xDir, yDir := x.name != "" && x.isDir(), ok && y.isDir()
		if x.name == "" || !ok || xDir != yDir {
			// The entry appeared, went, or turned from a file into a folder.
			if reads.names[dir] || near[p] {
				return true, nil
			}
			continue
		}
		if !xDir {
			continue // a file whose content nobody read
		}
		if !near[p] {
			continue // nothing read below it
		}
		ta, err := r.treeCache().get(r.repo.Storer, x.hash)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", p, err)
		}
		tb, err := r.treeCache().get(r.repo.Storer, y.hash)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", p, err)
		}
		if t, err := r.touches(p, ta, tb, reads, near); t || err != nil {
			return t, err
		}
	}
	return false, nil
}

// entriesByName maps a tree's entry names to its entries.
func entriesByName(t *dirTree) map[string]treeEntry {
	m := make(map[string]treeEntry, t.len())
	for i := range t.len() {
		e := t.at(i)
		m[e.name] = e
	}
	return m
}

// parent is the folder of p; "" for the root's entries.
func parent(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}
