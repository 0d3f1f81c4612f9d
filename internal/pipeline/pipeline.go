// Package pipeline carries out requests against the GitOps repository: sync
// the clone, render each change, commit it, validate the committed tree, and
// push the new commits together. One Pipeline serves one repository and
// branch and runs one batch at a time; its lock stands in for the Argo
// Workflows mutex of the reference platform.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/intent"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/internal/validate"
	"github.com/tenant-worker/tenant-worker/internal/wait"
)

// Repository is what the pipeline needs of a clone.
type Repository interface {
	// Head is the remote branch as last seen (fetched or pushed).
	Head() plumbing.Hash
	Fetch(ctx context.Context) (plumbing.Hash, error)
	// Refetch is Fetch keeping the commits written and not yet pushed (and
	// the heads they were made on) readable: a rebase pushes them still.
	Refetch(ctx context.Context) (plumbing.Hash, error)
	Snapshot(commit plumbing.Hash) (*gitrepo.Snapshot, error)
	Commit(parent plumbing.Hash, files map[string][]byte, msg string) (plumbing.Hash, error)
	CommitInfo(h plumbing.Hash) ([]plumbing.Hash, string, error)
	// LedgerHead is the remote ledger branch as last seen (zero while it
	// does not exist).
	LedgerHead() plumbing.Hash
	// PushRefs moves the branch and the ledger branch in one atomic
	// compare-and-swap.
	PushRefs(ctx context.Context, main, ledger gitrepo.Move) error
	// SupportsAtomic tells whether the server would take a push from us
	// now (reachable, credentials accepted) and moves several refs as one
	// (git's atomic capability), without pushing.
	SupportsAtomic(ctx context.Context) (bool, error)
	// Forget drops what the Repository keeps to push commits that will
	// never be pushed.
	Forget(commits ...plumbing.Hash)
	// Touches tells whether the change from one commit to another differs
	// in anything recorded in reads.
	Touches(from, to plumbing.Hash, reads *gitrepo.Reads) (bool, error)
	// WrittenBytes counts the bytes of the objects commits have written,
	// since the Repository was opened.
	WrittenBytes() int64
}

// Job is one request of a batch, with the message it came from.
type Job struct {
	Request message.Request
	// MessageID and Queue are recorded as trailers on the commit, so a
	// redelivered message is recognised after a crash or by another replica.
	MessageID string
	Queue     string
	// Group is the FIFO message group, empty for standard queues. A failed
	// job stops the later jobs of its group, to keep their order.
	Group string
	// SentAt is SQS's SentTimestamp. With it, the job is decided by the
	// ledger in the repository (latest send time wins, per tenant and
	// pooled environment; an id already applied is a duplicate); zero
	// keeps no ledger.
	SentAt time.Time
}

// Result is the outcome of one job.
type Result struct {
	// Err is nil on success. A reject.Error means the request can never
	// succeed; ErrSkipped and other errors are transient.
	Err error
	// Applied is true when a commit carrying the request was pushed.
	Applied bool
	// Duplicate is true when the message had already been applied (its id
	// is in the ledger).
	Duplicate bool
	// Stale is true when, in send order, messages sent after it undo what
	// it asks: it changes nothing (the pushed commit records it in the
	// ledger).
	Stale bool
	// Recorded is true when what the message asks for was in place and the
	// pushed commit only records it in the ledger.
	Recorded bool
	// Held is true when the pushed commit only records the message in the
	// ledger, to be carried out when a message sent before it arrives (see
	// gitops.Change.Held).
	Held bool
	// Resolved are the messages handled earlier whose outcome the pushed
	// change alters (a held one carried out, or rejected once its hold
	// ended; an applied one now held).
	Resolved []gitops.Resolution
	// Commit is the pushed commit, or the branch head for a no-op.
	Commit plumbing.Hash
	// Message is the commit message subject.
	Message string
	// Attempts counts push attempts.
	Attempts int
	// Releases are the HelmReleases the pushed change touches, and Paths
	// the files it wrote or removed (both only with Options.Releases).
	Releases []gitops.Release
	Paths    []string
	// OwnShards: the repository's layout applies each shard folder by a
	// Kustomization of its own (with Options.Releases).
	OwnShards bool
	// Steps is the time spent in each step (lock, sync, render, commit,
	// validate, push) by the batch the job was part of, over all attempts.
	Steps map[string]time.Duration
}

