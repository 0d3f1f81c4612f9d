// Package readiness follows a pushed commit to the tenant it changes: the
// GitRepository fetched it, the Kustomizations that read its folders
// applied it, and every HelmRelease it touched is Ready at the chart version
// it asks for (or gone, for an offboarding). It says so once per message:
// ready, failed (with Flux's reason and message) or timeout.
package readiness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// Outcomes of the readiness event.
const (
	OutcomeReady   = "ready"   // every release the change touched is as it asks
	OutcomeFailed  = "failed"  // Flux reports a failure of the change
	OutcomeTimeout = "timeout" // not ready within the timeout
)

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
}

// Event is a followed change's end.
type Event struct {
	Target
	Outcome string
	// Reason and Message are Flux's, for failed; for timeout, what was
	// still pending.
	Reason, Message string
	// Fetched and Applied are when each stage was seen (zero if never).
	Fetched, Applied, Done time.Time
}

// Cluster is what the follower needs of Flux; *flux.Client is one.
type Cluster interface {
	// RequestFetch asks the GitRepository to fetch now.
	RequestFetch(ctx context.Context, at time.Time) error
	// RequestApply asks the named Kustomizations to apply now.
	RequestApply(ctx context.Context, names []string, at time.Time) error
	Read(ctx context.Context, namespaces []string) (flux.State, error)
}

// Options shape a Follower.
type Options struct {
	// Timeout bounds the wait from push to ready.
	Timeout time.Duration
	// Poll is the pause between readings of the cluster while changes are
	// followed (default 250 ms).
	Poll time.Duration
	// Sync, if set, fetches the branch and returns its head: the follower
	// calls it when Flux names a commit it has not seen, to learn whether
	// it comes after the followed ones.
	Sync func(ctx context.Context) (string, error)
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
}

// Follower follows pushed changes until each is ready, failed or timed out.
type Follower struct {
	cluster Cluster
	o       Options

	mu      sync.Mutex
	order   map[string]int // commit -> position in the branch's history as seen
	next    int
	pending []*follow
	asked   bool            // a fetch request is due
	synced  map[string]bool // unknown revisions a sync was tried for
	wake    chan struct{}

	idleSince  map[string]time.Time // Kustomization -> since when it is seen idle behind the fetched commit
	askedApply map[string]string    // Kustomization -> revision it was asked to apply
}

type follow struct {
	Target
	pos              int
	fetched, applied time.Time
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
	return &Follower{cluster: c, o: o, order: map[string]int{}, synced: map[string]bool{}, askedApply: map[string]string{},
		idleSince: map[string]time.Time{}, wake: make(chan struct{}, 1)}
}

