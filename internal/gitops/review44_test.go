package gitops

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/templates"
)

// handAdd lists tenant id in tier at release v, written as the
// reference's sed would (an edit by hand: no record of it).
func handAdd(t *testing.T, m fstest.MapFS, tier, id, v string) {
	t.Helper()
	m[templates.Root+"/tenants/"+tier+"/"+id+".yaml"] = &fstest.MapFile{Data: []byte(sedRender(t, tier, id, v))}
	k := templates.Root + "/tenants/" + tier + "/kustomization.yaml"
	m[k] = &fstest.MapFile{Data: []byte(file(m, "tenants/"+tier+"/kustomization.yaml") + "\n  - " + id + ".yaml\n")}
}

// TestReview44HandAddedTenantAtAnotherRelease: basic's last deployment is
// 2.0; someone lists a tenant "hand" in basic at 0.0 by hand (no record).
// The tree's word is 0.0 (guarantees: a tenant the tree has where its
// records do not say is taken at the tree's word). A deployment of hand
// to 2.0, sent after, must put its file at 2.0. treeBase gives a tenant
// without records a Set at the tier's last deployment carrying that
// deployment's release (2.0), not the file's: the fold says hand is at
// 2.0 already, so the deployment is "Already in place" and the file stays
// at 0.0. The same for a new deployment of the whole tier at 2.0.
func TestReview44HandAddedTenantAtAnotherRelease(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    msg
	}{
		{"per-tenant deployment", depTenant("hand", "basic", "2.0", 10)},
		{"tier deployment", depTier("basic", "2.0", 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t)
			deliver(t, m, onTo("b1", "basic", 1))
			deliver(t, m, depTier("basic", "2.0", 3))
			handAdd(t, m, "basic", "hand", "0.0")
			c := deliver(t, m, tc.x)
			if where := whereIs(m, "hand"); where != "basic@2.0" {
				t.Errorf("hand is %s after %s, want basic@2.0; outcome %s (%q)", where, tc.x.id, outcome(c), c.Message)
			}
		})
	}
}

// TestReview44TwoTiersDeploymentOfItsRecordedTier: t1 is onboarded to
// premium, then listed in basic too by hand. guarantees.md: "A tenant the
// tree has in two tiers at once (an edit by hand) is not touched: ... a
// tier deployment leaves it as it is and says so in its commit." A
// deployment of premium (the tier its records name) rewrites t1's premium
// file and says nothing: history(id, known) looks at the other tiers only
// when the fold puts the tenant outside the tier deployed, so the second
// listing is never seen.
func TestReview44TwoTiersDeploymentOfItsRecordedTier(t *testing.T) {
	m := seed(t)
	deliver(t, m, onTo("t1", "premium", 1))
	handAdd(t, m, "basic", "t1", "0.0")
	c := deliver(t, m, depTier("premium", "3.0", 6))
	if _, touched := c.Files[templates.Root+"/tenants/premium/t1.yaml"]; touched || !strings.Contains(c.Message, "Tenant t1 is in tiers") {
		t.Errorf("a deployment of premium touched t1, listed in basic and premium (changed %v), or did not say why not:\n%s",
			c.Paths(), c.Message)
	}
}

// readsCounter is a ledger Reader that counts the files read.
type readsCounter struct {
	r     Reader
	files map[string]bool
}

func (c *readsCounter) ReadFile(name string) ([]byte, error) {
	c.files[name] = true
	return c.r.ReadFile(name)
}

func (c *readsCounter) ReadDir(name string) ([]string, error) { return c.r.ReadDir(name) }

// TestReview44ReadsDoNotGrowWithTheTenantsMessages: a deployment of t1
// should read t1's group, the groups of the tiers it names and its
// message-id groups (guarantees.md: "a message reads its tenant's file, the
// files of the tiers it names and, when it holds or ends a hold, the
// holds' file"), however many messages t1 has had. record() instead calls
// ledger.Get(ledger.Hold(t1, id)) for every message id t1 has recorded,
// and Get looks each key up in its places: the holds' group, and the two
// places earlier versions would have kept that very key (targets/<h0>/...
// and targets/<h0h1>/<h2h3> by the hash of the whole key, files of other
// tenants' groups when they exist). So every message of a tenant reads
// two more files per message the tenant had within the retention (35
// files after one deployment, 113 after 40), and the holds' file even
// when nothing is held.
func TestReview44ReadsDoNotGrowWithTheTenantsMessages(t *testing.T) {
	reads := func(n int) int {
		m := seed(t)
		deliver(t, m, onTo("t1", "premium", 1))
		for i := range n {
			deliver(t, m, depTenant("t1", "premium", fmt.Sprintf("%d.0", i+1), 10+i))
		}
		x := depTenant("t1", "premium", "99.0", 300)
		req, err := message.Decode(x.kind, []byte(x.body))
		if err != nil {
			t.Fatal(err)
		}
		rc := &readsCounter{r: records(m), files: map[string]bool{}}
		if _, err := layout.PlanAt(FS{m}, req, Stamp{MessageID: x.id, Sent: t0.Add(300 * time.Second),
			Now: t0.Add(time.Hour), Retention: 96 * time.Hour, Ledger: rc}); err != nil {
			t.Fatal(err)
		}
		return len(rc.files)
	}
	if one, forty := reads(1), reads(40); forty > one {
		t.Errorf("a deployment of t1 reads %d ledger files after 1 earlier deployment, %d after 40: the reads grow with the tenant's history", one, forty)
	}
}

