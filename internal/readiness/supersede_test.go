package readiness

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/flux"
)

// TestSuperseded: a change a later one replaces before it is ready is
// superseded, naming the later message, not timed out; what the later one
// leaves of it is still waited for; unrelated changes are not touched. The
// clock jumps past the timeout at the eighth reading: a change not decided
// by then times out and fails the case.
func TestSuperseded(t *testing.T) {
	type want struct{ outcome, by string }
	for _, tc := range []struct {
		name    string
		batch   bool // pushed together, as one receive makes them
		changes func(c *fakeClock) []Target
		state   flux.State
		want    map[string]want
	}{
		{name: "deployment 2.0 then 3.0 of a tier", changes: func(c *fakeClock) []Target {
			return []Target{
				change("m1", "deployment", "c1", c.Now(), rel("t1", "premium", "2.0.x"), rel("t2", "premium", "2.0.x")),
				change("m2", "deployment", "c2", c.Now(), rel("t1", "premium", "3.0.x"), rel("t2", "premium", "3.0.x")),
			}
		}, state: applied("c2", releases(3, "3.0.1", "t1-premium", "t2-premium")),
			want: map[string]want{"m1": {OutcomeSuperseded, "m2"}, "m2": {OutcomeReady, ""}}},
		{name: "pushed in one batch", batch: true, changes: func(c *fakeClock) []Target {
			return []Target{
				change("m1", "deployment", "c1", c.Now(), rel("t1", "premium", "2.0.x")),
				change("m2", "deployment", "c2", c.Now(), rel("t1", "premium", "3.0.x")),
			}
		}, state: applied("c2", releases(3, "3.0.1", "t1-premium")),
			want: map[string]want{"m1": {OutcomeSuperseded, "m2"}, "m2": {OutcomeReady, ""}}},
		{name: "onboarding then offboarding", changes: func(c *fakeClock) []Target {
			return []Target{
				change("m1", "onboarding", "c1", c.Now(), rel("t1", "premium", "0.0.x")),
				change("m2", "offboarding", "c2", c.Now(), gone("t1", "premium")),
			}
		}, state: applied("c2", nil),
			want: map[string]want{"m1": {OutcomeSuperseded, "m2"}, "m2": {OutcomeReady, ""}}},
		{name: "onboarding then a deployment of its tier", changes: func(c *fakeClock) []Target {
			return []Target{
				change("m1", "onboarding", "c1", c.Now(), rel("t1", "premium", "0.0.x")),
				change("m2", "deployment", "c2", c.Now(), rel("t1", "premium", "1.0.x"), rel("t2", "premium", "1.0.x")),
			}
		}, state: applied("c2", releases(2, "1.0.1", "t1-premium", "t2-premium")),
			want: map[string]want{"m1": {OutcomeSuperseded, "m2"}, "m2": {OutcomeReady, ""}}},
		{name: "a deployment, then one of its tenants offboarded", changes: func(c *fakeClock) []Target {
			return []Target{
				change("m1", "deployment", "c1", c.Now(), rel("t1", "premium", "3.0.x"), rel("t2", "premium", "3.0.x")),
				change("m2", "offboarding", "c2", c.Now(), gone("t1", "premium")),
			}
		}, state: applied("c2", releases(2, "3.0.1", "t2-premium")),
			want: map[string]want{"m1": {OutcomeReady, ""}, "m2": {OutcomeReady, ""}}},
		{name: "two tenants", changes: func(c *fakeClock) []Target {
			return []Target{
				change("m1", "onboarding", "c1", c.Now(), rel("t1", "premium", "0.0.x")),
				change("m2", "onboarding", "c2", c.Now(), rel("t2", "premium", "0.0.x")),
			}
		}, state: applied("c2", releases(1, "0.0.1", "t1-premium", "t2-premium")),
			want: map[string]want{"m1": {OutcomeReady, ""}, "m2": {OutcomeReady, ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			c := &fakeCluster{states: []flux.State{tc.state}}
			f, events := follower(t, c, clock, 8, Options{})
			f.Pushed([]string{"old"}, nil)
			changes := tc.changes(clock)
			if tc.batch {
				f.Pushed([]string{changes[0].Commit, "ledger", changes[1].Commit}, changes)
			} else {
				for _, ch := range changes {
					f.Pushed([]string{ch.Commit}, []Target{ch})
				}
			}
			got := collect(events, len(tc.want))
			for id, w := range tc.want {
				if e := got[id]; e.Outcome != w.outcome || e.SupersededBy != w.by {
					t.Errorf("%s: %s (superseded by %q: %s), want %s (%q)", id, e.Outcome, e.SupersededBy, e.Message, w.outcome, w.by)
				}
			}
		})
	}
}

// TestSupersededByAnotherReplica: another replica pushes deployment 3.0
// of the tier on top of this one's 2.0. Flux names its commit, which this
// follower has not seen: reading the branch places it and tells whose
// change it is, and 2.0 is superseded by it.
func TestSupersededByAnotherReplica(t *testing.T) {
	clock := newClock()
	m1 := change("m1", "deployment", "c1", clock.Now(), rel("t1", "premium", "2.0.x"))
	m2 := change("m2", "deployment", "c2", clock.Now(), rel("t1", "premium", "3.0.x"))
	c := &fakeCluster{states: []flux.State{applied("c2", releases(3, "3.0.1", "t1-premium"))}}
	var depths []int
	f, events := follower(t, c, clock, 8, Options{History: func(_ context.Context, _ time.Time, depth int) ([]Commit, error) {
		depths = append(depths, depth)
		return []Commit{{Hash: "old"}, {Hash: "c1", Change: &m1}, {Hash: "x1"}, {Hash: "c2", Change: &m2}}, nil
	}})
	f.Pushed([]string{"old"}, nil)
	f.Pushed([]string{"c1"}, []Target{m1})
	e := <-events
	if e.MessageID != "m1" || e.Outcome != OutcomeSuperseded || e.SupersededBy != "m2" {
		t.Fatalf("%s: %s (superseded by %q): %s", e.MessageID, e.Outcome, e.SupersededBy, e.Message)
	}
	if len(depths) != 1 || depths[0] != firstDepth {
		t.Errorf("the branch was read at depths %v, want once at %d", depths, firstDepth)
	}
}

// TestFailedBranchReadingIsRetried: someone else's commit lands on top of
// the worker's and Flux names it; the one reading of the branch that would
// place it fails. It is read again (backing off), the worker's change is
// found applied under the later commit, and it is ready, not a timeout.
func TestFailedBranchReadingIsRetried(t *testing.T) {
	clock := newClock()
	m1 := change("m1", "deployment", "c1", clock.Now(), rel("t1", "premium", "2.0.x"))
	c := &fakeCluster{states: []flux.State{applied("x1", releases(2, "2.0.1", "t1-premium"))},
		read: func(int) { clock.Add(10 * time.Second) }}
	calls := 0
	f, events := follower(t, c, clock, 200, Options{History: func(context.Context, time.Time, int) ([]Commit, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("fetch: connection reset")
		}
		return []Commit{{Hash: "old"}, {Hash: "c1", Change: &m1}, {Hash: "x1"}}, nil
	}})
	f.Pushed([]string{"old"}, nil)
	f.Pushed([]string{"c1"}, []Target{m1})
	e := <-events
	if calls < 2 {
		t.Fatalf("the planned failed reading did not happen (%d readings)", calls)
	}
	if e.MessageID != "m1" || e.Outcome != OutcomeReady {
		t.Fatalf("%s: %s (%s), want ready after the branch was read again", e.MessageID, e.Outcome, e.Message)
	}
}
