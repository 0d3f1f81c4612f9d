package readiness

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/flux"
)

// TestResumePublishesNoOutcomeTwice: a restarted worker reads its commits
// back. m1 and m4 were published before the restart (the record holds
// them): not followed again. m3 was replaced by m4: superseded, from the
// history alone. m2 is followed to ready. A second restart finds all four
// recorded and follows nothing.
func TestResumePublishesNoOutcomeTwice(t *testing.T) {
	clock := newClock()
	at := clock.Now()
	m1 := change("m1", "onboarding", "c1", at, rel("t1", "premium", "0.0.x"))
	m2 := change("m2", "onboarding", "c2", at, rel("t2", "premium", "0.0.x"))
	m3 := change("m3", "deployment", "c3", at, rel("t5", "advanced", "2.0.x"))
	m4 := change("m4", "deployment", "c4", at, rel("t5", "advanced", "3.0.x"))
	history := []Commit{{Hash: "c0"}, {Hash: "c1", Change: &m1}, {Hash: "c2", Change: &m2}, {Hash: "ledger"},
		{Hash: "c3", Change: &m3}, {Hash: "c4", Change: &m4}}
	record := &fakeRecord{outcomes: map[string]string{"m1": OutcomeReady, "m4": OutcomeReady}}
	rs := releases(1, "0.0.1", "t1-premium", "t2-premium")
	maps.Copy(rs, releases(2, "3.0.1", "t5-advanced"))
	c := &fakeCluster{states: []flux.State{applied("c4", rs)}}
	f, events := follower(t, c, clock, 8, Options{Record: record})

	if n := f.Resume(context.Background(), history); n != 2 {
		t.Errorf("followed %d changes again, want 2 (m2, m3)", n)
	}
	got := collect(events, 2)
	if e := got["m3"]; e.Outcome != OutcomeSuperseded || e.SupersededBy != "m4" {
		t.Errorf("m3: %s (by %q), want superseded by m4", e.Outcome, e.SupersededBy)
	}
	if e := got["m2"]; e.Outcome != OutcomeReady {
		t.Errorf("m2: %s: %s", e.Outcome, e.Message)
	}
	if ids := slices.Sorted(maps.Keys(got)); !slices.Equal(ids, []string{"m2", "m3"}) {
		t.Errorf("published %v, want m2 and m3 only", ids)
	}

	again, _ := follower(t, &fakeCluster{states: []flux.State{applied("c4", rs)}}, newClock(), 8, Options{Record: record})
	if n := again.Resume(context.Background(), history); n != 0 || again.Pending() != 0 {
		t.Errorf("a second restart follows %d changes (%d pending), want none: all four are recorded", n, again.Pending())
	}
}

// TestTwoFollowersPublishOnce: two replicas follow the same change (one
// restarted and reading back what the other pushed and still follows);
// both decide it, the record lets one publish.
func TestTwoFollowersPublishOnce(t *testing.T) {
	record := &fakeRecord{outcomes: map[string]string{}, claimed: make(chan map[string]string, 2)}
	clock := newClock()
	m1 := change("m1", "onboarding", "c1", clock.Now(), rel("t1", "premium", "0.0.x"))
	var events []<-chan Event
	var stops []func()
	for range 2 {
		c := &fakeCluster{states: []flux.State{applied("c1", releases(1, "0.0.1", "t1-premium"))}}
		f, ev, stop := stoppable(t, c, clock, 0, Options{Record: record})
		f.Pushed([]string{"c1"}, []Target{m1})
		events, stops = append(events, ev), append(stops, stop)
	}
	// Both decided; once both have stopped, whatever they published is
	// in the channels (OnDone runs in Run).
	<-record.claimed
	<-record.claimed
	published := 0
	for i, ev := range events {
		stops[i]()
		published += len(ev)
	}
	if published != 1 {
		t.Fatalf("the outcome was published %d times, want once", published)
	}
}
