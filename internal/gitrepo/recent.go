package gitrepo

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/tenant-worker/tenant-worker/internal/gitobj"
)

// RecentCommit is a commit of the branch's recent history and what it
// changed.
type RecentCommit struct {
	Hash    plumbing.Hash
	When    time.Time // committer time
	Message string
	// Changed maps each changed path to its new content; nil: deleted.
	Changed map[string][]byte
	// Before reads the tree of its first parent.
	Before *Snapshot
}

// Recent reads the commits the branch gained since since, newest first,
// from a shallow clone of at most depth commits made for the purpose (the
// clone the pipeline keeps may hold no history: it is compacted). The walk
// stops at the first commit older than since, at a merge's first parent,
// or at the clone's shallow edge.
func (r *Repo) Recent(ctx context.Context, since time.Time, depth int) ([]RecentCommit, error) {
	call, err := r.startCall(ctx, "read the history of "+r.url(), 4*r.opts.Timeout)
	if err != nil {
		return nil, err
	}
	defer call.end()
	st := memory.NewStorage()
	repo, err := git.CloneContext(call.ctx, st, nil, &git.CloneOptions{
		URL: r.url(), Auth: call.auth, ReferenceName: plumbing.NewBranchReferenceName(r.opts.Branch),
		SingleBranch: true, Depth: depth + 1, Tags: git.NoTags, NoCheckout: true, ProxyOptions: call.proxy,
	})
	if err != nil {
		return nil, r.classify(call.ctx, "read the history of "+r.url(), err)
	}
	ref, err := repo.Head()
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	trees := gitobj.NewTreeCache(treeCacheSize)
	snapshot := func(c *object.Commit) (*Snapshot, error) {
		t, err := trees.Get(st, c.TreeHash)
		if err != nil {
			return nil, err
		}
		return &Snapshot{Commit: c.Hash, tree: t, trees: trees, objects: st}, nil
	}
	var out []RecentCommit
	c, err := repo.CommitObject(ref.Hash())
	for n := 0; err == nil && n < depth && !c.Committer.When.Before(since); n++ {
		if c.NumParents() == 0 {
			break
		}
		parent, perr := c.Parent(0)
		if perr != nil {
			break // the shallow edge
		}
		rc := RecentCommit{Hash: c.Hash, When: c.Committer.When, Message: c.Message}
		if rc.Changed, err = changed(parent, c); err != nil {
			return nil, fmt.Errorf("history: diff %s: %w", c.Hash, err)
		}
		if rc.Before, err = snapshot(parent); err != nil {
			return nil, fmt.Errorf("history: tree of %s: %w", parent.Hash, err)
		}
		out = append(out, rc)
		c = parent
	}
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return out, nil
}

// changed lists what c changed against parent: new contents, nil for
// deleted files.
func changed(parent, c *object.Commit) (map[string][]byte, error) {
	from, err := parent.Tree()
	if err != nil {
		return nil, err
	}
	to, err := c.Tree()
	if err != nil {
		return nil, err
	}
	changes, err := object.DiffTree(from, to)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, ch := range changes {
		if ch.To.Name == "" {
			out[ch.From.Name] = nil
			continue
		}
		f, err := to.TreeEntryFile(&ch.To.TreeEntry)
		if err != nil {
			return nil, err
		}
		rd, err := f.Reader()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(rd)
		rd.Close()
		if err != nil {
			return nil, err
		}
		if b == nil {
			b = []byte{}
		}
		out[ch.To.Name] = b
		if ch.From.Name != "" && ch.From.Name != ch.To.Name {
			out[ch.From.Name] = nil // a rename
		}
	}
	return out, nil
}
