package intent

import (
	"maps"
	"path"
	"strings"
)

// fileMap maps the path of each listed file to its content id, held by
// folder: deriving the tree after a change copies the folders the change
// touches, not every file of a tier of 10,000 tenants or of all its shard
// folders. A fileMap shared between trees is never written; set and del
// copy a folder's map the first time they change it.
type fileMap struct {
	dirs  map[string]map[string]string // folder -> name -> content id
	owned map[string]bool              // folders whose map is this fileMap's own
	n     int
}

func newFileMap() *fileMap {
	return &fileMap{dirs: map[string]map[string]string{}, owned: map[string]bool{}}
}

// clone returns a fileMap that shares every folder's map until it changes
// one.
func (f *fileMap) clone() *fileMap {
	return &fileMap{dirs: maps.Clone(f.dirs), owned: map[string]bool{}, n: f.n}
}

func (f *fileMap) get(p string) (string, bool) {
	dir, name := path.Split(p)
	id, ok := f.dirs[dir][name]
	return id, ok
}

func (f *fileMap) own(dir string) map[string]string {
	m := f.dirs[dir]
	if !f.owned[dir] {
		m = maps.Clone(m)
		if m == nil {
			m = map[string]string{}
		}
		f.dirs[dir], f.owned[dir] = m, true
	}
	return m
}

func (f *fileMap) set(p, id string) {
	dir, name := path.Split(p)
	m := f.own(dir)
	if _, ok := m[name]; !ok {
		f.n++
	}
	m[name] = id
}

func (f *fileMap) del(p string) {
	dir, name := path.Split(p)
	if _, ok := f.dirs[dir][name]; !ok {
		return
	}
	delete(f.own(dir), name)
	f.n--
}

// under returns the paths of the files below folder p.
func (f *fileMap) under(p string) []string {
	var out []string
	for dir, m := range f.dirs {
		if !strings.HasPrefix(dir, p+"/") {
			continue
		}
		for name := range m {
			out = append(out, dir+name)
		}
	}
	return out
}

// paths returns every path.
func (f *fileMap) paths() []string {
	out := make([]string, 0, f.n)
	for dir, m := range f.dirs {
		for name := range m {
			out = append(out, dir+name)
		}
	}
	return out
}
