package gitrepo

import (
	"fmt"
	"path"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/tenant-worker/tenant-worker/internal/gitobj"
)

// Reads records what was read from snapshots made with Snapshot.Recording:
// which folders were listed, which files were read (found or not), and
// which folders were taken whole by their hash. Whatever was computed from
// those reads alone comes out the same on any tree where none of them
// differs, which Repo.Touches tells.
//
// A Reads is safe for concurrent use.
type Reads struct {
	mu    sync.Mutex
	paths map[string]readKind // how each path was read, or'ed
}

// NewReads returns an empty record.
func NewReads() *Reads { return &Reads{paths: map[string]readKind{}} }

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

// readKind is how a path was read: a set of these bits.
type readKind uint8

const (
	readNames   readKind = 1 << iota // a folder's entry names
	readEntries                      // a folder's entries, names and file contents
	readFile                         // a file, its content or that it is absent
	readWhole                        // a folder by its hash, or a path written
)

// add records a read of name; a nil Reads records nothing.
func (r *Reads) add(kind readKind, name string) {
	if r == nil {
		return
	}
	name = cleanPath(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paths[name] |= kind
}

// read reports whether name was read in any of the ways kind has; the
// caller holds r.mu.
func (r *Reads) read(name string, kind readKind) bool { return r.paths[name]&kind != 0 }

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
	trees := [2]*gitobj.Tree{}
	for i, c := range []plumbing.Hash{from, to} {
		commit, err := r.repo.CommitObject(c)
		if err != nil {
			return false, fmt.Errorf("read commit %s: %w", c, err)
		}
		if trees[i], err = r.treeCache().Get(r.repo.Storer, commit.TreeHash); err != nil {
			return false, fmt.Errorf("read the tree of %s: %w", c, err)
		}
	}
	reads.mu.Lock()
	defer reads.mu.Unlock()
	// Every recorded path and the folders above it: a path that appears or
	// goes changes what was read at or below it.
	near := map[string]bool{"": true}
	for p := range reads.paths {
		for q := p; q != "" && !near[q]; q = parent(q) {
			near[q] = true
		}
	}
	return r.touches("", trees[0], trees[1], reads, near)
}

// touches is Touches for the folder dir, whose trees a and b differ.
func (r *Repo) touches(dir string, a, b *gitobj.Tree, reads *Reads, near map[string]bool) (bool, error) {
	if reads.read(dir, readWhole) {
		return true, nil
	}
	// Each name of either side once: a's entries, then b's that a lacks.
	for i, n := 0, a.Len()+b.Len(); i < n; i++ {
		var x, y gitobj.TreeEntry
		var inA, inB bool
		if i < a.Len() {
			x, inA = a.At(i), true
			y, inB = b.Entry(x.Name)
		} else if y, inB = b.At(i-a.Len()), true; a.Contains(y.Name) {
			continue
		}
		if inA && inB && x.Hash == y.Hash && x.Kind() == y.Kind() {
			continue
		}
		name := x.Name
		if !inA {
			name = y.Name
		}
		p := path.Join(dir, name)
		if reads.read(p, readWhole|readFile) || reads.read(dir, readEntries) {
			return true, nil
		}
		if !inA || !inB || x.IsDir() != y.IsDir() {
			// The entry appeared, went, or turned from a file into a folder.
			if reads.read(dir, readNames) || near[p] {
				return true, nil
			}
			continue
		}
		if !x.IsDir() || !near[p] {
			continue // a file whose content nobody read, or nothing read below
		}
		ta, err := r.treeCache().Get(r.repo.Storer, x.Hash)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", p, err)
		}
		tb, err := r.treeCache().Get(r.repo.Storer, y.Hash)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", p, err)
		}
		if t, err := r.touches(p, ta, tb, reads, near); t || err != nil {
			return t, err
		}
	}
	return false, nil
}

// parent is the folder of p; "" for the root's entries.
func parent(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}
