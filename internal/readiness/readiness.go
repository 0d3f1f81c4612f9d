// Package readiness follows a pushed commit to the tenant it changes: the
// GitRepository fetched it, the Kustomizations that read its folders
// applied it, and every HelmRelease it touched is Ready at the chart version
// it asks for (or gone, for an offboarding). It says so once per message:
// ready, failed (with Flux's reason and message), superseded (a later change
// replaced it before it was ready) or timeout.
package readiness

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// Outcomes of the readiness event.
const (
	OutcomeReady   = "ready"   // every release the change touched is as it asks
	OutcomeFailed  = "failed"  // Flux reports a failure of the change
	OutcomeTimeout = "timeout" // not ready within the timeout
	// OutcomeSuperseded: a later change to the same releases (tenant, tier
	// or pooled environment) replaced it before it was ready; the event
	// names that change's message. Not a failure: what the branch asks for
	// now is the later change's, which has its own event.
	OutcomeSuperseded = "superseded"
)

// Outcomes lists every outcome of a readiness event.
var Outcomes = []string{OutcomeReady, OutcomeFailed, OutcomeSuperseded, OutcomeTimeout}

// NotReady lists the outcomes that say a change did not go live although
// nothing replaced it: the ones to alert on.
var NotReady = []string{OutcomeFailed, OutcomeTimeout}

// Stages a followed change passes, in order, before its outcome.
const (
	StagePushed  = "pushed"
	StageFetched = "fetched" // the GitRepository's artifact holds the commit
	StageApplied = "applied" // every Kustomization that reads its folders applied it
)

// Target is one message's pushed change.
type Target struct {
	MessageID, Queue, Kind, Tenant, Tier string
	Commit                               string
	Pushed                               time.Time
	Releases                             []gitops.Release
	// Paths are the files the change wrote or removed: a shard folder
	// among them is followed even when no HelmRelease of it was read (one
	// inside a List, a template that renders none).
	Paths []string
	// OwnShards: the change's shard folders are each applied by a
	// Kustomization of their own (the repository's tenants/layout.yaml), so
	// one not made yet has not applied the change.
	OwnShards bool
}

// Commit is a commit of the branch: its hash and, when the worker made it,
// the change it carries (nil for a ledger record or someone else's commit).
type Commit struct {
	Hash   string
	Change *Target
}

// Event is a followed change's end.
type Event struct {
	Target
	Outcome string
	// Reason and Message are Flux's, for failed; for timeout, what was
	// still pending; for superseded, what replaced it.
	Reason, Message string
	// SupersededBy is the message id of the change that replaced this one
	// (outcome superseded).
	SupersededBy string
	// Fetched and Applied are when each stage was seen (zero if never).
	Fetched, Applied, Done time.Time
}

// Cluster is what the follower needs of Flux; *flux.Client is one.
type Cluster interface {
	// RequestFetch asks the GitRepository to fetch now.
	RequestFetch(ctx context.Context, at time.Time) error
	// RequestApply asks the named Kustomizations to apply now.
	RequestApply(ctx context.Context, names []string, at time.Time) error
	// Read returns where Flux stands, as the client's watches saw it: the
	// HelmReleases of namespaces, and the shard folders named that a
	// Kustomization of their own applies.
	Read(ctx context.Context, namespaces, shards []string) (flux.State, error)
	// Generations reads from the API server itself, not a watch, the
	// metadata.generation of the HelmReleases named namespace/name; one
	// that does not exist is left out.
	Generations(ctx context.Context, keys []string) (map[string]int64, error)
}

// Record is a durable record, shared by every replica, of the messages
// whose readiness outcome was decided; *flux.Record is one. It is what
// keeps a restart, or a replica that follows again what another one
// pushed, from publishing an outcome twice.
type Record interface {
	// Decided returns which of ids have an outcome recorded.
	Decided(ctx context.Context, ids []string) (map[string]bool, error)
	// Claim records, in one atomic write, the outcome (by message id) of
	// each message that has none recorded yet, and returns those it
	// recorded: only they are published.
	Claim(ctx context.Context, outcomes map[string]string) (map[string]bool, error)
}