// TestReview44AppliedTurnedHeldPastItsHold: HOLD is 10 s. t1 is onboarded
// to premium (@1), then deployed to 2.0 (@3, applied). At 20 s the
// offboarding sent @2 arrives: in send order the deployment now meets an
// absent tenant (tenant_not_found), and its hold ended at 13 s. A message
// that arrives in conflict past its hold is rejected at once
// (TestHoldsEnd); one that turns into a conflict past its hold should be
// too. The change reports it "held" instead (Resolution outcome held, the
// commit says "is now held"), and indexes it as held: it is rejected only
// by a later EndHolds, with a second, contradicting result event.
func TestReview44AppliedTurnedHeldPastItsHold(t *testing.T) {
	m := seed(t)
	at := func(s int) Stamp {
		return Stamp{Now: t0.Add(time.Duration(s) * time.Second), Retention: 96 * time.Hour, Hold: 10 * time.Second}
	}
	for _, x := range []struct {
		x  msg
		at int
	}{{onTo("t1", "premium", 1), 1}, {depTenant("t1", "premium", "2.0", 3), 3}} {
		if _, err := tryWith(t, m, x.x, at(x.at)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := tryWith(t, m, offFrom("t1", "premium", 2), at(20))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Resolved {
		if r.MessageID == "dep-t1-premium-2.0-3" && r.Outcome != "rejected" {
			t.Errorf("the deployment, in conflict 7 s past its hold, is reported %s (%s), want rejected", r.Outcome, r.Reason)
		}
	}
	if len(c.Resolved) == 0 {
		t.Errorf("no resolution for the deployment: %+v", c)
	}
}

// TestReview44RevertedReleaseIsNotInPlace: t1 is deployed to 2.0; its
// file is then set back to 0.0 by hand (a revert). The platform sends the
// deployment to 2.0 again (a new message). The file is at 0.0, so the
// message should put it at 2.0. The fold says 2.0 already (anchor()
// compares only where the tenant is, not its release), so the change is
// "Already in place" (Change.Recorded) and the file stays at 0.0.
func TestReview44RevertedReleaseIsNotInPlace(t *testing.T) {
	m := seed(t)
	deliver(t, m, onTo("t1", "premium", 1))
	deliver(t, m, depTenant("t1", "premium", "2.0", 2))
	m[templates.Root+"/tenants/premium/t1.yaml"] = &fstest.MapFile{Data: []byte(sedRender(t, "premium", "t1", "0.0"))}
	c := deliver(t, m, msg{"again", message.Deployment, `{"tenant_id":"t1","tenant_tier":"premium","release_version":"2.0"}`, 5})
	if where := whereIs(m, "t1"); where != "premium@2.0" {
		t.Errorf("t1 is %s after a deployment to 2.0, want premium@2.0; outcome %s (%q)", where, outcome(c), c.Message)
	}
}

// TestReview44LegacyHeldResolvedUnderItsOwnID: in the ledger the version
// before the fold wrote (testdata/ledger-2026-12-07), a2's move to premium
// (message a2-move-on, sent @6) and a3's deployment (a3-dep, @8) are held;
// their ids are in the ledger's message groups at those send times. When
// the messages they wait for arrive, the change reports each as now
// applied, and the worker publishes a result event for it. The events
// name "legacy-held-premium" and "legacy-deploy-advanced" (decide.go
// legacy() makes up these ids), ids no queue ever sent: `send --wait
// a2-move-on` never hears of its outcome. They should name a2-move-on and
// a3-dep (or not be published at all).
func TestReview44LegacyHeldResolvedUnderItsOwnID(t *testing.T) {
	m := fromFixture(t, "ledger-2026-12-07")
	for _, tc := range []struct {
		x    msg
		want string
	}{
		{msg{"a2-off", message.Offboarding, `{"tenant_id":"a2","tenant_tier":"basic"}`, 4}, "a2-move-on"},
		{msg{"a3-on", message.Onboarding, `{"tenant_id":"a3","tenant_tier":"advanced","release_version":"0.0"}`, 7}, "a3-dep"},
	} {
		c := deliver(t, m, tc.x)
		for _, r := range c.Resolved {
			if r.MessageID != tc.want {
				t.Errorf("%s: a result event for message %q (outcome %s), want one for %s", tc.x.id, r.MessageID, r.Outcome, tc.want)
			}
		}
	}
}

// TestReview44LegacyHoldsEnd: the same ledger; HOLD is 20 s. At 50 s the
// holds of a2-move-on (@6) and a3-dep (@8) have ended: EndHolds should
// reject both (guarantees: "A hold lasts HOLD from the message's send
// time; then the message is rejected ... and a second result event").
// EndHolds reads only the holds' index (hold/...), which legacy held
// records (held/<tier>/<id>, release/<tier>/<id> with a value) are never
// in: it finds nothing due, and the two stay held until some other
// message about a2 or a3 happens to arrive (or Prune drops the old
// records, silently).
func TestReview44LegacyHoldsEnd(t *testing.T) {
	m := fromFixture(t, "ledger-2026-12-07")
	st := Stamp{Now: t0.Add(50 * time.Second), Retention: 96 * time.Hour, Hold: 20 * time.Second}
	st.Sent, st.Ledger = st.Now, records(m)
	c, err := layout.PlanAt(FS{m}, message.Request{Kind: EndHolds}, st)
	if err != nil {
		t.Fatal(err)
	}
	// An earlier version kept no ids of the messages it held: the commit
	// names them, and no result event can.
	if n := strings.Count(c.Message, "is rejected"); n != 2 || len(c.Resolved) != 0 {
		t.Errorf("EndHolds past the holds of the old ledger's two held messages rejected %d: %+v\n%s", n, c.Resolved, c.Message)
	}
	apply(m, c)
	if c := endHolds2(t, m, st); len(c.Files) > 0 || strings.Contains(c.Message, "is rejected") {
		t.Errorf("the next EndHolds: %+v", c)
	}
}

// TestReview44StaleBeforeUnknownTier: t1 is onboarded to premium (@1),
// moved to basic (off premium @3, on basic @4); then premium's template
// is removed (the tier is retired). A deployment of t1 in premium sent @2
// arrives late: in send order t1 left premium after it, so it changes
// nothing: stale, as the version before the fold said ("a deployment sent
// before the last deployment ... of the tenant it names, changes nothing
// of it, whether or not the tier or the tenant is still there";
// TestStaleBeforeExistence). tenantMessage checks the tier before it folds
// (only a message covered by the base is stale before checkTier), so the
// message is refused as unknown_tier and dead-lettered.
func TestReview44StaleBeforeUnknownTier(t *testing.T) {
	m := seed(t)
	for _, x := range []msg{onTo("t1", "premium", 1), offFrom("t1", "premium", 3), onTo("t1", "basic", 4)} {
		deliver(t, m, x)
	}
	delete(m, templates.Root+"/tier-templates/premium_tenant_template.yaml")
	c, err := try(t, m, depTenant("t1", "premium", "2.0", 2))
	if err != nil || !c.Stale {
		t.Errorf("a deployment to premium sent before t1 left it: %s, %v; want stale", outcome(c), err)
	}
}

// TestReview44OneIDTwoMessages: the ledger tells messages apart by id and
// send time (ledger.Seen(id, sent)), so two messages with one id and two
// send times are two messages: an onboarding of t1 (id m1, @1) and a
// deployment of t1 to 2.0 (id m1, @2), both applied. But a tenant's log
// keeps one record per id (log/<tenant>/<id>): record() writes the
// deployment over the onboarding. The next message about t1 (a deployment
// to 3.0) folds a deployment to an absent tenant, takes the tree for an
// edit by hand ("an edit by hand?" in the commit) and publishes a result
// event rejecting m1's deployment ("its hold ended"), which was applied
// and never held. No message should be reported rejected here, and no
// hand edit claimed.
func TestReview44OneIDTwoMessages(t *testing.T) {
	m := seed(t)
	deliver(t, m, msg{"m1", message.Onboarding, `{"tenant_id":"t1","tenant_tier":"premium","release_version":"0.0"}`, 1})
	deliver(t, m, msg{"m1", message.Deployment, `{"tenant_id":"t1","tenant_tier":"premium","release_version":"2.0"}`, 2})
	c := deliver(t, m, depTenant("t1", "premium", "3.0", 3))
	if len(c.Resolved) > 0 || strings.Contains(c.Message, "by hand") {
		t.Errorf("the third message reports %+v\n%s", c.Resolved, c.Message)
	}
}

func endHolds2(t *testing.T, m fstest.MapFS, st Stamp) Change {
	t.Helper()
	st.Ledger = records(m)
	c, err := layout.PlanAt(FS{m}, message.Request{Kind: EndHolds}, st)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