// Pushed records commits the worker pushed, oldest first, and follows the
// targets among them (a commit may carry none: a ledger record).
func (f *Follower) Pushed(commits []string, targets []Target) {
	f.mu.Lock()
	for _, c := range commits {
		f.see(c)
	}
	for _, t := range targets {
		f.pending = append(f.pending, &follow{Target: t, pos: f.order[t.Commit]})
	}
	f.asked = f.asked || len(commits) > 0
	f.mu.Unlock()
	f.report(nil)
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// see gives a commit the next position, if it has none.
func (f *Follower) see(commit string) {
	if _, ok := f.order[commit]; !ok && commit != "" {
		f.next++
		f.order[commit] = f.next
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
			f.requested(ctx, f.cluster.RequestFetch(ctx, time.Now()))
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
	f.mu.Lock()
	nss := map[string]bool{}
	for _, p := range f.pending {
		for _, r := range p.Releases {
			nss[r.Namespace] = true
		}
	}
	f.mu.Unlock()
	namespaces := make([]string, 0, len(nss))
	for ns := range nss {
		namespaces = append(namespaces, ns)
	}
	slices.Sort(namespaces)
	st, err := f.cluster.Read(ctx, namespaces)
	if err != nil {
		if f.o.OnRead != nil && ctx.Err() == nil {
			f.o.OnRead(err)
		}
		f.timeouts(time.Now(), "the cluster could not be read: "+err.Error())
		return
	}
	if unknown := f.unknownRevision(st); unknown != "" && f.o.Sync != nil {
		if head, err := f.o.Sync(ctx); err == nil {
			f.mu.Lock()
			f.see(head)
			f.mu.Unlock()
		}
	}
	now := time.Now()
	if late := f.late(st, now); len(late) > 0 {
		f.requested(ctx, f.cluster.RequestApply(ctx, late, now))
	}
	var done []Event
	var stages []func()
	f.mu.Lock()
	kept := f.pending[:0]
	for _, p := range f.pending {
		ev, finished, reached := f.judge(p, st, now)
		for _, s := range reached {
			t, s := p.Target, s
			stages = append(stages, func() { f.o.OnStage(t, s, now) })
		}
		if finished {
			done = append(done, ev)
			continue
		}
		kept = append(kept, p)
	}
	f.keep(kept)
	f.mu.Unlock()
	if f.o.OnStage != nil {
		for _, s := range stages {
			s()
		}
	}
	f.report(done)
}

// late returns the Kustomizations to ask to apply: each reads a followed
// change the GitRepository has fetched, yet has been seen idle without
// attempting the fetched revision for ApplyGrace. Each is asked once per
// revision.
func (f *Follower) late(st flux.State, now time.Time) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.o.NoReconcile || st.Fetched == "" {
		return nil
	}
	var late []string
	for _, k := range st.Kustomizations {
		if k.LastAttempted == st.Fetched || k.Reconciling || f.askedApply[k.Name] == st.Fetched || !f.behind(k, st.Fetched) {
			delete(f.idleSince, k.Name)
			continue
		}
		since, seen := f.idleSince[k.Name]
		if !seen {
			f.idleSince[k.Name] = now
			continue
		}
		if now.Sub(since) < f.o.ApplyGrace {
			continue
		}
		delete(f.idleSince, k.Name)
		f.askedApply[k.Name] = st.Fetched
		late = append(late, k.Name)
	}
	return late
}

// behind reports whether Kustomization k has yet to apply a followed
// change that revision fetched holds; f.mu is held.
func (f *Follower) behind(k flux.Kustomization, fetched string) bool {
	for _, p := range f.pending {
		if f.atOrAfter(fetched, p.pos) && !f.atOrAfter(k.LastApplied, p.pos) && reads(k, p.Releases) {
			return true
		}
	}
	return false
}

// keep makes kept (a prefix of pending's array) the followed changes;
// f.mu is held.
func (f *Follower) keep(kept []*follow) {
	clear(f.pending[len(kept):])
	f.pending = kept
}

// report tells how many changes are followed, then the ends of done.
func (f *Follower) report(done []Event) {
	if f.o.OnPending != nil {
		f.o.OnPending(f.Pending())
	}
	if f.o.OnDone != nil {
		for _, e := range done {
			f.o.OnDone(e)
		}
	}
}

// unknownRevision returns a revision Flux names that the follower cannot
// place (a commit someone else pushed), once per revision.
func (f *Follower) unknownRevision(st flux.State) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	revs := []string{st.Fetched}
	for _, k := range st.Kustomizations {
		revs = append(revs, k.LastApplied, k.LastAttempted)
	}
	for _, r := range revs {
		if _, ok := f.order[r]; r != "" && !ok && !f.synced[r] {
			f.synced[r] = true
			return r
		}
	}
	return ""
}

// atOrAfter reports whether revision rev holds the change at position pos.
func (f *Follower) atOrAfter(rev string, pos int) bool {
	p, ok := f.order[rev]
	return ok && p >= pos
}

// judge moves p on with st. It returns p's event when p is finished and the
// stages p reached now.
func (f *Follower) judge(p *follow, st flux.State, now time.Time) (Event, bool, []string) {
	var reached []string
	if p.fetched.IsZero() && f.atOrAfter(st.Fetched, p.pos) {
		p.fetched = now
		reached = append(reached, StageFetched)
	}
	ev := Event{Target: p.Target}
	end := func(outcome, reason, msg string) (Event, bool, []string) {
		ev.Outcome, ev.Reason, ev.Message, ev.Fetched, ev.Applied, ev.Done = outcome, reason, msg, p.fetched, p.applied, now
		return ev, true, reached
	}
	if p.applied.IsZero() {
		applied := true
		for _, k := range st.Kustomizations {
			if !reads(k, p.Releases) {
				continue
			}
			if f.atOrAfter(k.LastApplied, p.pos) {
				continue
			}
			applied = false
			if k.Ready.Status == "False" && f.atOrAfter(k.LastAttempted, p.pos) {
				return end(OutcomeFailed, k.Ready.Reason, fmt.Sprintf("Kustomization %s: %s", k.Name, k.Ready.Message))
			}
		}
		if applied {
			if p.fetched.IsZero() {
				p.fetched = now
				reached = append(reached, StageFetched)
			}
			p.applied = now
			reached = append(reached, StageApplied)
		}
	}
	var waiting []string
	for _, r := range p.Releases {
		hr := st.Releases[r.Namespace+"/"+r.Name]
		state, failed := releaseState(r, hr)
		if failed && !p.applied.IsZero() {
			return end(OutcomeFailed, hr.Ready.Reason, fmt.Sprintf("HelmRelease %s/%s: %s", r.Namespace, r.Name, hr.Ready.Message))
		}
		if state != "" {
			waiting = append(waiting, fmt.Sprintf("HelmRelease %s/%s %s", r.Namespace, r.Name, state))
		}
	}
	if !p.applied.IsZero() && len(waiting) == 0 {
		return end(OutcomeReady, "", "")
	}
	if now.Sub(p.Pushed) >= f.o.Timeout {
		if p.applied.IsZero() {
			waiting = append([]string{"the Kustomizations have not applied the commit"}, waiting...)
		}
		return end(OutcomeTimeout, "", "not ready after "+f.o.Timeout.String()+": "+strings.Join(waiting, "; "))
	}
	return ev, false, reached
}