// ErrSkipped marks a job not tried because an earlier job of its FIFO group
// failed in the same batch.
var ErrSkipped = errors.New("skipped to keep the order of its message group")

// Options configure a Pipeline.
type Options struct {
	Layout gitops.Layout
	// MaxAttempts bounds the push attempts of one batch after lost races.
	MaxAttempts int
	// RetryDelay scales the random pause between attempts.
	RetryDelay time.Duration
	// Retention is how long SQS may still deliver a message (the queues'
	// MessageRetentionPeriod): the ledger keeps nothing older.
	Retention time.Duration
	// Hold is how long a message that does not fit where its tenant is,
	// in send order, waits for a message sent before it (0: Retention).
	Hold time.Duration
	// Observer, if set, hears each step, lock wait and push.
	Observer Observer
	// Releases asks for each result's HelmReleases (for following the
	// change into the cluster).
	Releases bool
	// DryRun does everything but the push: a job's Applied then means it
	// would be pushed, and its Commit exists only in the local clone.
	DryRun bool
	// BatchBytes bounds what the commits of one push may write: a batch
	// that passes it is pushed as far as it got, and its other jobs make
	// the next push, under the same lock. The clone holds what commits
	// write until they are pushed, and in a tier's own folder at 10,000
	// tenants each commit writes about 640 KB (500 of them: 320 MB).
	BatchBytes int64
}

// Pipeline applies batches of jobs to one repository and branch, one batch
// at a time.
type Pipeline struct {
	repo    Repository
	opts    Options
	checker *validate.Checker
	intent  *intent.Checker
	observe Observer
	lock    chan struct{}
}

// New builds a pipeline.
func New(repo Repository, opts Options) *Pipeline {
	opts = opts.withDefaults()
	return &Pipeline{
		repo:    repo,
		opts:    opts,
		checker: validate.NewChecker(opts.Layout),
		intent:  intent.NewChecker(opts.Layout),
		observe: opts.Observer,
		lock:    make(chan struct{}, 1),
	}
}

// withDefaults fills in what o leaves unset, in one place.
func (o Options) withDefaults() Options {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = 20 * time.Millisecond
	}
	if o.Retention <= 0 {
		o.Retention = 14 * 24 * time.Hour // the most SQS keeps a message
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = 64 << 20
	}
	return o
}

// ApplyOne carries out a single request.
func (p *Pipeline) ApplyOne(ctx context.Context, req message.Request) Result {
	return p.Apply(ctx, []Job{{Request: req}})[0]
}

// Apply carries out jobs in order: each applied job gets its own commit, and
// all of them are pushed at once. It returns one result per job.
func (p *Pipeline) Apply(ctx context.Context, jobs []Job) []Result {
	return p.apply(ctx, jobs, p.opts.DryRun)
}

// Probe tells whether the fault that job met (git unreachable, credentials
// refused, no atomic push, a repository that does not build) is gone: the
// server must take an atomic push from us, and job must go through everything but the push on a
// fresh head without meeting a fault of the repository. A job that would
// now be rejected passes: it is its own fault, not the repository's.
func (p *Pipeline) Probe(ctx context.Context, job Job) error {
	if err := p.CanPushAtomic(ctx); err != nil {
		return err
	}
	// A dry run of the very delivery, its id too: the ledger's group of
	// the message is read as the delivery reads it (nothing is pushed).
	res := p.apply(ctx, []Job{job}, true)[0]
	if _, rejected := reject.As(res.Err); rejected {
		return nil
	}
	return res.Err
}

// CanPushAtomic tells whether the server would take a push from us now,
// both branches as one: gitrepo.ErrNoAtomic when it cannot move them
// together.
func (p *Pipeline) CanPushAtomic(ctx context.Context) error {
	atomic, err := p.repo.SupportsAtomic(ctx)
	if err == nil && !atomic {
		err = gitrepo.ErrNoAtomic
	}
	return err
}

// Sync fetches the branch under the repository lock and returns its head.
func (p *Pipeline) Sync(ctx context.Context) (head plumbing.Hash, err error) {
	err = p.locked(ctx, func() error {
		head, err = p.repo.Fetch(ctx)
		return err
	})
	return head, err
}

// Read calls fn with the branch as last seen, under the repository lock.
func (p *Pipeline) Read(ctx context.Context, fn func(r gitops.Reader) error) error {
	return p.locked(ctx, func() error { return p.readAt(ctx, p.repo.Head(), false, fn) })
}

