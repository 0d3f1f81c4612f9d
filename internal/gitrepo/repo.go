// Package gitrepo keeps a clone of one branch of the GitOps repository and
// writes commits to it at the object level: no worktree is ever checked out,
// so the cost of a change does not grow with the number of files. It is the
// repository side (fetch, commit, push, refs, redirects, compaction,
// snapshots); the objects themselves (trees, blobs, the tree cache, the
// packs a push sends) are encoded by package gitobj.
package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/tenant-worker/tenant-worker/internal/credentials"
	"github.com/tenant-worker/tenant-worker/internal/gitobj"
	"github.com/tenant-worker/tenant-worker/internal/signing"
)

const remoteName = "origin"

// Options configure a Repo.
type Options struct {
	URL    string
	Branch string
	// LedgerBranch is the branch that holds the worker's ledger, beside
	// Branch, moved with it in one atomic push (empty: none). It is fetched
	// when it exists; it is created by the first push that carries it.
	LedgerBranch string
	Username     string
	Token        string // never written anywhere: it is only sent as HTTP basic auth
	// Credentials, if set, is asked for the credential of every call
	// instead of Username and Token.
	Credentials credentials.Provider
	Dir         string // where the clone's objects live; empty keeps them in memory
	AuthorName  string
	AuthorEmail string
	// Timeout bounds each network call (fetch, push).
	Timeout time.Duration
	// OnMoved, if set, hears that the server redirected the repository
	// from one URL to another (a rename), once per move.
	OnMoved func(from, to string)
	// Signer, if set, signs every commit written.
	Signer signing.Signer
	// WalkingPush uses go-git's own push, which walks the history to find
	// the objects to send. Only the benchmark's floor measurement sets it.
	WalkingPush bool
}

// Repo is a bare clone of one branch.
type Repo struct {
	opts Options
	repo *git.Repository
	auth credentials.Provider
	head plumbing.Hash // the remote branch as of the last fetch or push
	// ledgerHead is the remote ledger branch as of the last fetch or push
	// (zero while it does not exist).
	ledgerHead plumbing.Hash

	mu           sync.Mutex
	written      map[plumbing.Hash]written // objects of commits not yet pushed
	trackedCount int
	receiveCaps  *capability.List // the server's receive-pack capabilities
	capsRead     time.Time        // when receiveCaps were read

	trees *gitobj.TreeCache // decoded trees, shared by commits and snapshots

	heads         int   // new heads taken in since the last compaction
	compactEvery  int   // overrides compactEvery (tests)
	compactedSize int64 // bytes held right after the last compaction (memory)
	// storedBytes is what a memory clone holds: measured after a compaction
	// or a fetch, plus what commits wrote since (counting every object a
	// commit writes, even one already held, errs towards compacting early).
	storedBytes int64
	// writtenBytes is what commits wrote since Open (WrittenBytes).
	writtenBytes int64
}

// Open opens (or creates) the clone and fetches the branch.
func Open(ctx context.Context, opts Options) (*Repo, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	repo, err := openStorage(opts.Dir)
	if err != nil && opts.Dir != "" {
		// A clone left broken (a crash mid-write) is only a cache: start over.
		if rmErr := os.RemoveAll(opts.Dir); rmErr == nil {
			repo, err = openStorage(opts.Dir)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open clone: %w", err)
	}
	r := &Repo{opts: opts, repo: repo, auth: opts.Credentials}
	if r.auth == nil {
		r.auth = credentials.Static(opts.Username, opts.Token)
	}
	if err := r.configureRemote(); err != nil {
		return nil, err
	}
	if _, err := r.Fetch(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// openStorage opens or creates the object storage: in memory, or in dir.
func openStorage(dir string) (*git.Repository, error) {
	var st storage.Storer
	if dir == "" {
		st = memory.NewStorage()
	} else {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			// A compaction interrupted between its two renames.
			_ = os.Rename(dir+compactSuffix, dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create clone dir: %w", err)
		}
		st = filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	}
	repo, err := git.Open(st, nil)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		repo, err = git.Init(st, nil)
	}
	if err != nil {
		return nil, err
	}
	if _, err := repo.Config(); err != nil {
		return nil, err
	}
	return repo, nil
}

func (r *Repo) trackingRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName(remoteName, r.opts.Branch)
}

// ledgerTrackingRef is where the ledger branch is fetched to.
func (r *Repo) ledgerTrackingRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName(remoteName, r.opts.LedgerBranch)
}

