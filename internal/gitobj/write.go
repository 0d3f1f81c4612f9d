package gitobj

import (
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// WriteTree writes to s the tree base (zero: none) with files applied
// (path to content, nil deletes) and returns its hash: zero when nothing
// is left. Only the trees on changed paths are rewritten, so the cost
// follows the size of the change, not of the repository. A tree left with
// no entries is dropped, as git does.
// The objects written are recorded in log (nil: not recorded), each new
// tree or file with the version it replaces (its delta base in the pack a
// push sends). Trees are read through trees and the new ones put there.
// A file replacing an executable keeps its mode, a directory its mode as
// written; a new file is a regular file.
func WriteTree(s storer.EncodedObjectStorer, trees *TreeCache, base plumbing.Hash, files map[string][]byte, log *ObjectLog) (plumbing.Hash, error) {
	old := &Tree{sorted: true}
	if !base.IsZero() {
		t, err := trees.Get(s, base)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		old = t
	}

	// Group the changes by their first path element.
	direct := map[string][]byte{}
	nested := map[string]map[string][]byte{}
	for p, content := range files {
		head, rest, isDir := strings.Cut(p, "/")
		if head == "" || head == "." || head == ".." || (isDir && rest == "") {
			return plumbing.ZeroHash, fmt.Errorf("invalid path %q", p)
		}
		if isDir {
			if nested[head] == nil {
				nested[head] = map[string][]byte{}
			}
			nested[head][rest] = content
		} else {
			direct[head] = content
		}
	}

	// changed holds the new entry of each name the change touches; a nil
	// entry removes the name.
	changed := map[string]*TreeEntry{}
	for name, content := range direct {
		if content == nil {
			changed[name] = nil
			continue
		}
		h, err := WriteBlob(s, content)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		mode := filemode.Regular
		modeText := ""
		prev := plumbing.ZeroHash // the version it replaces: its delta base
		if e, ok := old.Entry(name); ok && e.Kind().IsFile() {
			prev = e.Hash
			if e.Kind() == filemode.Executable {
				mode, modeText = e.Mode, e.ModeText
			}
		}
		log.add(h, prev, len(content))
		changed[name] = &TreeEntry{Name: name, Mode: mode, ModeText: modeText, Hash: h}
	}
	for name, sub := range nested {
		subBase := plumbing.ZeroHash
		if e, ok := changed[name]; ok {
			if e != nil {
				return plumbing.ZeroHash, fmt.Errorf("%s is a file, not a directory", name)
			}
		} else if e, ok := old.Entry(name); ok {
			if !e.IsDir() {
				return plumbing.ZeroHash, fmt.Errorf("%s is a file, not a directory", name)
			}
			subBase = e.Hash
		}
		h, err := WriteTree(s, trees, subBase, sub, log)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if h.IsZero() {
			changed[name] = nil
			continue
		}
		e := TreeEntry{Name: name, Mode: filemode.Dir, Hash: h}
		if old, ok := old.Entry(name); ok && old.IsDir() {
			e.Mode, e.ModeText = old.Mode, old.ModeText
		}
		changed[name] = &e
	}

	nt, err := old.with(changed)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write tree: %w", err)
	}
	if nt.Len() == 0 {
		return plumbing.ZeroHash, nil
	}
	if nt.hash, err = WriteObject(s, plumbing.TreeObject, nt.raw); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write tree: %w", err)
	}
	log.add(nt.hash, base, len(nt.raw))
	trees.put(nt)
	return nt.hash, nil
}

// ObjectLog records the objects a commit wrote, and for each new tree or
// file the version it replaces: what WritePack sends, and its delta bases.
type ObjectLog struct {
	Hashes []plumbing.Hash                 // in the order written: a tree after what it holds
	Bases  map[plumbing.Hash]plumbing.Hash // new object -> the version it replaces
	Bytes  int64                           // their content, in all
}

// add records the object h of size bytes, written to replace base (zero
// for a new object).
func (l *ObjectLog) add(h, base plumbing.Hash, size int) {
	if l == nil {
		return
	}
	l.Hashes = append(l.Hashes, h)
	l.Bytes += int64(size)
	if !base.IsZero() && base != h {
		if l.Bases == nil {
			l.Bases = map[plumbing.Hash]plumbing.Hash{}
		}
		l.Bases[h] = base
	}
}

// WriteBlob stores a blob holding content and returns its hash.
func WriteBlob(s storer.EncodedObjectStorer, content []byte) (plumbing.Hash, error) {
	h, err := WriteObject(s, plumbing.BlobObject, string(content))
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write blob: %w", err)
	}
	return h, nil
}