// ReadAt calls fn with the snapshot of commit, under the repository lock,
// fetching the branch first when the clone does not have it.
func (p *Pipeline) ReadAt(ctx context.Context, commit plumbing.Hash, fn func(r gitops.Reader) error) error {
	return p.locked(ctx, func() error { return p.readAt(ctx, commit, true, fn) })
}

// readAt calls fn with the snapshot of commit, fetching once when the
// clone lacks it and fetch is true; the caller holds the lock.
func (p *Pipeline) readAt(ctx context.Context, commit plumbing.Hash, fetch bool, fn func(r gitops.Reader) error) error {
	snap, err := p.repo.Snapshot(commit)
	if err != nil && fetch {
		if _, ferr := p.repo.Fetch(ctx); ferr != nil {
			return fmt.Errorf("open %s: %w (fetch: %v)", commit, err, ferr)
		}
		snap, err = p.repo.Snapshot(commit)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", commit, err)
	}
	return fn(snap)
}

// ReadSince calls fn, under the repository lock, with the branch's
// first-parent chain from since to the branch as last seen, oldest first,
// both included: at most max commits after since. complete says the chain
// starts at since; without it (since empty, not found within max commits,
// or not on the chain: history rewritten) the chain is the head alone.
func (p *Pipeline) ReadSince(ctx context.Context, since string, max int, fn func(chain []*gitrepo.Snapshot, complete bool) error) error {
	return p.locked(ctx, func() error {
		head, err := p.repo.Snapshot(p.repo.Head())
		if err != nil {
			return fmt.Errorf("open %s: %w", p.repo.Head(), err)
		}
		chain := []*gitrepo.Snapshot{head}
		for since != "" && len(chain) <= max+1 {
			c := chain[len(chain)-1]
			if c.Commit.String() == since {
				slices.Reverse(chain)
				return fn(chain, true)
			}
			parents, _, err := p.repo.CommitInfo(c.Commit)
			if err != nil || len(parents) == 0 {
				break
			}
			parent, err := p.repo.Snapshot(parents[0])
			if err != nil {
				break
			}
			chain = append(chain, parent)
		}
		return fn([]*gitrepo.Snapshot{head}, false)
	})
}

// locked runs fn holding the repository lock.
func (p *Pipeline) locked(ctx context.Context, fn func() error) error {
	select {
	case p.lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for the repository lock: %w", context.Cause(ctx))
	}
	defer func() { <-p.lock }()
	return fn()
}

// apply is Apply, pushing nothing when dryRun.
func (p *Pipeline) apply(ctx context.Context, jobs []Job, dryRun bool) []Result {
	results := make([]Result, len(jobs))
	waited := time.Now()
	select {
	case p.lock <- struct{}{}:
	case <-ctx.Done():
		return failAll(len(jobs), fmt.Errorf("wait for the repository lock: %w", context.Cause(ctx)), 0)
	}
	// The lock is a buffered channel released by this defer: it cannot leak
	// past the call, whatever happens inside.
	defer func() { <-p.lock }()
	lockWait := time.Since(waited)
	p.observe.LockWaited(lockWait)
	steps := map[string]time.Duration{string(StepLock): lockWait}
	withSteps := func(rs []Result) []Result {
		for i := range rs {
			rs[i].Steps = steps
		}
		return rs
	}

	// Jobs past the batch's byte bound make the next push. A group whose
	// message failed holds back its later messages across that cut too.
	// A part whose push failed, or a shutdown whose grace ran out, ends the
	// batch: the jobs not started fail with it, for SQS to redeliver.
	failed := map[string]bool{}
	for from := 0; from < len(jobs); {
		part, pushErr := p.applyPart(ctx, jobs[from:], dryRun, failed, steps)
		for i, r := range part {
			if holdsBack(jobs[from+i], r.Err) {
				failed[jobs[from+i].Group] = true
			}
		}
		copy(results[from:], part)
		from += len(part)
		stop := pushErr
		if cause := context.Cause(ctx); stop == nil && cause != nil {
			stop = fmt.Errorf("not started: %w", cause)
		}
		if stop != nil {
			copy(results[from:], failAll(len(jobs)-from, stop, 0))
			break
		}
	}
	return withSteps(results)
}

