package gitrepo

import (
	"bytes"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// writeTree returns the hash of the tree base with files applied (path to
// content, nil deletes). Only the trees on changed paths are rewritten, so
// the cost follows the size of the change, not of the repository. A tree
// left with no entries is dropped, as git does.
// The objects written are recorded in log, each new tree with the tree it
// replaces (its delta base in the pack a push sends).
func writeTree(s storer.EncodedObjectStorer, trees *treeCache, base plumbing.Hash, files map[string][]byte, log *objectLog) (plumbing.Hash, error) {
	var entries []object.TreeEntry
	if !base.IsZero() {
		t, err := trees.get(s, base)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries = append(entries, t.Entries...)
	}

	// Group the changes by their first path element.
	direct := map[string][]byte{}
	deleted := map[string]bool{}
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
		} else if content == nil {
			deleted[head] = true
		} else {
			direct[head] = content
		}
	}

	index := map[string]int{}
	for i, e := range entries {
		index[e.Name] = i
	}
	set := func(e object.TreeEntry) {
		if i, ok := index[e.Name]; ok {
			entries[i] = e
			return
		}
		index[e.Name] = len(entries)
		entries = append(entries, e)
	}
	for name := range deleted {
		if i, ok := index[name]; ok {
			entries[i].Name = "" // removed below
		}
	}
	for name, content := range direct {
		h, err := writeBlob(s, content)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		log.add(h, plumbing.ZeroHash)
		mode := filemode.Regular
		if i, ok := index[name]; ok && entries[i].Mode == filemode.Executable {
			mode = filemode.Executable
		}
		set(object.TreeEntry{Name: name, Mode: mode, Hash: h})
	}
	for name, sub := range nested {
		subBase := plumbing.ZeroHash
		if i, ok := index[name]; ok && entries[i].Mode == filemode.Dir {
			subBase = entries[i].Hash
		} else if ok && entries[i].Name != "" {
			return plumbing.ZeroHash, fmt.Errorf("%s is a file, not a directory", name)
		}
		h, err := writeTree(s, trees, subBase, sub, log)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if h.IsZero() {
			if i, ok := index[name]; ok {
				entries[i].Name = ""
			}
			continue
		}
		set(object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h})
	}

	kept := entries[:0]
	for _, e := range entries {
		if e.Name != "" {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		return plumbing.ZeroHash, nil
	}
	// Git orders entries by name, comparing a directory as if it ended in "/".
	sort.Slice(kept, func(i, j int) bool { return sortKey(kept[i]) < sortKey(kept[j]) })
	t := &object.Tree{Entries: kept}
	obj := s.NewEncodedObject()
	if err := t.Encode(obj); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("encode tree: %w", err)
	}
	h, err := s.SetEncodedObject(obj)
	if err == nil {
		log.add(h, base)
	}
	return h, err
}

// objectLog records the objects a commit wrote, and for each new tree the
// tree it replaces.
type objectLog struct {
	hashes []plumbing.Hash
	bases  map[plumbing.Hash]plumbing.Hash
}

func (l *objectLog) add(h, base plumbing.Hash) {
	l.hashes = append(l.hashes, h)
	if !base.IsZero() && base != h {
		if l.bases == nil {
			l.bases = map[plumbing.Hash]plumbing.Hash{}
		}
		l.bases[h] = base
	}
}

func sortKey(e object.TreeEntry) string {
	if e.Mode == filemode.Dir {
		return e.Name + "/"
	}
	return e.Name
}

func writeBlob(s storer.EncodedObjectStorer, content []byte) (plumbing.Hash, error) {
	obj := s.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(content)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write blob: %w", err)
	}
	if _, err := w.Write(content); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write blob: %w", err)
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write blob: %w", err)
	}
	return s.SetEncodedObject(obj)
}

// Snapshot reads the tree of one commit.
type Snapshot struct {
	Commit plumbing.Hash
	tree   *object.Tree
	storer blobReader

	mu      sync.Mutex
	subs    map[string]*object.Tree // subtrees by path
	trees   *treeCache              // decoded trees by hash, shared with the Repo
	objects storer.EncodedObjectStorer
}

// blobReader reads blobs by hash (a *git.Repository).
type blobReader interface {
	BlobObject(h plumbing.Hash) (*object.Blob, error)
}

// ReadFile implements gitops.Reader.
func (s *Snapshot) ReadFile(name string) ([]byte, error) {
	if s.tree == nil {
		return nil, notExist(name)
	}
	dir, base := path.Split(name)
	t, err := s.subtree(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, notExist(name)
	}
	e, err := t.FindEntry(base)
	if err != nil || !e.Mode.IsFile() {
		return nil, notExist(name)
	}
	return s.ReadBlob(e.Hash.String())
}

// ReadDir implements gitops.Reader.
func (s *Snapshot) ReadDir(name string) ([]string, error) {
	t, err := s.subtree(name)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(t.Entries))
	for i, e := range t.Entries {
		names[i] = e.Name
	}
	sort.Strings(names)
	return names, nil
}

// WalkFiles calls fn for every file below dir.
func (s *Snapshot) WalkFiles(dir string, fn func(name string, content []byte) error) error {
	t, err := s.subtree(dir)
	if err != nil {
		return err
	}
	return t.Files().ForEach(func(f *object.File) error {
		c, err := f.Contents()
		if err != nil {
			return fmt.Errorf("read %s/%s: %w", dir, f.Name, err)
		}
		return fn(dir+"/"+f.Name, []byte(c))
	})
}

// subtree returns the tree of a directory. Trees are remembered per
// snapshot: a plan reads the same few folders many times, and decoding a
// folder of 10,000 tenants each time would dominate.
func (s *Snapshot) subtree(name string) (*object.Tree, error) {
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
		e, err := t.FindEntry(part)
		if err != nil || e.Mode != filemode.Dir {
			return nil, notExist(name)
		}
		if s.trees != nil {
			t, err = s.trees.get(s.objects, e.Hash)
		} else {
			t, err = t.Tree(part)
		}
		if err != nil {
			return nil, notExist(name)
		}
	}
	if s.subs == nil {
		s.subs = map[string]*object.Tree{}
	}
	s.subs[name] = t
	return t, nil
}

// DirHash returns the hash of the tree of dir: equal hashes mean equal
// contents, so results computed from a directory can be cached by it.
func (s *Snapshot) DirHash(dir string) (string, error) {
	t, err := s.subtree(dir)
	if err != nil {
		return "", err
	}
	return t.Hash.String(), nil
}

// Entries lists the files (name to blob hash) and subdirectories of dir.
func (s *Snapshot) Entries(dir string) (map[string]string, []string, error) {
	t, err := s.subtree(dir)
	if err != nil {
		return nil, nil, err
	}
	files := make(map[string]string, len(t.Entries))
	var dirs []string
	for _, e := range t.Entries {
		switch {
		case e.Mode == filemode.Dir:
			dirs = append(dirs, e.Name)
		case e.Mode.IsFile():
			files[e.Name] = e.Hash.String()
		}
	}
	return files, dirs, nil
}

// ReadBlob returns the content of a blob by hash.
func (s *Snapshot) ReadBlob(hash string) ([]byte, error) {
	if s.tree == nil {
		return nil, notExist(hash)
	}
	b, err := s.storer.BlobObject(plumbing.NewHash(hash))
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", hash, err)
	}
	r, err := b.Reader()
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", hash, err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("read blob %s: %w", hash, err)
	}
	return buf.Bytes(), nil
}
