package readiness

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// fakeCluster hands out the states of a script, one per reading; the last
// one stays. Its API server holds the generations of gens, or else those of
// the state last read.
type fakeCluster struct {
	mu      sync.Mutex
	states  []flux.State
	last    flux.State
	gens    map[string]int64
	fetches int
	applies []string
	// read, if set, hears the number of each reading before it returns.
	read  func(n int)
	reads int
}

func (c *fakeCluster) RequestFetch(context.Context, time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fetches++
	return nil
}

func (c *fakeCluster) RequestApply(_ context.Context, names []string, _ time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applies = append(c.applies, names...)
	return nil
}

func (c *fakeCluster) Read(context.Context, []string, []string) (flux.State, error) {
	c.mu.Lock()
	st := c.states[0]
	if len(c.states) > 1 {
		c.states = c.states[1:]
	}
	c.last = st
	c.reads++
	n, read := c.reads, c.read
	c.mu.Unlock()
	if read != nil {
		read(n)
	}
	return st, nil
}

func (c *fakeCluster) Generations(_ context.Context, keys []string) (map[string]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int64{}
	for _, k := range keys {
		if g, ok := c.gens[k]; ok {
			out[k] = g
		} else if hr, ok := c.last.Releases[k]; ok {
			out[k] = hr.Generation
		}
	}
	return out, nil
}

const tenantsPath = "application-plane/production/tenants"

func kust(applied, attempted string, ready flux.Condition) []flux.Kustomization {
	return []flux.Kustomization{
		{Name: "dataplane-tenants", Path: tenantsPath, LastApplied: applied, LastAttempted: attempted, Ready: ready, Current: true},
		{Name: "dataplane-pooled-envs", Path: "application-plane/production/pooled-envs", LastApplied: "old", Current: true},
	}
}

func hr(version string, ready flux.Condition) map[string]flux.HelmRelease {
	return map[string]flux.HelmRelease{"flux-system/t1-premium": {
		Namespace: "flux-system", Name: "t1-premium", Exists: true, Current: true, ChartVersion: version, Ready: ready, Generation: 1,
	}}
}

var (
	readyTrue = flux.Condition{Status: "True", Reason: "InstallSucceeded"}
	progress  = flux.Condition{Status: "Unknown", Reason: "Progressing"}
)

func target(gone bool) Target {
	return Target{MessageID: "m1", Kind: "onboarding", Commit: "c1", Pushed: time.Now(), Releases: []gitops.Release{{
		Path: tenantsPath + "/premium/t1.yaml", Namespace: "flux-system", Name: "t1-premium", Version: "0.0.x", Gone: gone,
	}}}
}

