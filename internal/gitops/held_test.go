package gitops

import (
	"fmt"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/ledger"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/reject"
)

// migrated imports the flat in-tree ledger files (as the version before
// the ledger branch, 0fb9113, wrote them) into the ledger branch's tree
// the tests keep in m, as pipeline.migrate does.
func migrated(t *testing.T, m fstest.MapFS, targets, messages string) {
	t.Helper()
	l := ledger.Open(nil)
	if err := l.Import([]byte(targets), []byte(messages)); err != nil {
		t.Fatalf("import: %v", err)
	}
	apply(m, Change{Ledger: l.Changes()})
}

func ms(sent int) int64 { return t0.Add(time.Duration(sent) * time.Second).UnixMilli() }

// TestTheEarlierHeldOnboardingToOneTierWins.
//
// Defect: of two onboardings of t1 held for the same tier, the planner
// means to keep the first sent ("the value keeps it and its send time, the
// record's time is the latest"), but it writes the record with
// ledger.Set(key, p.sent, value), and Set ignores a send time older than
// the record's: when the later-sent onboarding arrives first, the earlier
// one's value is never written. The offboarding then carries out the
// later one: its release, and it skips a tier deployment sent between the
// two that in send order gave t1 its release.
//
// Send order: on premium@1, off premium@3, on basic 2.0@4 (t1 moves),
// on basic 1.0@5 (t1 is in basic already: nothing), so t1 ends basic@2.0;
// with a deployment of basic 3.0@5 between two onboardings @4 and @6 at
// 0.0 it ends basic@3.0.
//
// Expected: t1 ends as in send order, whatever the order of arrival of the
// held onboardings (guarantees: "Of several onboardings held for one
// tenant the first sent after the offboarding is carried out").
func TestTheEarlierHeldOnboardingToOneTierWins(t *testing.T) {
	onAt := func(tier, v string, sent int) msg {
		return msg{fmt.Sprintf("on-t1-%s-%s-%d", tier, v, sent), "onboarding",
			`{"tenant_id":"t1","tenant_tier":"` + tier + `","release_version":"` + v + `"}`, sent}
	}
	for _, tc := range []struct {
		name     string
		arrivals []msg
		want     string
	}{
		{"two releases, the later arrives first", []msg{
			onTo("t1", "premium", 1), onAt("basic", "1.0", 5), onAt("basic", "2.0", 4), offFrom("t1", "premium", 3)}, "basic@2.0"},
		{"a deployment between, the later onboarding arrives first", []msg{
			onTo("t1", "premium", 1), onAt("basic", "0.0", 6), depTier("basic", "3.0", 5), onAt("basic", "0.0", 4),
			offFrom("t1", "premium", 3)}, "basic@3.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t)
			outcomes := arrive(t, m, tc.arrivals)
			if where := whereIs(m, "t1"); where != tc.want {
				t.Errorf("t1 ends %s, want %s; outcomes: %s", where, tc.want, outcomes)
			}
		})
	}
}

// TestHoldsEnd: a held message waits HOLD from its send time; then
// EndHolds rejects it, reported with its reason, and it counts for nothing
// whatever arrives later; a message that arrives in conflict once its hold
// would have ended is rejected at once.
func TestHoldsEnd(t *testing.T) {
	m := seed(t)
	at := func(s int) Stamp {
		return Stamp{Now: t0.Add(time.Duration(s) * time.Second), Retention: 96 * time.Hour, Hold: 10 * time.Second}
	}
	endHolds := func(s int) Change {
		t.Helper()
		st := at(s)
		st.Sent, st.Ledger = st.Now, records(m)
		c, err := layout.PlanAt(FS{m}, message.Request{Kind: EndHolds}, st)
		if err != nil {
			t.Fatalf("end holds at %d: %v", s, err)
		}
		apply(m, c)
		return c
	}
	if c, err := tryWith(t, m, onTo("t1", "premium", 1), at(1)); err != nil || outcome(c) != "applied" {
		t.Fatalf("onboarding to premium: %v, %v", outcome(c), err)
	}
	if c, err := tryWith(t, m, onTo("t1", "basic", 3), at(4)); err != nil || !c.Held {
		t.Fatalf("onboarding to basic: %v, %v, want held", outcome(c), err)
	}
	if c := endHolds(12); len(c.Files) > 0 || len(c.Resolved) > 0 {
		t.Fatalf("a hold ended before its time: %+v", c)
	}
	c := endHolds(13)
	if len(c.Resolved) != 1 || c.Resolved[0].Outcome != "rejected" || c.Resolved[0].Reason != reject.TierConflict ||
		c.Resolved[0].MessageID != "on-t1-basic-3" || len(c.Files) > 0 {
		t.Fatalf("end of the hold: %+v", c)
	}
	if c := endHolds(14); !c.Empty() {
		t.Fatalf("a hold ended twice: %+v", c)
	}
	// The offboarding sent before it arrives: the tenant leaves premium and
	// the rejected onboarding does not take it to basic.
	if _, err := tryWith(t, m, offFrom("t1", "premium", 2), at(15)); err != nil {
		t.Fatal(err)
	}
	if where := whereIs(m, "t1"); where != "nowhere" {
		t.Fatalf("t1 is %s, want nowhere: a rejected onboarding took effect", where)
	}
	// A deployment to the absent tenant, past its hold when it arrives.
	_, err := tryWith(t, m, depTenant("t1", "basic", "2.0", 4), at(20))
	if r, ok := reject.As(err); !ok || r.Reason != reject.TenantNotFound {
		t.Fatalf("a conflict past its hold: %v, want tenant_not_found", err)
	}
}