// Options shape a Follower.
type Options struct {
	// Timeout bounds the wait from push to ready.
	Timeout time.Duration
	// Poll is the pause between readings of the cluster while changes are
	// followed (default 250 ms).
	Poll time.Duration
	// History, if set, reads the branch: its commits since since, oldest
	// first and ending at its head, at most depth of them. The follower
	// calls it when Flux names a commit it has not seen, to place it and
	// to learn the changes others pushed (another replica's may replace
	// one it follows). A failed call is tried again, backing off.
	History func(ctx context.Context, since time.Time, depth int) ([]Commit, error)
	// Record, if set, is consulted before each outcome is published, and
	// by Resume: an outcome it already holds is not published again.
	Record Record
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OnStage hears each stage a change reaches; OnDone its end.
	OnStage func(t Target, stage string, at time.Time)
	OnDone  func(e Event)
	// ApplyGrace is how long a Kustomization that reads a followed change
	// must be seen idle, neither working nor having attempted the fetched
	// commit, before it is asked to apply (default 2 s).
	// kustomize-controller starts at once when its source changes, or right
	// after the apply in progress; asking it before the source has the
	// commit, or in the moment between two applies, would make it apply
	// once more for nothing: a full apply of the folder, every tenant's
	// objects, which the next change would then wait for.
	ApplyGrace time.Duration
	// OnReconcile hears each reconcile request and its error.
	OnReconcile func(err error)
	// OnRead hears each reading of the cluster that failed.
	OnRead func(err error)
	// OnPending hears how many changes are followed, after each change.
	OnPending func(n int)
	// NoReconcile leaves Flux to its interval: no reconcile requests.
	NoReconcile bool
	// Shard, if set, names the shard folder a release's file is in (the
	// name of its ExternalArtifact and Kustomization, internal/publish), ""
	// for none. A change counts as applied only once each such folder that
	// a Kustomization of its own applies has applied an archive published
	// from the change's commit or a later one: the tenants Kustomization
	// does not apply those folders.
	Shard func(path string) string
}

// Follower follows pushed changes until each is ready, failed, superseded
// or timed out.
type Follower struct {
	cluster Cluster
	o       Options

	mu      sync.Mutex
	branch  branch // the commits of the branch as seen, in order
	pending []*follow
	asked   bool // a fetch request is due
	wake    chan struct{}

	idleSince  map[string]time.Time // Kustomization -> since when it is seen idle behind the fetched commit
	askedApply map[string]string    // Kustomization -> revision it was asked to apply
}

type follow struct {
	Target
	fetched, applied time.Time
	// replaced holds, by release (namespace/name), the message id of the
	// later change that replaced it; when it holds every release, the
	// change is superseded by the last one (by, byCommit).
	replaced     map[string]string
	by, byCommit string
	// gens holds, once tied, each release's metadata.generation read from
	// the API server after the Kustomizations applied the change: the
	// release's state counts only from that generation on.
	gens map[string]int64
	tied bool
	// shards names the shard folders the change wrote (Options.Shard).
	shards []string
}

