package gitrepo

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// writeTree returns the hash of the tree base with files applied (path to
// content, nil deletes). Only the trees on changed paths are rewritten, so
// the cost follows the size of the change, not of the repository. A tree
// left with no entries is dropped, as git does.
// The objects written are recorded in log, each new tree with the tree it
// replaces (its delta base in the pack a push sends).
func writeTree(s storer.EncodedObjectStorer, trees *treeCache, base plumbing.Hash, files map[string][]byte, log *objectLog) (plumbing.Hash, error) {
	old := &dirTree{sorted: true}
	if !base.IsZero() {
		t, err := trees.get(s, base)
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
	changed := map[string]*treeEntry{}
	for name, content := range direct {
		if content == nil {
			changed[name] = nil
			continue
		}
		h, err := writeBlob(s, content)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		mode := filemode.Regular
		modeText := ""
		prev := plumbing.ZeroHash // the version it replaces: its delta base
		if e, ok := old.entry(name); ok && e.kind().IsFile() {
			prev = e.hash
			if e.kind() == filemode.Executable {
				mode, modeText = e.mode, e.modeText
			}
		}
		log.add(h, prev, len(content))
		changed[name] = &treeEntry{name: name, mode: mode, modeText: modeText, hash: h}
	}
	for name, sub := range nested {
		subBase := plumbing.ZeroHash
		if e, ok := changed[name]; ok {
			if e != nil {
				return plumbing.ZeroHash, fmt.Errorf("%s is a file, not a directory", name)
			}
		} else if e, ok := old.entry(name); ok {
			if !e.isDir() {
				return plumbing.ZeroHash, fmt.Errorf("%s is a file, not a directory", name)
			}
			subBase = e.hash
		}
		h, err := writeTree(s, trees, subBase, sub, log)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if h.IsZero() {
			changed[name] = nil
			continue
		}
		e := treeEntry{name: name, mode: filemode.Dir, hash: h}
		if old, ok := old.entry(name); ok && old.isDir() {
			e.mode, e.modeText = old.mode, old.modeText
		}
		changed[name] = &e
	}

	nt, err := old.with(changed)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write tree: %w", err)
	}
	if nt.len() == 0 {
		return plumbing.ZeroHash, nil
	}
	if nt.hash, err = writeObject(s, plumbing.TreeObject, nt.raw); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write tree: %w", err)
	}
	log.add(nt.hash, base, len(nt.raw))
	trees.put(nt)
	return nt.hash, nil
}

// objectLog records the objects a commit wrote, and for each new tree or
// file the version it replaces.
type objectLog struct {
	hashes []plumbing.Hash
	bases  map[plumbing.Hash]plumbing.Hash
	bytes  int64 // their content, in all
}

// add records the object h of size bytes, written to replace base (zero
// for a new object).
func (l *objectLog) add(h, base plumbing.Hash, size int) {
	l.hashes = append(l.hashes, h)
	l.bytes += int64(size)
	if !base.IsZero() && base != h {
		if l.bases == nil {
			l.bases = map[plumbing.Hash]plumbing.Hash{}
		}
		l.bases[h] = base
	}
}

func writeBlob(s storer.EncodedObjectStorer, content []byte) (plumbing.Hash, error) {
	h, err := writeObject(s, plumbing.BlobObject, string(content))
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write blob: %w", err)
	}
	return h, nil
}

// Snapshot reads the tree of one commit.
type Snapshot struct {
	Commit plumbing.Hash
	tree   *dirTree

	mu      sync.Mutex
	subs    map[string]*dirTree // subtrees by path
	trees   *treeCache          // decoded trees by hash, shared with the Repo
	objects storer.EncodedObjectStorer
	reads   *Reads // what is read, when made by Recording
}

// ReadFile implements gitops.Reader.
func (s *Snapshot) ReadFile(name string) ([]byte, error) {
	s.reads.add(readFile, name)
	dir, base := path.Split(name)
	t, err := s.subtree(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, notExist(name)
	}
	e, ok := t.entry(base)
	if !ok || !e.kind().IsFile() {
		return nil, notExist(name)
	}
	return s.readBlob(e.hash)
}

