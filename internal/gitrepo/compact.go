package gitrepo

import (
	"fmt"
	"os"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
)

const (
	compactSuffix = ".compact"
	// compactEvery is how many new heads a clone takes in before it is
	// compacted.
	compactEvery = 500
	// minBytes is the least growth of a memory clone worth compacting.
	minBytes = 16 << 20
)

// maybeCompact keeps a long-lived clone from growing without bound: every
// fetch or commit adds objects (at 10,000 tenants a tier's tree alone is
// 400 KB) and, on disk, a pack file that every later lookup searches. Once
// enough has accumulated (500 new heads, or in memory half as many bytes
// again as after the last compaction, at least 16 MB), the clone is rebuilt
// holding only the heads of the branch and the ledger branch and their
// trees. Nothing needs the older objects: pushes send only new objects, the
// server negotiates fetches from the heads, and the ledger's records are
// read from its head's tree, not from history.
//
// A new head is counted either way; with now false (a fetch whose caller
// still holds commits it wrote on the old heads) the compaction waits for
// the next call with now true, the push.
func (r *Repo) maybeCompact(now bool) error {
	r.heads++
	every := r.compactEvery
	if every <= 0 {
		every = compactEvery
	}
	due := r.heads >= every
	r.mu.Lock()
	stored := r.storedBytes
	r.mu.Unlock()
	if _, ok := r.repo.Storer.(*memory.Storage); ok && stored > r.compactedSize+max(r.compactedSize/2, minBytes) {
		due = true // at 10,000 tenants each commit adds a 400 KB tree
	}
	if !now || !due || r.head.IsZero() {
		return nil
	}
	return r.compact()
}

func (r *Repo) compact() error {
	dir := ""
	if r.opts.Dir != "" {
		dir = r.opts.Dir + compactSuffix
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("compact clone: %w", err)
		}
	}
	fresh, err := openStorage(dir)
	if err != nil {
		return fmt.Errorf("compact clone: %w", err)
	}
	src, dst := r.repo.Storer, fresh.Storer
	if err := copyCommit(src, dst, r.head); err != nil {
		return fmt.Errorf("compact clone: %w", err)
	}
	if !r.ledgerHead.IsZero() {
		if err := copyCommit(src, dst, r.ledgerHead); err != nil {
			return fmt.Errorf("compact clone: %w", err)
		}
	}
	// The clone now holds the heads without their history: it says so to
	// the server (shallow, as a clone of depth 1), which otherwise counts
	// every object reachable from the heads' ancestors as held here, and
	// leaves out of a later fetch an older tree a new commit brings back (a
	// revert), read then as absent.
	shallow := []plumbing.Hash{r.head}
	if !r.ledgerHead.IsZero() {
		shallow = append(shallow, r.ledgerHead)
	}
	if err := dst.SetShallow(shallow); err != nil {
		return fmt.Errorf("compact clone: %w", err)
	}
	cfg, err := r.repo.Config()
	if err != nil {
		return fmt.Errorf("compact clone: %w", err)
	}
	if err := fresh.SetConfig(cfg); err != nil {
		return fmt.Errorf("compact clone: %w", err)
	}
	if err := dst.SetReference(plumbing.NewHashReference(r.trackingRef(), r.head)); err != nil {
		return fmt.Errorf("compact clone: %w", err)
	}
	if !r.ledgerHead.IsZero() {
		if err := dst.SetReference(plumbing.NewHashReference(r.ledgerTrackingRef(), r.ledgerHead)); err != nil {
			return fmt.Errorf("compact clone: %w", err)
		}
	}
	if r.opts.Dir != "" {
		if err := os.RemoveAll(r.opts.Dir); err != nil {
			return fmt.Errorf("compact clone: %w", err)
		}
		if err := os.Rename(dir, r.opts.Dir); err != nil {
			return fmt.Errorf("compact clone: %w", err)
		}
		if fresh, err = openStorage(r.opts.Dir); err != nil {
			return fmt.Errorf("compact clone: %w", err)
		}
	}
	r.repo = fresh
	r.heads, r.compactedSize = 0, 1
	if ms, ok := fresh.Storer.(*memory.Storage); ok {
		r.compactedSize = memoryBytes(ms)
	}
	r.mu.Lock()
	r.storedBytes = r.compactedSize
	r.written, r.trackedCount = nil, 0
	r.trees = nil // its trees read from the old storage, and would keep it alive
	r.mu.Unlock()
	return nil
}

// memoryBytes is the size of the objects a memory clone holds.
func memoryBytes(ms *memory.Storage) int64 {
	var n int64
	for _, o := range ms.Objects {
		n += o.Size()
	}
	return n
}

// copyCommit copies a commit and everything its tree holds (not its
// parents).
func copyCommit(src, dst storer.EncodedObjectStorer, commit plumbing.Hash) error {
	c, err := object.GetCommit(src, commit)
	if err != nil {
		return err
	}
	seen := map[plumbing.Hash]bool{}
	var walk func(h plumbing.Hash, tree bool) error
	walk = func(h plumbing.Hash, tree bool) error {
		if seen[h] {
			return nil
		}
		seen[h] = true
		obj, err := src.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return err
		}
		if _, err := dst.SetEncodedObject(obj); err != nil {
			return err
		}
		if !tree {
			return nil
		}
		t, err := object.DecodeTree(src, obj)
		if err != nil {
			return err
		}
		for _, e := range t.Entries {
			if e.Mode == filemode.Submodule {
				continue
			}
			if err := walk(e.Hash, e.Mode == filemode.Dir); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(c.TreeHash, true); err != nil {
		return err
	}
	obj, err := src.EncodedObject(plumbing.CommitObject, commit)
	if err != nil {
		return err
	}
	_, err = dst.SetEncodedObject(obj)
	return err
}