// New returns a Follower; run it with Run.
func New(c Cluster, o Options) *Follower {
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.ApplyGrace <= 0 {
		o.ApplyGrace = 2 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Follower{cluster: c, o: o, branch: newBranch(), askedApply: map[string]string{},
		idleSince: map[string]time.Time{}, wake: make(chan struct{}, 1)}
}

// Pushed records commits the worker pushed, oldest first, and follows the
// targets among them (a commit may carry none: a ledger record). A target
// replaces what it changes of the changes followed before it.
func (f *Follower) Pushed(commits []string, targets []Target) {
	f.mu.Lock()
	for _, c := range commits {
		f.branch.see(c)
	}
	for _, t := range targets {
		f.branch.see(t.Commit)
		f.supersede(t)
		f.pending = append(f.pending, f.follow(t))
	}
	f.branch.trim(f.pendingCommits())
	f.asked = f.asked || len(commits) > 0
	f.mu.Unlock()
	f.nudge()
}

// Resume follows again, at start, the worker's changes among commits (the
// branch's recent history, oldest first), except those whose outcome the
// Record already holds: a restart publishes no outcome twice. Those still
// replace what they changed of earlier ones, so a change replaced before
// the restart is decided superseded from the history alone. It returns how
// many changes it follows.
func (f *Follower) Resume(ctx context.Context, commits []Commit) int {
	var ids []string
	for _, c := range commits {
		if c.Change != nil {
			ids = append(ids, c.Change.MessageID)
		}
	}
	decided := map[string]bool{}
	if f.o.Record != nil && len(ids) > 0 {
		var err error
		if decided, err = f.o.Record.Decided(ctx, ids); err != nil {
			// Better twice than never: events are at least once.
			zerolog.Ctx(ctx).Warn().Err(err).Msg("could not read the record of readiness outcomes; outcomes decided before this start may be published again")
			decided = map[string]bool{}
		}
	}
	n := 0
	f.mu.Lock()
	for _, c := range commits {
		f.branch.see(c.Hash)
		if c.Change == nil {
			continue
		}
		t := *c.Change
		f.supersede(t)
		if !decided[t.MessageID] {
			f.pending = append(f.pending, f.follow(t))
			n++
		}
	}
	f.branch.trim(f.pendingCommits())
	f.asked = f.asked || len(commits) > 0
	f.mu.Unlock()
	f.nudge()
	return n
}

func (f *Follower) nudge() {
	f.report(context.Background(), nil)
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Pending returns how many changes are followed.
func (f *Follower) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// Run follows until ctx ends.
func (f *Follower) Run(ctx context.Context) {
	for {
		f.mu.Lock()
		ask, n := f.asked, len(f.pending)
		f.asked = false
		f.mu.Unlock()
		if ask && !f.o.NoReconcile {
			f.requested(ctx, f.cluster.RequestFetch(ctx, f.o.Now()))
		}
		if n > 0 {
			f.step(ctx)
		}
		wait := f.o.Poll
		if n == 0 {
			wait = time.Hour
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-f.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// requested reports a reconcile request's result.
func (f *Follower) requested(ctx context.Context, err error) {
	if f.o.OnReconcile != nil {
		f.o.OnReconcile(err)
	}
	if err != nil && ctx.Err() == nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("could not ask Flux to reconcile now; it will at its interval")
	}
}

// step reads the cluster once and moves every followed change on.
func (f *Follower) step(ctx context.Context) {
	f.report(ctx, f.finish(func(p *follow) (Event, bool) { return f.superseded(p, f.o.Now()) }))
	f.mu.Lock()
	nss, shards := map[string]bool{}, map[string]bool{}
	for _, p := range f.pending {
		for _, r := range p.Releases {
			nss[r.Namespace] = true
		}
		for _, s := range p.shards {
			shards[s] = true
		}
	}
	f.mu.Unlock()
	st, err := f.cluster.Read(ctx, sortedSet(nss), sortedSet(shards))
	if err != nil {
		f.readFailed(ctx, err)
		now := f.o.Now()
		why := "the cluster could not be read: " + err.Error()
		f.report(ctx, f.finish(func(p *follow) (Event, bool) {
			if now.Sub(p.Pushed) < f.o.Timeout {
				return Event{}, false
			}
			return Event{Target: p.Target, Outcome: OutcomeTimeout, Message: why, Fetched: p.fetched, Applied: p.applied, Done: now}, true
		}))
		return
	}
	f.place(ctx, st)
	f.tie(ctx, st)
	now := f.o.Now()
	if late := f.late(st, now); len(late) > 0 {
		f.requested(ctx, f.cluster.RequestApply(ctx, late, now))
	}
	var stages []func()
	done := f.finish(func(p *follow) (Event, bool) {
		ev, finished, reached := f.judge(p, st, now)
		for _, s := range reached {
			t, s := p.Target, s
			stages = append(stages, func() { f.o.OnStage(t, s, now) })
		}
		return ev, finished
	})
	if f.o.OnStage != nil {
		for _, s := range stages {
			s()
		}
	}
	f.report(ctx, done)
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// follow starts following t, with the shard folders of its files and
// releases (Options.Shard), named once.
func (f *Follower) follow(t Target) *follow {
	p := &follow{Target: t}
	if f.o.Shard == nil {
		return p
	}
	paths := slices.Clone(t.Paths)
	for _, r := range t.Releases {
		paths = append(paths, r.Path)
	}
	for _, path := range paths {
		if s := f.o.Shard(path); s != "" && !slices.Contains(p.shards, s) {
			p.shards = append(p.shards, s)
		}
	}
	return p
}

func (f *Follower) readFailed(ctx context.Context, err error) {
	if f.o.OnRead != nil && ctx.Err() == nil {
		f.o.OnRead(err)
	}
}

// finish ends the followed changes end says are finished, and returns their
// events. end runs with f.mu held.
func (f *Follower) finish(end func(p *follow) (Event, bool)) []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var done []Event
	kept := f.pending[:0]
	for _, p := range f.pending {
		if ev, finished := end(p); finished {
			done = append(done, ev)
			continue
		}
		kept = append(kept, p)
	}
	clear(f.pending[len(kept):])
	f.pending = kept
	f.branch.trim(f.pendingCommits())
	return done
}

// pendingCommits returns the commits of the followed changes; f.mu is held.
func (f *Follower) pendingCommits() map[string]bool {
	m := make(map[string]bool, len(f.pending))
	for _, p := range f.pending {
		m[p.Commit] = true
	}
	return m
}

// report tells how many changes are followed, then the ends of done whose
// outcome the Record did not hold yet.
func (f *Follower) report(ctx context.Context, done []Event) {
	if f.o.OnPending != nil {
		f.o.OnPending(f.Pending())
	}
	done = f.claim(ctx, done)
	if f.o.OnDone != nil {
		for _, e := range done {
			f.o.OnDone(e)
		}
	}
}

// claim records the outcomes of done and returns the events to publish:
// those the Record took. Two replicas that follow the same change (one
// restarted and following again what the other still follows) both decide
// it; the Record's atomic write lets one of them publish. When the Record
// cannot be written every event is published: twice is better than never.
func (f *Follower) claim(ctx context.Context, done []Event) []Event {
	if f.o.Record == nil || len(done) == 0 {
		return done
	}
	outcomes := make(map[string]string, len(done))
	for _, e := range done {
		outcomes[e.MessageID] = e.Outcome
	}
	won, err := f.o.Record.Claim(ctx, outcomes)
	if err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Int("events", len(done)).Msg("could not record readiness outcomes; publishing them anyway, so one may be published twice")
		return done
	}
	kept := done[:0]
	for _, e := range done {
		if won[e.MessageID] {
			kept = append(kept, e)
		}
	}
	return kept
}
