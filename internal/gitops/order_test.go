package gitops

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/message"
)

// Orders of arrival across the three queues (found by a review of issue
// 19) in which the tree must end as the messages in send order leave it.
// Each case lists the messages in arrival order (sent = their send time,
// in seconds) and where t1 must end (the end in send order).

func onTo(id, tier string, sent int) msg {
	return msg{fmt.Sprintf("on-%s-%s-%d", id, tier, sent), message.Onboarding,
		`{"tenant_id":"` + id + `","tenant_tier":"` + tier + `","release_version":"0.0"}`, sent}
}

func offFrom(id, tier string, sent int) msg {
	return msg{fmt.Sprintf("off-%s-%s-%d", id, tier, sent), message.Offboarding,
		`{"tenant_id":"` + id + `","tenant_tier":"` + tier + `"}`, sent}
}

func depTier(tier, v string, sent int) msg {
	return msg{fmt.Sprintf("dep-%s-%s-%d", tier, v, sent), message.Deployment,
		`{"tenant_tier":"` + tier + `","release_version":"` + v + `"}`, sent}
}

func depTenant(id, tier, v string, sent int) msg {
	return msg{fmt.Sprintf("dep-%s-%s-%s-%d", id, tier, v, sent), message.Deployment,
		`{"tenant_tier":"` + tier + `","release_version":"` + v + `","tenant_id":"` + id + `"}`, sent}
}

// r3run delivers the arrivals in order and returns their outcomes; a
// refusal is "refused:<error>".
func arrive(t *testing.T, m fstest.MapFS, arrivals []msg) string {
	t.Helper()
	var got []string
	for _, x := range arrivals {
		c, err := try(t, m, x)
		if err != nil {
			got = append(got, "refused("+x.id+": "+err.Error()+")")
			continue
		}
		got = append(got, outcome(c))
	}
	return strings.Join(got, " ")
}

// TestReleaseRecordsArePerTier: the ledger keeps one release
// record per tenant (release/<id>), not per tenant and tier. A deployment
// of the tenant's OLD tier that reached it before the offboarding of a
// move (the deployment queue is fast, the offboarding queue slow) leaves a
// release record newer than the move. In send order that deployment found
// the tenant gone already and did nothing to it. Then a deployment of the
// NEW tier sent after the onboarding into it, but before the old tier's
// deployment, is judged stale for the tenant and skips it: the tenant stays
// at 0.0 although the messages in send order leave it at 3.0. No message
// here is refused in send order, so this is not the documented "rejections
// depend on the order of arrival".
//
// Expected: a release record written while the tenant was in another tier
// does not make a deployment of its current tier stale (the record is
// per tier, or a move resets it); t1 ends basic@3.0.
func TestReleaseRecordsArePerTier(t *testing.T) {
	for _, tc := range []struct {
		name     string
		arrivals []msg
	}{
		{"tier deployment of the new tier", []msg{
			onTo("t1", "premium", 1), depTier("premium", "2.0", 6), offFrom("t1", "premium", 3),
			onTo("t1", "basic", 4), depTier("basic", "3.0", 5)}},
		{"per-tenant deployment in the new tier", []msg{
			onTo("t1", "premium", 1), depTier("premium", "2.0", 6), offFrom("t1", "premium", 3),
			onTo("t1", "basic", 4), depTenant("t1", "basic", "3.0", 5)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t)
			outcomes := arrive(t, m, tc.arrivals)
			if where := whereIs(m, "t1"); where != "basic@3.0" {
				t.Errorf("t1 ends %s, want basic@3.0 (send order: on premium@1, off premium@3, on basic@4, "+
					"deploy basic 3.0@5, deploy premium 2.0@6); outcomes: %s", where, outcomes)
			}
		})
	}
}

