package gitrepo

import (
	"fmt"
	"slices"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// treeCache keeps recently used decoded trees by hash, shared by the
// commits and snapshots of one Repo. A message reads its tier's folder when
// it is planned, committed and checked; at 10,000 tenants that is a 440 KB
// tree, so each version is decoded at most once, and the versions a commit
// writes are put here as they are made, never decoded at all.
// treeCacheSize is how many trees a Repo keeps decoded: the few folders on
// the paths one message changes, for the head and the commit it makes, and
// the folders its check reads.
const treeCacheSize = 16

type treeCache struct {
	mu    sync.Mutex
	limit int
	m     map[plumbing.Hash]*dirTree
	order []plumbing.Hash // least recently used first
}

func newTreeCache(limit int) *treeCache {
	return &treeCache{limit: limit, m: map[plumbing.Hash]*dirTree{}}
}

// get returns the tree h, decoding it on a miss. Trees returned are shared
// and never changed.
func (c *treeCache) get(s storer.EncodedObjectStorer, h plumbing.Hash) (*dirTree, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.m[h]; ok {
		c.touch(h)
		return t, nil
	}
	obj, err := s.EncodedObject(plumbing.TreeObject, h)
	if err != nil {
		return nil, fmt.Errorf("read tree %s: %w", h, err)
	}
	content, err := objectString(obj)
	if err != nil {
		return nil, fmt.Errorf("read tree %s: %w", h, err)
	}
	t, err := decodeTree(h, content)
	if err != nil {
		return nil, err
	}
	c.add(t)
	return t, nil
}

// put remembers a tree just written.
func (c *treeCache) put(t *dirTree) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[t.hash]; ok {
		c.touch(t.hash)
		return
	}
	c.add(t)
}

func (c *treeCache) add(t *dirTree) {
	if len(c.order) >= c.limit {
		delete(c.m, c.order[0])
		c.order = slices.Delete(c.order, 0, 1)
	}
	c.m[t.hash] = t
	c.order = append(c.order, t.hash)
}

// touch marks h as the most recently used.
func (c *treeCache) touch(h plumbing.Hash) {
	if i := slices.Index(c.order, h); i >= 0 {
		c.order = append(slices.Delete(c.order, i, i+1), h)
	}
}

// reset forgets every tree (after the clone is compacted into new storage).
func (c *treeCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m, c.order = map[plumbing.Hash]*dirTree{}, nil
}