// applyPart applies jobs, or as many of them as fit BatchBytes (at least
// one), with the repository lock held, and returns their results and the
// error of their push, if it failed. failed holds the groups whose earlier
// message failed.
func (p *Pipeline) applyPart(ctx context.Context, jobs []Job, dryRun bool, failed map[string]bool, steps map[string]time.Duration) ([]Result, error) {
	log := zerolog.Ctx(ctx)
	plans := map[int]planned{} // kept across attempts
	// What the attempts read of the branch, so that a lost race to a
	// change that touches none of it is rebased rather than run again.
	reads := gitrepo.NewReads()
	// The first attempt builds on the head as last seen, without a fetch:
	// the push is a compare-and-swap, so a stale head costs only a lost
	// race. Decisions that push nothing are confirmed on a fresh head.
	how := mode{optimistic: !p.repo.Head().IsZero() && !dryRun}
	var lost *batch // the attempt that lost the last race
	for attempt := 1; ; {
		var next again
		var err error
		b := lost
		var rebased, fetched bool
		if b != nil {
			rebased, fetched = b.rebase(ctx)
		}
		if rebased {
			next, err = b.pushRun(ctx)
		} else {
			// A rebase that could not be made fetched the head: the run
			// builds on it without fetching again.
			m := how
			m.fetched = fetched
			b = &batch{p: p, jobs: jobs, results: make([]Result, len(jobs)), plans: plans, mode: m, dryRun: dryRun, reads: reads, failed: failed}
			next, err = b.run(ctx)
			jobs = b.jobs // as far as the byte bound let it go: the next attempts go as far
		}
		lost = nil
		ev := log.Debug().Int("jobs", len(jobs)).Int("attempt", attempt).Bool("rebased", rebased).Str("again", string(next)).AnErr("push_error", err)
		for step, d := range b.spent {
			ev = ev.Dur(string(step), d)
			steps[string(step)] += d
		}
		ev.Msg("batch attempt done")
		switch {
		case next == fetchFirst:
			// A no-op, a duplicate or a refusal decided on a head that may
			// be stale is not trusted: decide again on a fetched head.
			how.optimistic = false
			continue
		case next == jobByJob:
			log.Info().Err(err).Msg("batch does not build; validating its messages one by one")
			how.perJob = true
			continue
		case next == lostRace && attempt < p.opts.MaxAttempts:
			lost = b
		default:
			return b.finish(err, attempt), err
		}
		// A lost race: fetch, re-apply, push again, after a short random
		// pause: enough to break the lockstep of replicas racing each
		// other, short enough to win against a busy writer.
		delay := rand.N(p.opts.RetryDelay * time.Duration(min(attempt, 4)))
		log.Info().Err(err).Int("attempt", attempt).Dur("retry_in", delay).Msg("push lost a race; re-applying on the new head")
		if err := wait.Sleep(ctx, delay); err != nil {
			err = fmt.Errorf("interrupted while waiting to retry: %w", err)
			return failAll(len(jobs), err, attempt), err
		}
		attempt++
		how = mode{}
	}
}

// failAll is n results that all failed with err.
func failAll(n int, err error, attempts int) []Result {
	rs := make([]Result, n)
	for i := range rs {
		rs[i] = Result{Err: err, Attempts: attempts}
	}
	return rs
}

// holdsBack tells whether job's failure err holds back the later messages
// of its FIFO group. A rejected message is settled for good; only a
// transient failure, which will be redelivered, must keep the rest of its
// group waiting, in this push and in the next parts of the batch.
func holdsBack(job Job, err error) bool {
	if err == nil || job.Group == "" {
		return false
	}
	_, rejected := reject.As(err)
	return !rejected
}

// again is why a batch goes again, and how; the empty value: it is done.
type again string

const (
	// fetchFirst: something was decided on the head as last seen without
	// pushing (a no-op, a duplicate, a refusal): decide again on a fetched
	// head, which the push's compare-and-swap cannot confirm.
	fetchFirst again = "fetch_first"
	// jobByJob: the batch's tree does not build: check after every job to
	// find the one that breaks it.
	jobByJob again = "job_by_job"
	// lostRace: another writer moved the branch: fetch, re-apply and push
	// again, as a new attempt.
	lostRace again = "lost_race"
)

// mode is how a batch is run.
type mode struct {
	optimistic bool // build on the head as last seen, without a fetch
	fetched    bool // the head was fetched just before: build on it
	perJob     bool // build the kustomizations after every job, not once
}

