package history

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/reject"
)

// randomEvents are n events of one tenant and its tiers, any mix.
func randomEvents(rng *rand.Rand, n int) []Event {
	tiers := []string{"basic", "premium"}
	kinds := []Kind{Onboard, Offboard, Deploy, TierDeploy, Set}
	var out []Event
	for i := range n {
		e := Event{Sent: int64(rng.IntN(20)), ID: fmt.Sprintf("m%02d", i), Kind: kinds[rng.IntN(len(kinds))],
			Tier: tiers[rng.IntN(2)], Release: fmt.Sprintf("%d.0", rng.IntN(3)), Rejected: rng.IntN(8) == 0}
		if e.Kind == Offboard {
			e.Release = ""
		}
		out = append(out, e)
	}
	return out
}

// TestFoldIgnoresArrivalOrder: the same events in any order fold to the
// same state and outcomes.
func TestFoldIgnoresArrivalOrder(t *testing.T) {
	for seed := range 500 {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		events := randomEvents(rng, 1+rng.IntN(12))
		want, wantSteps := Fold(Base{}, events)
		rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
		got, steps := Fold(Base{}, events)
		if got != want || fmt.Sprint(steps) != fmt.Sprint(wantSteps) {
			t.Fatalf("seed %d: %v then %v", seed, want, got)
		}
	}
}

// TestCompactKeepsTheState: folding the events before a bound into the
// base changes nothing of the state the rest fold to, whatever the bound.
func TestCompactKeepsTheState(t *testing.T) {
	for seed := range 2000 {
		rng := rand.New(rand.NewPCG(uint64(seed), 2))
		events := randomEvents(rng, 1+rng.IntN(12))
		want, _ := Fold(Base{}, events)
		bound := int64(rng.IntN(22))
		base, rest := Compact(Base{}, events, bound)
		for _, e := range rest {
			if e.Sent < bound {
				t.Fatalf("seed %d: %v kept below the bound %d", seed, e, bound)
			}
		}
		if got, _ := Fold(base, rest); got != want {
			t.Fatalf("seed %d, bound %d: %v compacted to %v, rest %v: %v, want %v", seed, bound, events, base, rest, got, want)
		}
	}
}

// TestOutcomes: each kind against each state.
func TestOutcomes(t *testing.T) {
	in := func(tier, r string) State { return State{Present: true, Tier: tier, Release: r, Asked: r} }
	for _, tc := range []struct {
		s       State
		e       Event
		outcome Outcome
		reason  reject.Reason
		after   State
	}{
		{Absent, Event{Kind: Onboard, Tier: "basic", Release: "1.0"}, Applied, "", in("basic", "1.0")},
		{in("basic", "2.0"), Event{Kind: Onboard, Tier: "basic", Release: "1.0"}, Unchanged, "", in("basic", "2.0")},
		{in("basic", "2.0"), Event{Kind: Onboard, Tier: "premium", Release: "1.0"}, Held, reject.TierConflict, in("basic", "2.0")},
		{in("basic", "2.0"), Event{Kind: Offboard, Tier: "premium"}, Held, reject.TierConflict, in("basic", "2.0")},
		{Absent, Event{Kind: Offboard, Tier: "premium"}, Unchanged, "", Absent},
		{Absent, Event{Kind: Deploy, Tier: "basic", Release: "3.0"}, Held, reject.TenantNotFound, Absent},
		{in("basic", "2.0"), Event{Kind: Deploy, Tier: "basic", Release: "3.0"}, Applied, "", State{Present: true, Tier: "basic", Release: "3.0", Asked: "2.0"}},
		{in("basic", "2.0"), Event{Kind: TierDeploy, Tier: "premium", Release: "3.0"}, Unchanged, "", in("basic", "2.0")},
		{Absent, Event{Kind: Onboard, Tier: "basic", Release: "1.0", Rejected: true}, Rejected, "", Absent},
		{in("premium", "1.0"), Event{Kind: Onboard, Tier: "basic", Release: "1.0", Rejected: true}, Rejected, reject.TierConflict, in("premium", "1.0")},
		{in("basic", "2.0"), Event{Kind: Set, Tier: "basic"}, Applied, "", State{Present: true, Tier: "basic", Asked: "2.0"}},
	} {
		tc.e.Sent, tc.e.ID = 1, "m"
		after, steps := Fold(Base{State: tc.s}, []Event{tc.e})
		if st := steps[0]; st.Outcome != tc.outcome || st.Reason != tc.reason || after != tc.after {
			t.Errorf("%+v on %+v: %s %s %+v, want %s %s %+v", tc.e, tc.s, st.Outcome, st.Reason, after, tc.outcome, tc.reason, tc.after)
		}
	}
}