// TestHeldDeploymentToAnotherTierLeavesTheTenantsOwn: a per-tenant
// deployment that names a tier the tenant is not in is now held (it was
// tier_conflict) by writing release/<id> with the held value. That record
// is also the tenant's release record, so every deployment of the tenant's
// real tier sent before it, arriving after it, is stale for the tenant. In
// send order the mistaken deployment is refused (tier_conflict) and the
// earlier deployment of the real tier applies.
//
// Expected: a held deployment to tier X does not count as a change of the
// tenant's release in tier Y; t1 ends basic@3.0.
func TestHeldDeploymentToAnotherTierLeavesTheTenantsOwn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		arrivals []msg
	}{
		{"per-tenant deployment of its tier", []msg{
			onTo("t1", "basic", 1), depTenant("t1", "premium", "2.0", 5), depTenant("t1", "basic", "3.0", 3)}},
		{"tier deployment of its tier", []msg{
			onTo("t1", "basic", 1), depTenant("t1", "premium", "2.0", 5), depTier("basic", "3.0", 3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t)
			outcomes := arrive(t, m, tc.arrivals)
			if where := whereIs(m, "t1"); where != "basic@3.0" {
				t.Errorf("t1 ends %s, want basic@3.0; outcomes: %s", where, outcomes)
			}
		})
	}
}

// TestOffboardingFromTheNewTierDuringAMove: a move premium -> basic
// is sent as offboarding(premium)@3, onboarding(basic)@4, and the tenant is
// then offboarded from basic @5. The onboarding arrives first and is held;
// the offboarding from basic arrives next and finds t1 in premium, so it is
// refused as tier_conflict (dead-lettered), although in send order it found
// t1 in basic and removed it. When the offboarding from premium arrives it
// completes the held move, and t1 ends live in basic: a tenant whose last
// message was its offboarding stays onboarded.
//
// Expected: the offboarding from basic sent after the held onboarding is
// not refused; t1 ends nowhere.
func TestOffboardingFromTheNewTierDuringAMove(t *testing.T) {
	m := seed(t)
	outcomes := arrive(t, m, []msg{
		onTo("t1", "premium", 1), onTo("t1", "basic", 4), offFrom("t1", "basic", 5), offFrom("t1", "premium", 3)})
	if strings.Contains(outcomes, "refused") {
		t.Errorf("a message was refused: %s", outcomes)
	}
	if where := whereIs(m, "t1"); where != "nowhere" {
		t.Errorf("t1 ends %s, want nowhere (its last message, sent at 5, offboards it); outcomes: %s", where, outcomes)
	}
}

// TestTheFirstHeldOnboardingWins: one held/<id>
// record per tenant, written with ledger.Set, which keeps the newer send
// time. Two onboardings to two other tiers, both arriving before the
// offboarding of the move: the one sent first (advanced@4) is the one that
// takes effect in send order (the later, basic@5, then meets t1 in
// advanced: tier_conflict). The worker reports both as "held", but the
// record keeps only basic@5, so the move ends in basic. In the other order
// of arrival the worker reports the earlier one "held" while Set ignores
// it: it is acknowledged and never carried out nor refused.
//
// Expected: t1 ends advanced@0.0 (the send order's end), whatever the order
// of arrival of the two onboardings; a message reported held is carried
// out or refused later, never silently dropped.
func TestTheFirstHeldOnboardingWins(t *testing.T) {
	for _, tc := range []struct {
		name     string
		arrivals []msg
	}{
		{"onboardings arrive in send order", []msg{
			onTo("t1", "premium", 1), onTo("t1", "advanced", 4), onTo("t1", "basic", 5), offFrom("t1", "premium", 3)}},
		{"the later onboarding arrives first", []msg{
			onTo("t1", "premium", 1), onTo("t1", "basic", 5), onTo("t1", "advanced", 4), offFrom("t1", "premium", 3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t)
			outcomes := arrive(t, m, tc.arrivals)
			if where := whereIs(m, "t1"); where != "advanced@0.0" {
				t.Errorf("t1 ends %s, want advanced@0.0 (send order: off premium@3, on advanced@4 applied, "+
					"on basic@5 tier_conflict); outcomes: %s", where, outcomes)
			}
		})
	}
}

