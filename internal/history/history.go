// Package history decides what a tenant is from the messages about it:
// one pure function, Fold, takes the tenant's recorded messages (and the
// deployments of the tiers it was in) and returns its state and what each
// message amounts to, in send order. Arrival order is not an input: the
// same set of messages gives the same answer however it arrived, so the
// tree, which the planner edits to reach that answer after every push, is
// always the send-order result of what has arrived.
//
// A message whose send-order outcome is a conflict that a message not yet
// arrived could explain (an onboarding to another tier before the
// offboarding that moves the tenant out, a deployment to a tenant before
// its onboarding) is held: it takes no effect until the fold finds it
// explained. Once its hold has ended it is recorded as rejected, and
// takes no effect whatever arrives later.
package history

import (
	"cmp"
	"slices"

	"github.com/tenant-worker/tenant-worker/internal/reject"
)

// Kind is what an event does.
type Kind string

// The kinds of events.
const (
	// Onboard puts an absent tenant in Tier at Release.
	Onboard Kind = "on"
	// Offboard removes a tenant from Tier.
	Offboard Kind = "off"
	// Deploy sets the Release of a tenant in Tier (a per-tenant deployment).
	Deploy Kind = "deploy"
	// TierDeploy sets the Release of the tenant if it is in Tier then, and
	// does nothing otherwise: a deployment of a whole tier.
	TierDeploy Kind = "tier"
	// Set is a release recorded by an earlier version of the worker (or
	// found in the tree for a tenant it never recorded): TierDeploy's
	// effect, for this tenant alone. An empty Release is "as the file has
	// it": the release is unknown from then on.
	Set Kind = "set"
)

// Event is one message about a tenant, or about a tier it may be in.
type Event struct {
	// Sent is the SQS SentTimestamp (Unix ms); ID the message id, which
	// breaks ties between equal send times (it does not depend on the
	// order of arrival).
	Sent int64
	ID   string
	Kind Kind
	Tier string
	// Release is MAJOR.MINOR; empty for Offboard.
	Release string
	// Rejected: the event was held and its hold ended before anything
	// explained it. It takes no effect.
	Rejected bool
}

// Compare orders events by send time, then by id, then tier deployments
// before tenant events (a tenant's Set is what it holds after the tier's
// deployment of the same message).
func Compare(a, b Event) int {
	if c := cmp.Compare(a.Sent, b.Sent); c != 0 {
		return c
	}
	if c := cmp.Compare(a.ID, b.ID); c != 0 {
		return c
	}
	return cmp.Compare(rank(a.Kind), rank(b.Kind))
}

func rank(k Kind) int {
	if k == TierDeploy {
		return 0
	}
	return 1
}

// State is where a tenant is.
type State struct {
	Present bool
	Tier    string
	// Release is the release the tenant's file is at; empty when unknown
	// (the file's, as it is).
	Release string
	// Asked is the release of the onboarding that put it in Tier: what a
	// file made while Release is unknown is rendered at.
	Asked string
}

// Same reports whether s and o are the same place and release (Asked
// aside).
func (s State) Same(o State) bool {
	if !s.Present || !o.Present {
		return s.Present == o.Present
	}
	return s.Tier == o.Tier && s.Release == o.Release
}

// Absent is no tenant.
var Absent = State{}

// Base is where a tenant was after every event up to (Sent, ID): what the
// ledger keeps of the events it folded and let go (older than the queues'
// retention, so that no message before it can still arrive).
type Base struct {
	State
	Sent int64
	ID   string
}

// covers reports whether e is at or before the base: folded into it
// already.
func (b Base) covers(e Event) bool {
	return e.Sent < b.Sent || e.Sent == b.Sent && e.ID <= b.ID
}

// Outcome is what an event amounts to in send order.
type Outcome string

// The outcomes.
const (
	// Applied: the event changed the tenant's state.
	Applied Outcome = "applied"
	// Unchanged: what it asks was in place (an onboarding of a tenant in
	// its tier, an offboarding of an absent one), or it is a tier's
	// deployment that did not find the tenant in that tier.
	Unchanged Outcome = "unchanged"
	// Held: a conflict that an event sent before it, not yet arrived,
	// could explain.
	Held Outcome = "held"
	// Rejected: held, and its hold ended.
	Rejected Outcome = "rejected"
	// Covered: at or before the base; folded already.
	Covered Outcome = "covered"
)

// Step is one event's part in a fold.
type Step struct {
	Event
	Outcome Outcome
	// Reason is the conflict of a held or rejected event.
	Reason reject.Reason
	// After is the state the event leaves.
	After State
}

// Fold folds events, in send order (Compare), over base; events may come
// in any order. It returns the final state and one step per event, in send
// order.
func Fold(base Base, events []Event) (State, []Step) {
	sorted := slices.Clone(events)
	slices.SortStableFunc(sorted, Compare)
	s := base.State
	steps := make([]Step, 0, len(sorted))
	for _, e := range sorted {
		st := Step{Event: e}
		if base.covers(e) {
			st.Outcome = Covered
		} else {
			s, st.Outcome, st.Reason = apply(s, e)
		}
		st.After = s
		steps = append(steps, st)
	}
	return s, steps
}

// apply is one event on s. A rejected event takes no effect, whatever it
// meets.
func apply(s State, e Event) (State, Outcome, reject.Reason) {
	if e.Rejected {
		e.Rejected = false
		_, _, r := apply(s, e)
		return s, Rejected, r
	}
	conflict := func(r reject.Reason) (State, Outcome, reject.Reason) {
		return s, Held, r
	}
	elsewhere := s.Present && s.Tier != e.Tier
	switch e.Kind {
	case Onboard:
		switch {
		case elsewhere:
			return conflict(reject.TierConflict)
		case s.Present:
			return s, Unchanged, ""
		}
		return State{Present: true, Tier: e.Tier, Release: e.Release, Asked: e.Release}, Applied, ""
	case Offboard:
		switch {
		case elsewhere:
			return conflict(reject.TierConflict)
		case !s.Present:
			return s, Unchanged, ""
		}
		return Absent, Applied, ""
	case Deploy:
		switch {
		case elsewhere:
			return conflict(reject.TierConflict)
		case !s.Present:
			return conflict(reject.TenantNotFound)
		}
		return release(s, e.Release)
	case TierDeploy, Set:
		if !s.Present || elsewhere || e.Kind == TierDeploy && e.Release == "" {
			return s, Unchanged, ""
		}
		return release(s, e.Release)
	}
	return s, Unchanged, ""
}

func release(s State, r string) (State, Outcome, reject.Reason) {
	if s.Release == r {
		return s, Unchanged, ""
	}
	s.Release = r
	return s, Applied, ""
}

// Conflict reports whether o is a conflict (held or rejected).
func (o Outcome) Conflict() bool { return o == Held || o == Rejected }

// Compact folds into base the events sent before bound (those no message
// sent since bound can come before): the base they leave, at the last of
// them, and the rest, in send order. Cost stays flat: a tenant's record
// holds its base and its messages of the queues' retention period.
func Compact(base Base, events []Event, bound int64) (Base, []Event) {
	_, steps := Fold(base, events)
	var rest []Event
	for _, st := range steps {
		switch {
		case st.Sent >= bound:
			rest = append(rest, st.Event)
		case st.Outcome != Covered:
			base = Base{State: st.After, Sent: st.Sent, ID: st.ID}
		}
	}
	return base, rest
}