func (r *Repo) configureRemote() error {
	want := &config.RemoteConfig{
		Name:  remoteName,
		URLs:  []string{r.url()},
		Fetch: []config.RefSpec{config.RefSpec(fmt.Sprintf("+refs/heads/%s:%s", r.opts.Branch, r.trackingRef()))},
	}
	if r.opts.LedgerBranch != "" {
		// A pattern, which matches nothing rather than failing while the
		// ledger branch does not exist yet; the exact name is picked after.
		want.Fetch = append(want.Fetch, config.RefSpec(fmt.Sprintf("+refs/heads/%s*:%s*", r.opts.LedgerBranch, r.ledgerTrackingRef())))
	}
	cfg, err := r.repo.Config()
	if err != nil {
		return fmt.Errorf("read clone config: %w", err)
	}
	cfg.Remotes[remoteName] = want
	if err := r.repo.SetConfig(cfg); err != nil {
		return fmt.Errorf("write clone config: %w", err)
	}
	return nil
}

// Head is the remote branch's commit as of the last fetch or push; zero when
// the branch does not exist yet.
func (r *Repo) Head() plumbing.Hash { return r.head }

// Branch is the branch this clone follows.
func (r *Repo) Branch() string { return r.opts.Branch }

// LedgerHead is the remote ledger branch's commit as of the last fetch or
// push; zero when it does not exist (or no ledger branch is configured).
func (r *Repo) LedgerHead() plumbing.Hash { return r.ledgerHead }

// Fetch brings the remote branch up to date incrementally and returns its
// head. It may compact the clone (maybeCompact), dropping what it wrote and
// did not push, and the heads it had before.
func (r *Repo) Fetch(ctx context.Context) (plumbing.Hash, error) { return r.fetch(ctx, true) }

// Refetch is Fetch for a caller that still holds commits it wrote and has
// not pushed (a batch that lost a race, rebasing them): it does not compact
// the clone, so they and the head they were made on stay readable. The
// next push compacts, once it is due.
func (r *Repo) Refetch(ctx context.Context) (plumbing.Hash, error) { return r.fetch(ctx, false) }

func (r *Repo) fetch(ctx context.Context, mayCompact bool) (plumbing.Hash, error) {
	c, err := r.startCall(ctx, "fetch "+r.url(), r.opts.Timeout)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer c.end()
	opts := &git.FetchOptions{
		ProxyOptions: c.proxy,
		RemoteName:   remoteName,
		Auth:         c.auth,
		Force:        true,
		Tags:         git.NoTags,
		// A ledger branch deleted on the server is deleted here too, not
		// pushed against forever.
		Prune: true,
	}
	if shallow, err := r.repo.Storer.Shallow(); err == nil && len(shallow) > 0 {
		// A compacted clone holds no history: it tells the server its
		// shallow edge, which only a fetch with a depth sends, so that the
		// server counts as held here only what the heads' trees hold.
		opts.Depth = 1
	}
	err = r.repo.FetchContext(c.ctx, opts)
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		if strings.Contains(err.Error(), "couldn't find remote ref") {
			return plumbing.ZeroHash, fmt.Errorf("fetch %s: branch %q does not exist", r.url(), r.opts.Branch)
		}
		return plumbing.ZeroHash, r.classify(c.ctx, "fetch "+r.url(), err)
	}
	ref, err := r.repo.Reference(r.trackingRef(), true)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("read %s: %w", r.trackingRef(), err)
	}
	ledger := plumbing.ZeroHash
	if r.opts.LedgerBranch != "" {
		switch lref, err := r.repo.Reference(r.ledgerTrackingRef(), true); {
		case err == nil:
			ledger = lref.Hash()
		case !errors.Is(err, plumbing.ErrReferenceNotFound):
			return plumbing.ZeroHash, fmt.Errorf("read %s: %w", r.ledgerTrackingRef(), err)
		}
	}
	if ref.Hash() != r.head || ledger != r.ledgerHead {
		r.head, r.ledgerHead = ref.Hash(), ledger
		if ms, ok := r.repo.Storer.(*memory.Storage); ok {
			r.mu.Lock()
			r.storedBytes = memoryBytes(ms)
			r.mu.Unlock()
		}
		if err := r.maybeCompact(mayCompact); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	return r.head, nil
}

// treeCacheSize is how many trees a Repo keeps decoded: the few folders on
// the paths one message changes, for the head and the commit it makes, and
// the folders its check reads.
const treeCacheSize = 16

// treeCache returns the Repo's cache of decoded trees.
func (r *Repo) treeCache() *gitobj.TreeCache {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.trees == nil {
		r.trees = gitobj.NewTreeCache(treeCacheSize)
	}
	return r.trees
}