// batch is one run of a batch of jobs.
type batch struct {
	p       *Pipeline
	jobs    []Job
	results []Result
	mode
	dryRun bool // everything but the push
	// pending marks jobs whose commit waits for the push.
	pending []bool
	base    plumbing.Hash // the remote head the run started from
	tip     plumbing.Hash // the last commit of the run
	// ledgerBase and ledgerTip are the same for the ledger branch.
	ledgerBase, ledgerTip plumbing.Hash
	// made is every commit of the run on the branch, in order, with what
	// it writes: what a rebase writes again on a new head.
	made []made
	// reads records what the batch's attempts read of the branch.
	reads   *gitrepo.Reads
	ledger  ledgerRun // the jobs' commits on the ledger branch
	changed []string  // paths the pending commits change
	spent   map[Step]time.Duration
	plans   map[int]planned // by job index, shared by the runs of a batch
	// failed holds the groups whose message failed in an earlier part of
	// the batch: their later messages wait.
	failed map[string]bool
}

// finish turns the attempt's per-job results into final ones, given how
// the push went.
func (b *batch) finish(pushErr error, attempt int) []Result {
	first := -1 // the first job whose commit waited for the push
	for i, pending := range b.pending {
		if pending {
			first = i
			break
		}
	}
	for i := range b.results {
		r := &b.results[i]
		r.Attempts = attempt
		switch {
		case first < 0 || i < first:
			// Decided on the remote head itself: stands whatever the push did.
		case pushErr != nil:
			// Decided on top of commits that were not pushed: all void.
			*r = Result{Err: pushErr, Attempts: attempt}
		case b.pending[i]:
			r.Applied = true
		}
	}
	return b.results
}

// run runs the batch once and says whether it must go again, and why, or
// how its push went.
func (b *batch) run(ctx context.Context) (again, error) {
	b.pending = make([]bool, len(b.jobs))
	if err := b.timed(StepSync, func() error { return b.sync(ctx) }); err != nil {
		for i := range b.results {
			b.results[i].Err = err
		}
		return "", nil // every job failed alike; nothing to push
	}
	failedGroups := map[string]bool{}
	maps.Copy(failedGroups, b.failed)
	written := b.p.repo.WrittenBytes()
	for i, job := range b.jobs {
		if job.Group != "" && failedGroups[job.Group] {
			b.results[i].Err = ErrSkipped
			continue
		}
		b.applyJob(ctx, i)
		if holdsBack(job, b.results[i].Err) {
			failedGroups[job.Group] = true
		}
		if !b.dryRun && i+1 < len(b.jobs) && b.p.repo.WrittenBytes()-written > b.p.opts.BatchBytes {
			// What the clone holds until the push is bounded: push this
			// much, and the rest goes next (a dry run pushes nothing, and
			// its later jobs must see its earlier ones). The rest wait
			// again, as they did for the lock, until the next part starts.
			b.p.observe.StepStarted(b.jobs[i+1:], StepLock)
			b.jobs, b.results, b.pending = b.jobs[:i+1], b.results[:i+1], b.pending[:i+1]
			break
		}
	}
	if b.optimistic && !b.allApplied() {
		return fetchFirst, nil
	}
	if b.tip == b.base && b.ledgerTip == b.ledgerBase {
		return "", nil
	}
	if b.tip != b.base {
		if err := b.checkTip(); err != nil {
			if !b.perJob {
				return jobByJob, err
			}
			// Each message passed on its own and together they do not
			// build (resources that a kustomization's patch or prefix
			// makes one): nothing tells whose the fault is, and what
			// Flux would refuse is not pushed.
			return "", fmt.Errorf("%w: the batch's changes build one by one but not together: %v", gitops.ErrBroken, err)
		}
	}
	if b.dryRun {
		return "", nil
	}
	if err := b.timed(StepCommit, func() error { return b.squashLedger(ctx) }); err != nil {
		return "", err
	}
	return b.pushRun(ctx)
}

// allApplied reports whether every job of the attempt made a commit.
func (b *batch) allApplied() bool {
	for _, p := range b.pending {
		if !p {
			return false
		}
	}
	return true
}

// timed runs one step and records its duration.
func (b *batch) timed(step Step, fn func() error) error {
	b.p.observe.StepStarted(b.jobs, step)
	start := time.Now()
	err := fn()
	d := time.Since(start)
	b.p.observe.StepDone(step, d)
	if b.spent == nil {
		b.spent = map[Step]time.Duration{}
	}
	b.spent[step] += d
	return err
}