// TestRepeatedOnboardingWithAHeldMove: a move onboarded twice (the
// platform retried it under a new message id) with a tier deployment sent
// between the two, all before the move's offboarding arrives: the first
// onboarding sent is the one carried out, so the deployment sent after it
// gives the tenant its release, as in send order.
//
// Not held: a repeated onboarding that overtakes the first one while the
// tenant does not exist yet is carried out as the first (its release, not
// a deployment's sent between them); the first, arriving last, is stale.
// Nothing recorded tells a repeat from a first onboarding before the first
// has arrived. docs/guarantees.md says so.
func TestRepeatedOnboardingWithAHeldMove(t *testing.T) {
	for _, tc := range []struct {
		name     string
		arrivals []msg
		want     string
	}{
		{"a held move onboarded twice, a deployment between", []msg{
			onTo("t1", "premium", 1), onTo("t1", "basic", 4), depTier("basic", "2.0", 5), onTo("t1", "basic", 6),
			offFrom("t1", "premium", 3)}, "basic@2.0"},
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

// TestOnboardingRendersALeftoverFile: a file tenants/premium/
// t1.yaml that no kustomization lists (left over, or written by hand)
// declares the same objects (kind, namespace, name) as the template renders
// for t1, but at release 9.0 and deploying into the pool's namespace. The
// onboarding of t1 at release 0.0 lists it as it is: Flux applies a
// release and a target namespace no message asked for, and the intent
// check passes it because it compares objects by kind, namespace and name
// only. The message names the release; the onboarding writes "the tenant
// file from the tier template".
//
// Expected: after the onboarding t1's HelmRelease has the message's
// release (0.0.x) and the template's targetNamespace (t1); the values Flux
// image automation owns may be kept.
func TestOnboardingRendersALeftoverFile(t *testing.T) {
	m := seed(t)
	tmpl := file(m, "tier-templates/premium_tenant_template.yaml")
	left := strings.NewReplacer("{TENANT_ID}", "t1", "{RELEASE_VERSION}", "9.0").Replace(tmpl)
	left = strings.Replace(left, "targetNamespace: t1", "targetNamespace: pool-1", 1)
	m[layout.TenantFile("premium", "t1")] = &fstest.MapFile{Data: []byte(left)}
	deliver(t, m, onTo("t1", "premium", 1))
	f := file(m, "tenants/premium/t1.yaml")
	if where := whereIs(m, "t1"); where != "premium@0.0" || !strings.Contains(f, "targetNamespace: t1") {
		t.Errorf("t1 is %s after its onboarding at 0.0, file:\n%s", where, f)
	}
}

// TestPooledEnvsUnderAnotherKustomizationName: kustomize (and Flux)
// read pooled-envs/kustomization.yml as the folder's kustomization, and
// the intent check reads it too, but PooledEnvs reads only
// kustomization.yaml. A deployment of basic then finds no pooled
// environment: pool-1 stays at 0.0.x and the deployment is reported
// applied. (Tenant ids equal to a pooled env's name are not refused either:
// checkNotPooledEnv sees no env.)
//
// Expected: pool-1 is deployed at 2.0, or the deployment pauses naming the
// file; never "applied" with the pool left behind.
func TestPooledEnvsUnderAnotherKustomizationName(t *testing.T) {
	m := seed(t)
	k := layout.PooledEnvsDir() + "/kustomization.yaml"
	m[layout.PooledEnvsDir()+"/kustomization.yml"] = m[k]
	delete(m, k)
	c, err := try(t, m, depTier("basic", "2.0", 1))
	if IsBroken(err) {
		return // paused, naming the file: fine
	}
	if err != nil {
		t.Fatalf("deployment of basic: %v", err)
	}
	if !strings.Contains(file(m, "pooled-envs/pool-1.yaml"), `version: "2.0.x"`) {
		t.Errorf("deployment of basic is %s, but pool-1 is not at 2.0:\n%s", outcome(c), file(m, "pooled-envs/pool-1.yaml"))
	}
}

// TestEqualSendTimesAreOrderedByMessageID: SQS keeps milliseconds, so two
// messages may share a send time; they are ordered by message id, which
// does not depend on the order of arrival. "off-t1-premium-3" comes before
// "on-t1-basic-3": the offboarding takes t1 out of premium, then the
// onboarding puts it in basic, whichever arrives first.
func TestEqualSendTimesAreOrderedByMessageID(t *testing.T) {
	for _, arrivals := range [][]msg{
		{onTo("t1", "premium", 1), onTo("t1", "basic", 3), offFrom("t1", "premium", 3)},
		{onTo("t1", "premium", 1), offFrom("t1", "premium", 3), onTo("t1", "basic", 3)},
	} {
		m := seed(t)
		outcomes := arrive(t, m, arrivals)
		if where := whereIs(m, "t1"); where != "basic@0.0" {
			t.Errorf("t1 ends %s, want basic@0.0; outcomes: %s", where, outcomes)
		}
	}
}

// The four histories of issue 44, each valid in send order and delivered
// in an order that ended in another tree before the fold: the tree must
// end as the send order leaves it, and nothing is refused.
func TestALeaverIsNotLeftLive(t *testing.T) {
	m := seed(t)
	on1, off2, on3, off4 := onTo("t1", "premium", 1), offFrom("t1", "premium", 2), onTo("t1", "basic", 3), offFrom("t1", "basic", 4)
	outcomes := arrive(t, m, []msg{on1, off4, on3, off2})
	if where := whereIs(m, "t1"); where != "nowhere" || strings.Contains(outcomes, "refused") {
		t.Errorf("t1 ends %s, want nowhere; outcomes: %s", where, outcomes)
	}
}

func TestARepeatThatTurnsOutFirstCreatesAgain(t *testing.T) {
	m := seed(t)
	on1, dep2, off3, on4 := onTo("t1", "premium", 1), depTenant("t1", "premium", "2.0", 2), offFrom("t1", "premium", 3), onTo("t1", "premium", 4)
	outcomes := arrive(t, m, []msg{on1, on4, dep2, off3})
	if where := whereIs(m, "t1"); where != "premium@0.0" || strings.Contains(outcomes, "refused") {
		t.Errorf("t1 ends %s, want premium@0.0; outcomes: %s", where, outcomes)
	}
}

func TestAnAppliedTenantDeploymentCarriesOver(t *testing.T) {
	m := seed(t)
	on1, off3, on7, dep8 := onTo("t1", "advanced", 1), offFrom("t1", "advanced", 3), onTo("t1", "advanced", 7), depTenant("t1", "advanced", "8.0", 8)
	outcomes := arrive(t, m, []msg{on1, dep8, off3, on7})
	if where := whereIs(m, "t1"); where != "advanced@8.0" || strings.Contains(outcomes, "refused") {
		t.Errorf("t1 ends %s, want advanced@8.0; outcomes: %s", where, outcomes)
	}
}

func TestAHeldDeploymentIsNotUsedUp(t *testing.T) {
	m := seed(t)
	on3, off4, on6, dep8 := onTo("t1", "basic", 3), offFrom("t1", "basic", 4), onTo("t1", "basic", 6), depTenant("t1", "basic", "8.0", 8)
	outcomes := arrive(t, m, []msg{dep8, on3, off4, on6})
	if where := whereIs(m, "t1"); where != "basic@8.0" || strings.Contains(outcomes, "refused") {
		t.Errorf("t1 ends %s, want basic@8.0; outcomes: %s", where, outcomes)
	}
}
