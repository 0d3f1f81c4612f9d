package gitops

import (
	"fmt"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/ledger"
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