func TestFollow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gone    bool
		states  []flux.State
		outcome string
		stages  []string
		reason  string
	}{
		{name: "ready after each stage", states: []flux.State{
			{Fetched: "old", Kustomizations: kust("old", "old", readyTrue)},
			{Fetched: "c1", Kustomizations: kust("old", "old", readyTrue)},
			{Fetched: "c1", Kustomizations: kust("c1", "c1", readyTrue), Releases: hr("", progress)},
			{Fetched: "c1", Kustomizations: kust("c1", "c1", readyTrue), Releases: hr("0.0.1", readyTrue)},
		}, outcome: OutcomeReady, stages: []string{StageFetched, StageApplied}},
		{name: "a later commit holds it", states: []flux.State{
			{Fetched: "c2", Kustomizations: kust("c2", "c2", readyTrue), Releases: hr("0.0.1", readyTrue)},
		}, outcome: OutcomeReady, stages: []string{StageFetched, StageApplied}},
		{name: "ready at the wrong chart waits", states: []flux.State{
			{Fetched: "c1", Kustomizations: kust("c1", "c1", readyTrue), Releases: hr("1.0.1", readyTrue)},
		}, outcome: OutcomeTimeout, stages: []string{StageFetched, StageApplied}},
		{name: "the Kustomization fails", states: []flux.State{
			{Fetched: "c1", Kustomizations: kust("old", "c1", flux.Condition{Status: "False", Reason: "ReconciliationFailed", Message: "no matches for kind"})},
		}, outcome: OutcomeFailed, stages: []string{StageFetched}, reason: "ReconciliationFailed"},
		{name: "the release fails", states: []flux.State{
			{Fetched: "c1", Kustomizations: kust("c1", "c1", readyTrue), Releases: hr("", flux.Condition{Status: "False", Reason: "InstallFailed", Message: "timed out", ObservedGeneration: 1})},
		}, outcome: OutcomeFailed, stages: []string{StageFetched, StageApplied}, reason: "InstallFailed"},
		{name: "a chart on its way is no failure", states: []flux.State{
			{Fetched: "c1", Kustomizations: kust("c1", "c1", readyTrue), Releases: hr("", flux.Condition{Status: "False", Reason: "SourceNotReady",
				Message: "HelmChart 'flux-system/flux-system-t1-premium' is not ready: does not have an artifact", ObservedGeneration: 1})},
			{Fetched: "c1", Kustomizations: kust("c1", "c1", readyTrue), Releases: hr("0.0.1", readyTrue)},
		}, outcome: OutcomeReady, stages: []string{StageFetched, StageApplied}},
		{name: "a chart version that does not exist fails", states: []flux.State{
			{Fetched: "c1", Kustomizations: kust("c1", "c1", readyTrue), Releases: hr("", flux.Condition{Status: "False", Reason: "SourceNotReady",
				Message: "HelmChart 'flux-system/flux-system-t1-premium' is not ready: invalid chart reference: no 'helm-tenant-chart' chart with version matching '9.9.x' found", ObservedGeneration: 1})},
		}, outcome: OutcomeFailed, stages: []string{StageFetched, StageApplied}, reason: "SourceNotReady"},
		{name: "an offboarding waits for the release to go", gone: true, states: []flux.State{
			{Fetched: "c1", Kustomizations: kust("c1", "c1", readyTrue), Releases: hr("0.0.1", readyTrue)},
			{Fetched: "c1", Kustomizations: kust("c1", "c1", readyTrue)},
		}, outcome: OutcomeReady, stages: []string{StageFetched, StageApplied}},
		{name: "nothing moves", states: []flux.State{
			{Fetched: "old", Kustomizations: kust("old", "old", readyTrue)},
		}, outcome: OutcomeTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeCluster{states: tc.states}
			var mu sync.Mutex
			var stages []string
			done := make(chan Event, 1)
			// A timeout is due at once where one is the outcome, never
			// otherwise: the outcome does not hang on the machine's speed.
			timeout := time.Hour
			if tc.outcome == OutcomeTimeout {
				timeout = time.Nanosecond
			}
			f := New(c, Options{Timeout: timeout, Poll: time.Millisecond,
				OnStage: func(_ Target, s string, _ time.Time) { mu.Lock(); stages = append(stages, s); mu.Unlock() },
				OnDone:  func(e Event) { done <- e }})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go f.Run(ctx)
			f.Pushed([]string{"old"}, nil)
			f.Pushed([]string{"c1", "c2"}, []Target{target(tc.gone)})
			e := <-done
			mu.Lock()
			defer mu.Unlock()
			if e.Outcome != tc.outcome || e.Reason != tc.reason {
				t.Fatalf("outcome %s (%s: %s), want %s (%s)", e.Outcome, e.Reason, e.Message, tc.outcome, tc.reason)
			}
			if len(stages) != len(tc.stages) {
				t.Fatalf("stages %v, want %v", stages, tc.stages)
			}
			for i := range stages {
				if stages[i] != tc.stages[i] {
					t.Fatalf("stages %v, want %v", stages, tc.stages)
				}
			}
			if f.Pending() != 0 {
				t.Errorf("%d still followed", f.Pending())
			}
			if c.fetches == 0 {
				t.Error("no fetch request")
			}
		})
	}
}