// timeouts ends the followed changes whose time is up while the cluster
// cannot be read.
func (f *Follower) timeouts(now time.Time, why string) {
	f.mu.Lock()
	var done []Event
	kept := f.pending[:0]
	for _, p := range f.pending {
		if now.Sub(p.Pushed) >= f.o.Timeout {
			done = append(done, Event{Target: p.Target, Outcome: OutcomeTimeout, Message: why, Fetched: p.fetched, Applied: p.applied, Done: now})
			continue
		}
		kept = append(kept, p)
	}
	f.keep(kept)
	f.mu.Unlock()
	f.report(done)
}

// reads reports whether Kustomization k applies any of the releases' files
// (all of them when there are none: a change of the whole tier).
func reads(k flux.Kustomization, rs []gitops.Release) bool {
	if len(rs) == 0 {
		return true
	}
	for _, r := range rs {
		if k.Path == "" || strings.HasPrefix(r.Path, k.Path+"/") {
			return true
		}
	}
	return false
}

// Transient reasons of a Ready=False HelmRelease: Flux is still at work.
var transient = []string{"Progressing", "ProgressingWithRetry", "DependencyNotReady", ""}

// sourceWaits are the endings of a SourceNotReady message while the chart
// is on its way; any other (a chart version that does not exist, a
// repository that fails) is the source's failure.
var sourceWaits = []string{"latest generation of object has not been reconciled", "does not have an artifact"}

// failedNow reports whether hr's Ready condition is a failure of its
// current generation. helm-controller leaves observedGeneration behind
// while its chart is not ready, so the condition's own generation counts.
func failedNow(hr flux.HelmRelease) bool {
	c := hr.Ready
	if c.Status != "False" || slices.Contains(transient, c.Reason) || c.ObservedGeneration != hr.Generation {
		return false
	}
	if c.Reason == "SourceNotReady" {
		for _, w := range sourceWaits {
			if strings.HasSuffix(c.Message, w) {
				return false
			}
		}
	}
	return true
}

// releaseState says what a release still waits for ("" when it is as r
// asks) and whether Flux reports a failure of it.
func releaseState(r gitops.Release, hr flux.HelmRelease) (string, bool) {
	if r.Gone {
		if hr.Exists {
			return "still exists", false
		}
		return "", false
	}
	switch {
	case !hr.Exists:
		return "does not exist yet", false
	case hr.Deleting:
		return "is being deleted", false
	case failedNow(hr):
		return "failed", true
	case !hr.Current:
		return "not reconciled yet: " + hr.Ready.Reason + " " + hr.Ready.Message, false
	case hr.Stalled.Status == "True":
		return "stalled", true
	case hr.Ready.Status != "True":
		return fmt.Sprintf("Ready=%s %s: %s", orUnknown(hr.Ready.Status), hr.Ready.Reason, hr.Ready.Message), false
	case !versionMatches(r.Version, hr.ChartVersion):
		return fmt.Sprintf("at chart %s, not %s", hr.ChartVersion, r.Version), false
	}
	return "", false
}

func orUnknown(s string) string {
	if s == "" {
		return "Unknown"
	}
	return s
}

// versionMatches reports whether a chart version satisfies a HelmRelease's
// version (a constraint such as "1.0.x", or exact); any version does when it
// asks for none.
func versionMatches(want, have string) bool {
	if want == "" || want == "*" {
		return have != ""
	}
	c, err := semver.NewConstraint(want)
	if err != nil {
		return want == have
	}
	v, err := semver.NewVersion(have)
	return err == nil && c.Check(v)
}
