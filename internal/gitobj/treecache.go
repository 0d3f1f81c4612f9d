package gitobj

import (
	"fmt"
	"slices"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// TreeCache keeps recently used decoded trees by hash, shared by the
// commits and snapshots of one repository (a TreeCache is safe for
// concurrent use; its trees are read from one storage, and a cache must not
// outlive it). A message reads its tier's folder when
// it is planned, committed and checked; at 10,000 tenants that is a 440 KB
// tree, so each version is decoded at most once, and the versions a commit
// writes are put here as they are made, never decoded at all.
type TreeCache struct {
	mu    sync.Mutex
	limit int
	m     map[plumbing.Hash]*Tree
	order []plumbing.Hash // least recently used first
}

// NewTreeCache returns a cache of at most limit trees, the least recently
// used dropped first.
func NewTreeCache(limit int) *TreeCache {
	return &TreeCache{limit: limit, m: map[plumbing.Hash]*Tree{}}
}

// Get returns the tree h of s, decoding it on a miss. Trees returned are shared
// and never changed.
func (c *TreeCache) Get(s storer.EncodedObjectStorer, h plumbing.Hash) (*Tree, error) {
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
	t, err := DecodeTree(h, content)
	if err != nil {
		return nil, err
	}
	c.add(t)
	return t, nil
}

// put remembers a tree just written.
func (c *TreeCache) put(t *Tree) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[t.hash]; ok {
		c.touch(t.hash)
		return
	}
	c.add(t)
}

func (c *TreeCache) add(t *Tree) {
	if len(c.order) >= c.limit {
		delete(c.m, c.order[0])
		c.order = slices.Delete(c.order, 0, 1)
	}
	c.m[t.hash] = t
	c.order = append(c.order, t.hash)
}

// touch marks h as the most recently used.
func (c *TreeCache) touch(h plumbing.Hash) {
	if i := slices.Index(c.order, h); i >= 0 {
		c.order = append(slices.Delete(c.order, i, i+1), h)
	}
}