func TestVersionMatches(t *testing.T) {
	for _, tc := range []struct {
		want, have string
		ok         bool
	}{{"1.0.x", "1.0.1", true}, {"1.0.x", "0.0.1", false}, {"", "0.0.1", true}, {"", "", false}, {"0.0.1", "0.0.1", true}, {"9.9.x", "", false}} {
		if got := versionMatches(tc.want, tc.have); got != tc.ok {
			t.Errorf("versionMatches(%q, %q) = %v", tc.want, tc.have, got)
		}
	}
}

// TestApplyRequests: the Kustomizations are asked to apply only when they
// have not started on a fetched commit by themselves, seen idle on two
// readings in a row (ApplyGrace is a nanosecond here), once per revision,
// and only those that read the change.
func TestApplyRequests(t *testing.T) {
	idle := flux.State{Fetched: "c1", Kustomizations: kust("old", "old", readyTrue)}
	busy := flux.State{Fetched: "c1", Kustomizations: kust("old", "old", readyTrue)}
	busy.Kustomizations[0].Reconciling = true
	started := flux.State{Fetched: "c1", Kustomizations: kust("old", "c1", progress)}
	done := flux.State{Fetched: "c1", Kustomizations: kust("c1", "c1", readyTrue), Releases: hr("0.0.1", readyTrue)}
	for _, tc := range []struct {
		name        string
		states      []flux.State
		noReconcile bool
		want        []string
	}{
		{name: "started by itself", states: []flux.State{idle, started, started, done}},
		{name: "busy with the old revision", states: []flux.State{busy, busy, busy, busy, done}},
		{name: "idle for a moment between two applies", states: []flux.State{busy, idle, busy, busy, idle, busy, busy, done}},
		{name: "idle after the fetch, asked once", states: []flux.State{idle, idle, idle, idle, idle, done}, want: []string{"dataplane-tenants"}},
		{name: "left to the interval", states: []flux.State{idle, idle, idle, idle, idle, done}, noReconcile: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeCluster{states: tc.states}
			ended := make(chan Event, 1)
			f := New(c, Options{Timeout: time.Hour, Poll: time.Millisecond, ApplyGrace: time.Nanosecond, NoReconcile: tc.noReconcile,
				OnDone: func(e Event) { ended <- e }})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go f.Run(ctx)
			f.Pushed([]string{"old"}, nil)
			f.Pushed([]string{"c1"}, []Target{target(false)})
			if e := <-ended; e.Outcome != OutcomeReady {
				t.Fatalf("outcome %s: %s", e.Outcome, e.Message)
			}
			cancel()
			c.mu.Lock()
			defer c.mu.Unlock()
			if !slices.Equal(c.applies, tc.want) {
				t.Errorf("apply requests %v, want %v", c.applies, tc.want)
			}
			if (c.fetches == 0) != tc.noReconcile {
				t.Errorf("%d fetch requests (no reconcile: %v)", c.fetches, tc.noReconcile)
			}
		})
	}
}

