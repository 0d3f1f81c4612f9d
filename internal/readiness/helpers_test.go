package readiness

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fakeRecord is a Record in memory; claimed, if set, hears each claim.
type fakeRecord struct {
	mu       sync.Mutex
	outcomes map[string]string
	claimed  chan map[string]string
}

func (r *fakeRecord) Decided(_ context.Context, ids []string) (map[string]bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for _, id := range ids {
		if _, ok := r.outcomes[id]; ok {
			out[id] = true
		}
	}
	return out, nil
}

func (r *fakeRecord) Claim(_ context.Context, outcomes map[string]string) (map[string]bool, error) {
	r.mu.Lock()
	won := map[string]bool{}
	for id, o := range outcomes {
		if _, ok := r.outcomes[id]; !ok {
			r.outcomes[id] = o
			won[id] = true
		}
	}
	r.mu.Unlock()
	if r.claimed != nil {
		r.claimed <- outcomes
	}
	return won, nil
}

// rel is tenant's HelmRelease in tier, as its file asks.
func rel(tenant, tier, version string) gitops.Release {
	return gitops.Release{Path: tenantsPath + "/" + tier + "/" + tenant + ".yaml", Namespace: "flux-system",
		Name: tenant + "-" + tier, Version: version}
}

// gone is rel removed.
func gone(tenant, tier string) gitops.Release {
	r := rel(tenant, tier, "")
	r.Gone = true
	return r
}

func change(id, kind, commit string, at time.Time, rs ...gitops.Release) Target {
	return Target{MessageID: id, Kind: kind, Commit: commit, Pushed: at, Releases: rs}
}

// releases is the HelmReleases of a state: each Ready at chart and
// generation gen.
func releases(gen int64, chart string, names ...string) map[string]flux.HelmRelease {
	m := map[string]flux.HelmRelease{}
	for _, n := range names {
		m["flux-system/"+n] = flux.HelmRelease{Namespace: "flux-system", Name: n, Exists: true, Current: true,
			Generation: gen, ChartVersion: chart, Ready: flux.Condition{Status: "True", Reason: "UpgradeSucceeded", ObservedGeneration: gen}}
	}
	return m
}

// applied is a state where the GitRepository and the Kustomizations are at
// commit.
func applied(commit string, rs map[string]flux.HelmRelease) flux.State {
	return flux.State{Fetched: commit, Kustomizations: kust(commit, commit, readyTrue), Releases: rs}
}

// follower runs a Follower on c with a fake clock until the test ends, and
// returns it with its events. The clock jumps past the timeout (an hour)
// at reading timeoutAt: what is still followed then times out, so a change
// the follower fails to decide ends the test instead of hanging it.
func follower(t *testing.T, c *fakeCluster, clock *fakeClock, timeoutAt int, o Options) (*Follower, <-chan Event) {
	f, events, _ := stoppable(t, c, clock, timeoutAt, o)
	return f, events
}

// stoppable is follower, with a stop that returns once Run has returned.
func stoppable(t *testing.T, c *fakeCluster, clock *fakeClock, timeoutAt int, o Options) (*Follower, <-chan Event, func()) {
	t.Helper()
	events := make(chan Event, 16)
	read := c.read
	c.read = func(n int) {
		if read != nil {
			read(n)
		}
		if n == timeoutAt {
			clock.Add(2 * time.Hour)
		}
	}
	o.Timeout, o.Poll, o.Now = time.Hour, time.Millisecond, clock.Now
	o.OnDone = func(e Event) { events <- e }
	f := New(c, o)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	stop := func() { cancel(); <-stopped }
	t.Cleanup(stop)
	go func() { defer close(stopped); f.Run(ctx) }()
	return f, events, stop
}

// collect returns n events by message id.
func collect(events <-chan Event, n int) map[string]Event {
	out := map[string]Event{}
	for range n {
		e := <-events
		out[e.MessageID] = e
	}
	return out
}