// ReadDir implements gitops.Reader.
func (s *Snapshot) ReadDir(name string) ([]string, error) {
	s.reads.add(readNames, name)
	t, err := s.subtree(name)
	if err != nil {
		return nil, err
	}
	names := make([]string, t.len())
	for i := range names {
		names[i] = t.at(i).name
	}
	sort.Strings(names)
	return names, nil
}

// WalkFiles calls fn for every file below dir, in git's order.
func (s *Snapshot) WalkFiles(dir string, fn func(name string, content []byte) error) error {
	s.reads.add(readEntries, dir)
	t, err := s.subtree(dir)
	if err != nil {
		return err
	}
	for i := range t.len() {
		e := t.at(i)
		name := dir + "/" + e.name
		switch k := e.kind(); {
		case k == filemode.Dir:
			if err := s.WalkFiles(name, fn); err != nil {
				return err
			}
		case k.IsFile():
			c, err := s.readBlob(e.hash)
			if err != nil {
				return fmt.Errorf("read %s: %w", name, err)
			}
			if err := fn(name, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// subtree returns the tree of a directory. Trees are remembered per
// snapshot: a plan reads the same few folders many times.
func (s *Snapshot) subtree(name string) (*dirTree, error) {
	if s.tree == nil {
		return nil, notExist(name)
	}
	if name == "" || name == "." {
		return s.tree, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.subs[name]; ok {
		return t, nil
	}
	t := s.tree
	for _, part := range strings.Split(name, "/") {
		e, ok := t.entry(part)
		if !ok || !e.isDir() {
			return nil, notExist(name)
		}
		var err error
		if t, err = s.trees.get(s.objects, e.hash); err != nil {
			return nil, notExist(name)
		}
	}
	if s.subs == nil {
		s.subs = map[string]*dirTree{}
	}
	s.subs[name] = t
	return t, nil
}

// DirHash returns the hash of the tree of dir: equal hashes mean equal
// contents, so results computed from a directory can be cached by it.
func (s *Snapshot) DirHash(dir string) (string, error) {
	s.reads.add(readWhole, dir)
	t, err := s.subtree(dir)
	if err != nil {
		return "", err
	}
	return t.hash.String(), nil
}

// TreeHash is the hash of the whole tree, recorded as no read: a key for
// caching what was computed from the tree, whose reads are recorded as
// they are made.
func (s *Snapshot) TreeHash() string {
	if s.tree == nil {
		return plumbing.ZeroHash.String()
	}
	return s.tree.hash.String()
}

// Entries lists the files and subdirectories of dir. Each file maps to an
// identifier of its content (equal for equal contents), which ReadBlob
// reads: the 20 bytes of its hash, taken from the tree without a copy.
func (s *Snapshot) Entries(dir string) (map[string]string, []string, error) {
	s.reads.add(readEntries, dir)
	t, err := s.subtree(dir)
	if err != nil {
		return nil, nil, err
	}
	files := make(map[string]string, t.len())
	var dirs []string
	for i := range t.len() {
		e, next, _ := parseEntry(t.raw, t.start(i))
		switch k := e.kind(); {
		case k == filemode.Dir:
			dirs = append(dirs, e.name)
		case k.IsFile():
			files[e.name] = t.raw[next-hashLen : next]
		}
	}
	return files, dirs, nil
}

// FileID returns the identifier Entries gives the file name, without
// listing its folder.
func (s *Snapshot) FileID(name string) (string, error) {
	s.reads.add(readFile, name)
	dir, base := path.Split(name)
	t, err := s.subtree(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return "", notExist(name)
	}
	e, ok := t.entry(base)
	if !ok || !e.kind().IsFile() {
		return "", notExist(name)
	}
	return string(e.hash[:]), nil
}

// ReadBlob returns the content of a file by the identifier Entries gives.
func (s *Snapshot) ReadBlob(id string) ([]byte, error) {
	var h plumbing.Hash
	if s.tree == nil || len(id) != len(h) {
		return nil, notExist(fmt.Sprintf("%x", id))
	}
	copy(h[:], id)
	return s.readBlob(h)
}

func (s *Snapshot) readBlob(h plumbing.Hash) ([]byte, error) {
	obj, err := s.objects.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", h, err)
	}
	content, err := objectContent(obj)
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", h, err)
	}
	return content, nil
}