// TestFollowAShardFolder: a release in a shard folder that a Kustomization
// of its own applies (from the worker's ExternalArtifact) is applied once
// that Kustomization applied an archive published from the change's
// commit or a later one, not when the tenants Kustomization applied the
// commit: it does not apply the folder. An offboarding whose HelmRelease
// the folder's Kustomization has not made yet (it applies the onboarding
// before it) is not ready until that Kustomization applied the
// offboarding's archive and the release is gone.
func TestFollowAShardFolder(t *testing.T) {
	const name = "tenants-premium-shard-00"
	shard := func(rev, origin, applied, attempted string, ready flux.Condition) map[string]flux.Shard {
		return map[string]flux.Shard{name: {Revision: rev, Origin: origin, Applied: applied, Attempted: attempted, Ready: ready}}
	}
	at := func(s map[string]flux.Shard, rs map[string]flux.HelmRelease) flux.State {
		ks := kust("c1", "c1", readyTrue)
		ks[1].LastApplied = "c1" // a change with no release waits for every Kustomization
		return flux.State{Fetched: "c1", Kustomizations: ks, Shards: s, Releases: rs}
	}
	for _, tc := range []struct {
		name    string
		gone    bool
		files   bool // no HelmRelease read: the change's files alone
		own     bool // the layout gives each shard folder a Kustomization
		states  []flux.State
		outcome string
		reason  string
		reads   int // the reading that decides it
	}{
		{name: "an offboarding waits for its folder's archive", gone: true, states: []flux.State{
			at(shard("r0", "old", "r0", "r0", readyTrue), nil),
			at(shard("r1", "c1", "r0", "r0", readyTrue), hr("0.0.1", readyTrue)),
			at(shard("r1", "c1", "r1", "r1", readyTrue), hr("0.0.1", readyTrue)),
			at(shard("r1", "c1", "r1", "r1", readyTrue), nil),
		}, outcome: OutcomeReady, reads: 4},
		{name: "an archive from a later commit holds it", states: []flux.State{
			at(shard("r2", "c2", "r2", "r2", readyTrue), hr("0.0.1", readyTrue)),
		}, outcome: OutcomeReady, reads: 1},
		{name: "the folder's Kustomization fails", states: []flux.State{
			at(shard("r1", "c1", "r0", "r1", flux.Condition{Status: "False", Reason: "BuildFailed", Message: "kustomize build failed"}), hr("0.0.1", readyTrue)),
		}, outcome: OutcomeFailed, reason: "BuildFailed", reads: 1},
		{name: "a failure of an older archive waits", states: []flux.State{
			at(shard("r0", "old", "r", "r0", flux.Condition{Status: "False", Reason: "BuildFailed"}), hr("0.0.1", readyTrue)),
			at(shard("r1", "c1", "r1", "r1", readyTrue), hr("0.0.1", readyTrue)),
		}, outcome: OutcomeReady, reads: 2},
		{name: "a change with no HelmRelease read follows its files' folder", files: true, states: []flux.State{
			at(shard("r1", "c1", "r0", "r0", readyTrue), nil),
			at(shard("r1", "c1", "r1", "r1", readyTrue), nil),
		}, outcome: OutcomeReady, reads: 2},
		{name: "a folder with no Kustomization of its own", states: []flux.State{
			at(nil, hr("0.0.1", readyTrue)),
		}, outcome: OutcomeReady, reads: 1},
		// Found by review: a folder's first tenant, followed before the
		// worker made the folder's Kustomization, was applied by the
		// tenants Kustomization, which does not apply the folder.
		{name: "a new folder of its own waits for its Kustomization", own: true, files: true, states: []flux.State{
			at(nil, nil),
			at(shard("r1", "c1", "r1", "r1", readyTrue), nil),
		}, outcome: OutcomeReady, reads: 2},
		{name: "a new folder of its own: its release waits for it too", own: true, states: []flux.State{
			at(nil, hr("0.0.1", readyTrue)),
			at(shard("r1", "c1", "r1", "r1", readyTrue), hr("0.0.1", readyTrue)),
		}, outcome: OutcomeReady, reads: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeCluster{states: tc.states}
			done := make(chan Event, 1)
			f := New(c, Options{Timeout: time.Hour, Poll: time.Millisecond, OnDone: func(e Event) { done <- e },
				Shard: func(p string) string {
					if strings.Contains(p, "/shard-00/") {
						return name
					}
					return ""
				}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go f.Run(ctx)
			tg := target(tc.gone)
			tg.Releases[0].Path = tenantsPath + "/premium/shard-00/t1.yaml"
			tg.Paths = []string{tg.Releases[0].Path}
			if tc.files { // a HelmRelease inside a List, say: none read
				tg.Releases = nil
			}
			tg.OwnShards = tc.own
			f.Pushed([]string{"old"}, nil)
			f.Pushed([]string{"c1", "c2"}, []Target{tg})
			e := <-done
			cancel()
			c.mu.Lock()
			defer c.mu.Unlock()
			if e.Outcome != tc.outcome || e.Reason != tc.reason || c.reads != tc.reads {
				t.Fatalf("outcome %s (%s: %s) at reading %d, want %s (%s) at %d", e.Outcome, e.Reason, e.Message, c.reads, tc.outcome, tc.reason, tc.reads)
			}
		})
	}
}
