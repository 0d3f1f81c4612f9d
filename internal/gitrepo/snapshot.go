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

	"github.com/tenant-worker/tenant-worker/internal/gitobj"
)

// Snapshot reads the tree of one commit.
type Snapshot struct {
	Commit plumbing.Hash
	tree   *gitobj.Tree

	mu      sync.Mutex
	subs    map[string]*gitobj.Tree // subtrees by path
	trees   *gitobj.TreeCache       // decoded trees by hash, shared with the Repo
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
	e, ok := t.Entry(base)
	if !ok || !e.Kind().IsFile() {
		return nil, notExist(name)
	}
	return s.readBlob(e.Hash)
}

// ReadDir implements gitops.Reader.
func (s *Snapshot) ReadDir(name string) ([]string, error) {
	s.reads.add(readNames, name)
	t, err := s.subtree(name)
	if err != nil {
		return nil, err
	}
	names := make([]string, t.Len())
	for i := range names {
		names[i] = t.At(i).Name
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
	for i := range t.Len() {
		e := t.At(i)
		name := dir + "/" + e.Name
		switch k := e.Kind(); {
		case k == filemode.Dir:
			if err := s.WalkFiles(name, fn); err != nil {
				return err
			}
		case k.IsFile():
			c, err := s.readBlob(e.Hash)
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
func (s *Snapshot) subtree(name string) (*gitobj.Tree, error) {
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
		e, ok := t.Entry(part)
		if !ok || !e.IsDir() {
			return nil, notExist(name)
		}
		var err error
		if t, err = s.trees.Get(s.objects, e.Hash); err != nil {
			return nil, notExist(name)
		}
	}
	if s.subs == nil {
		s.subs = map[string]*gitobj.Tree{}
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
	return t.Hash().String(), nil
}

// TreeHash is the hash of the whole tree, recorded as no read: a key for
// caching what was computed from the tree, whose reads are recorded as
// they are made.
func (s *Snapshot) TreeHash() string {
	if s.tree == nil {
		return plumbing.ZeroHash.String()
	}
	return s.tree.Hash().String()
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
	files := make(map[string]string, t.Len())
	var dirs []string
	for i := range t.Len() {
		e := t.At(i)
		switch k := e.Kind(); {
		case k == filemode.Dir:
			dirs = append(dirs, e.Name)
		case k.IsFile():
			files[e.Name] = t.RawHash(i)
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
	e, ok := t.Entry(base)
	if !ok || !e.Kind().IsFile() {
		return "", notExist(name)
	}
	return string(e.Hash[:]), nil
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
	return gitobj.ReadBlob(s.objects, h)
}