// Snapshot returns a reader over the tree of commit.
func (r *Repo) Snapshot(commit plumbing.Hash) (*Snapshot, error) {
	if commit.IsZero() {
		return &Snapshot{}, nil
	}
	c, err := r.repo.CommitObject(commit)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", commit, err)
	}
	t, err := r.treeCache().Get(r.repo.Storer, c.TreeHash)
	if err != nil {
		return nil, fmt.Errorf("read tree of %s: %w", commit, err)
	}
	return &Snapshot{Commit: commit, tree: t, trees: r.treeCache(), objects: r.repo.Storer}, nil
}

// Commit writes a commit on top of parent that applies files (path to new
// content, nil deletes) and returns its hash. Nothing is pushed.
func (r *Repo) Commit(parent plumbing.Hash, files map[string][]byte, msg string) (plumbing.Hash, error) {
	st := r.repo.Storer
	var baseTree plumbing.Hash
	var parents []plumbing.Hash
	if !parent.IsZero() {
		c, err := r.repo.CommitObject(parent)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("read commit %s: %w", parent, err)
		}
		baseTree, parents = c.TreeHash, []plumbing.Hash{parent}
	}
	var objects gitobj.ObjectLog
	tree, err := gitobj.WriteTree(st, r.treeCache(), baseTree, files, &objects)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write tree: %w", err)
	}
	if tree.IsZero() {
		return plumbing.ZeroHash, errors.New("write tree: the change would empty the repository")
	}
	sig := object.Signature{Name: r.opts.AuthorName, Email: r.opts.AuthorEmail, When: time.Now()}
	c := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: tree, ParentHashes: parents}
	if r.opts.Signer != nil {
		if err := sign(c, r.opts.Signer); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	obj := st.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("encode commit: %w", err)
	}
	h, err := st.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("store commit: %w", err)
	}
	r.track(h, parent, objects)
	r.mu.Lock()
	r.storedBytes += objects.Bytes
	r.writtenBytes += objects.Bytes
	r.mu.Unlock()
	return h, nil
}

// WrittenBytes counts the bytes of the objects commits have written since
// Open (an object written again counts again): what a batch holds in the
// clone until it is pushed.
func (r *Repo) WrittenBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writtenBytes
}

// pushWalking pushes with go-git's own push, which walks the history to find
// the objects to send; used for commits this Repo did not write.
func (r *Repo) pushWalking(c *call, main, ledger Move) error {
	opts := &git.PushOptions{RemoteName: remoteName, Auth: c.auth, ProxyOptions: c.proxy}
	for _, c := range r.commands(main, ledger) {
		opts.RefSpecs = append(opts.RefSpecs, config.RefSpec(c.New.String()+":"+c.Name.String()))
		if !c.Old.IsZero() {
			opts.RequireRemoteRefs = append(opts.RequireRemoteRefs, config.RefSpec(c.Old.String()+":"+c.Name.String()))
		}
	}
	opts.Atomic = len(opts.RefSpecs) > 1
	err := r.repo.PushContext(c.ctx, opts)
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	return err
}

// CommitInfo returns the parents and message of a commit.
func (r *Repo) CommitInfo(h plumbing.Hash) ([]plumbing.Hash, string, error) {
	c, err := r.repo.CommitObject(h)
	if err != nil {
		return nil, "", fmt.Errorf("read commit %s: %w", h, err)
	}
	return c.ParentHashes, c.Message, nil
}

// Diff returns the unified diff from commit from to commit to.
func (r *Repo) Diff(from, to plumbing.Hash) (string, error) {
	a, err := r.repo.CommitObject(from)
	if err != nil {
		return "", fmt.Errorf("read commit %s: %w", from, err)
	}
	b, err := r.repo.CommitObject(to)
	if err != nil {
		return "", fmt.Errorf("read commit %s: %w", to, err)
	}
	p, err := a.Patch(b)
	if err != nil {
		return "", fmt.Errorf("diff %s..%s: %w", from, to, err)
	}
	return p.String(), nil
}

// sign sets c's signature: s signs the commit as encoded without one, which
// is what git's verifiers check.
func sign(c *object.Commit, s signing.Signer) error {
	unsigned := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(unsigned); err != nil {
		return fmt.Errorf("encode commit for signing: %w", err)
	}
	rd, err := unsigned.Reader()
	if err != nil {
		return fmt.Errorf("encode commit for signing: %w", err)
	}
	payload, err := io.ReadAll(rd)
	if err != nil {
		return fmt.Errorf("encode commit for signing: %w", err)
	}
	sig, err := s.Sign(payload)
	if err != nil {
		return fmt.Errorf("sign commit: %w", err)
	}
	c.PGPSignature = string(sig)
	return nil
}
