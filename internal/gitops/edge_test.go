package gitops

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/kustomization"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/templates"
)

// try is deliver without the t.Fatal: the plan of x on m, applied to m
// when it succeeds.
func try(t *testing.T, m fstest.MapFS, x msg) (Change, error) {
	t.Helper()
	req, err := message.Decode(x.kind, []byte(x.body))
	if err != nil {
		t.Fatal(err)
	}
	c, err := layout.PlanAt(FS{m}, req, Stamp{MessageID: x.id, Sent: t0.Add(time.Duration(x.sent) * time.Second),
		Now: t0.Add(time.Hour), Retention: 4 * 24 * time.Hour, Ledger: records(m)})
	if err == nil {
		apply(m, c)
	}
	return c, err
}

// TestDuplicateBeforeTierCheck: the duplicate check comes before the tier
// check: a redelivery of an applied offboarding, after its tier's template
// was removed, is a duplicate, not unknown_tier.
func TestDuplicateBeforeTierCheck(t *testing.T) {
	m := seed(t)
	try(t, m, msg{"on-1", message.Onboarding, `{"tenant_id":"t1","tenant_tier":"premium","release_version":"0.0"}`, 1})
	off := msg{"off-1", message.Offboarding, `{"tenant_id":"t1","tenant_tier":"premium"}`, 2}
	if _, err := try(t, m, off); err != nil {
		t.Fatal(err)
	}
	delete(m, templates.Root+"/tier-templates/premium_tenant_template.yaml")
	c, err := try(t, m, off)
	if err != nil || !c.Duplicate {
		t.Errorf("redelivery of an applied offboarding: %+v %v, want a duplicate", c, err)
	}
}

// TestPoolNameWithAUnicodeBlank: a pooled environment added by hand as
// "pool<NBSP>two.yaml" is deployed, its ledger record one field, and the
// ledger still reads for the next message.
func TestPoolNameWithAUnicodeBlank(t *testing.T) {
	m := seed(t)
	name := "pool\u00a0two"
	pool := file(m, "pooled-envs/pool-1.yaml")
	m[templates.Root+"/pooled-envs/"+name+".yaml"] = &fstest.MapFile{Data: []byte(strings.ReplaceAll(pool, "pool-1", name))}
	pk := templates.Root + "/pooled-envs/kustomization.yaml"
	m[pk] = &fstest.MapFile{Data: []byte(file(m, "pooled-envs/kustomization.yaml") + "\n  - \"" + name + ".yaml\"\n")}
	if _, err := try(t, m, msg{"dep", message.Deployment, `{"tenant_tier":"basic","release_version":"2.0"}`, 1}); err != nil {
		t.Fatalf("deployment: %v", err)
	}
	if _, err := try(t, m, msg{"on", message.Onboarding, `{"tenant_id":"b1","tenant_tier":"basic","release_version":"0.0"}`, 2}); err != nil {
		t.Errorf("the next message: %v (broken: %v)", err, IsBroken(err))
	}
}

// TestTierDeploymentLeavesOtherFilesAlone: a hand-added, listed file of a
// tier's folder that declares none of the template's objects (a ConfigMap
// the tier shares) is not a tenant's: a deployment of the tier leaves it
// as it is and deploys the tenants.
func TestTierDeploymentLeavesOtherFilesAlone(t *testing.T) {
	m := seed(t)
	try(t, m, msg{"on", message.Onboarding, `{"tenant_id":"b1","tenant_tier":"basic","release_version":"0.0"}`, 1})
	m[templates.Root+"/tenants/basic/shared-settings.yaml"] = &fstest.MapFile{Data: []byte(
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared-settings\n  namespace: pool-1\ndata:\n  region: eu\n")}
	k := templates.Root + "/tenants/basic/kustomization.yaml"
	m[k] = &fstest.MapFile{Data: []byte(file(m, "tenants/basic/kustomization.yaml") + "\n  - shared-settings.yaml\n")}
	before := file(m, "tenants/basic/shared-settings.yaml")
	if _, err := try(t, m, msg{"dep", message.Deployment, `{"tenant_tier":"basic","release_version":"2.0"}`, 2}); err != nil {
		t.Fatalf("deployment of basic: %v (broken: %v)", err, IsBroken(err))
	}
	if !strings.Contains(file(m, "tenants/basic/b1.yaml"), `version: "2.0.x"`) || file(m, "tenants/basic/shared-settings.yaml") != before {
		t.Error("want b1 at 2.0 and shared-settings.yaml as it was")
	}
}

// TestFlowListTierIsEditedOrNamed: a tier kustomization whose list is a
// flow sequence over several lines, entries at column 0 (valid YAML, read
// by kustomize), is edited, or refused as a fault of the repository naming
// the file; never an error that is retried forever.
func TestFlowListTierIsEditedOrNamed(t *testing.T) {
	m := seed(t)
	k := templates.Root + "/tenants/basic/kustomization.yaml"
	m[k] = &fstest.MapFile{Data: []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [\n\"dummy-configmap.yaml\"\n]\n")}
	if got, err := kustomization.Listed(m[k].Data); err != nil || len(got) != 1 {
		t.Fatalf("kustomize reads %v %v", got, err)
	}
	_, err := try(t, m, msg{"on", message.Onboarding, `{"tenant_id":"b1","tenant_tier":"basic","release_version":"0.0"}`, 1})
	if err != nil && !IsBroken(err) {
		t.Errorf("onboarding: %v\nwant it carried out, or a fault of the repository naming the file", err)
	}
}

// TestOutOfOrderAcrossQueues: onboardings, offboardings and deployments
// come on three queues, so a message sent later can be handled first. A
// message that meets a state only an earlier-sent message still on its way
// explains (an onboarding to another tier before the offboarding of the
// move, a deployment to a tenant before its onboarding) is held in the
// ledger, and carried out when that message arrives: the tree ends as the
// messages in send order leave it.
func TestOutOfOrderAcrossQueues(t *testing.T) {
	on := func(tier string, sent int) msg {
		return msg{fmt.Sprintf("on-%s-%d", tier, sent), message.Onboarding, `{"tenant_id":"t1","tenant_tier":"` + tier + `","release_version":"0.0"}`, sent}
	}
	off := func(tier string, sent int) msg {
		return msg{fmt.Sprintf("off-%s-%d", tier, sent), message.Offboarding, `{"tenant_id":"t1","tenant_tier":"` + tier + `"}`, sent}
	}
	dep := func(tier, v string, sent int) msg {
		return msg{fmt.Sprintf("dep-%s-%d", tier, sent), message.Deployment, `{"tenant_tier":"` + tier + `","release_version":"` + v + `","tenant_id":"t1"}`, sent}
	}
	for _, tc := range []struct {
		name     string
		arrivals []msg
		outcomes string
		end      string // where t1 is: "tier@version" or "nowhere"
	}{
		{"a move whose onboarding arrives first", []msg{on("premium", 1), on("basic", 4), off("premium", 3)},
			"applied held applied", "basic@0.0"},
		{"an onboarding to another tier sent before the offboarding is dropped", []msg{on("premium", 1), on("basic", 3), off("premium", 4)},
			"applied held applied", "nowhere"},
		{"a deployment before its onboarding", []msg{dep("premium", "2.0", 2), on("premium", 1)},
			"held applied", "premium@2.0"},
		{"a deployment to one tier is not given to an onboarding to another", []msg{dep("premium", "2.0", 2), on("basic", 1)},
			"held applied", "basic@0.0"},
		{"a deployment sent before a repeated onboarding still applies", []msg{on("premium", 1), on("premium", 3), dep("premium", "2.0", 2)},
			"applied recorded applied", "premium@2.0"},
		{"a move and a deployment to the new tier, all before the offboarding", []msg{on("premium", 1), on("basic", 4), dep("basic", "5.0", 5), off("premium", 3)},
			"applied held held applied", "basic@5.0"},
		{"a deployment sent before the offboarding is stale, not held", []msg{on("premium", 1), off("premium", 3), dep("premium", "2.0", 2)},
			"applied applied stale", "nowhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t)
			var got []string
			for _, x := range tc.arrivals {
				c, err := try(t, m, x)
				if err != nil {
					t.Fatalf("%s: %v", x.id, err)
				}
				got = append(got, outcome(c))
			}
			if strings.Join(got, " ") != tc.outcomes {
				t.Errorf("outcomes %q, want %q", strings.Join(got, " "), tc.outcomes)
			}
			if where := whereIs(m, "t1"); where != tc.end {
				t.Errorf("t1 ends %s, want %s", where, tc.end)
			}
		})
	}
}

// whereIs says which tier holds tenant id (file and entry) and at which
// release, or "nowhere"; "inconsistent" when a file and entry disagree.
func whereIs(m fstest.MapFS, id string) string {
	var at []string
	for _, tier := range []string{"basic", "advanced", "premium"} {
		f := file(m, "tenants/"+tier+"/"+id+".yaml")
		listed := strings.Contains(file(m, "tenants/"+tier+"/kustomization.yaml"), id+".yaml")
		switch {
		case f == "<absent>" && !listed:
			continue
		case f == "<absent>" || !listed:
			return "inconsistent in " + tier
		}
		_, v, _ := strings.Cut(f, `version: "`)
		v, _, _ = strings.Cut(v, ".x")
		at = append(at, tier+"@"+v)
	}
	if len(at) == 0 {
		return "nowhere"
	}
	return strings.Join(at, ",")
}

// TestATenantInTwoTiersIsNotTouched: a tenant listed in two tiers at once
// (an edit by hand) is a clear outcome, not a pause: a message about it is
// refused (tier_conflict) naming both tiers and the fix, nothing changes;
// a deployment of one of its tiers leaves it alone and says so; every
// other tenant goes on.
func TestATenantInTwoTiersIsNotTouched(t *testing.T) {
	m := seed(t)
	deliver(t, m, onTo("t1", "premium", 1))
	deliver(t, m, onTo("t2", "basic", 2))
	// By hand: t1 also in basic.
	m[templates.Root+"/tenants/basic/t1.yaml"] = &fstest.MapFile{Data: []byte(sedRender(t, "basic", "t1", "0.0"))}
	k, _, err := kustomization.Add(m[templates.Root+"/tenants/basic/kustomization.yaml"].Data, "t1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m[templates.Root+"/tenants/basic/kustomization.yaml"] = &fstest.MapFile{Data: k}
	for _, x := range []msg{offFrom("t1", "premium", 3), depTenant("t1", "basic", "2.0", 4), onTo("t1", "advanced", 5)} {
		_, err := try(t, m, x)
		r, ok := reject.As(err)
		if !ok || r.Reason != reject.TierConflict || !strings.Contains(err.Error(), "tiers basic and premium") ||
			!strings.Contains(err.Error(), "by hand") {
			t.Errorf("%s: %v, want tier_conflict naming both tiers", x.id, err)
		}
	}
	c := deliver(t, m, depTier("basic", "3.0", 6))
	if _, ok := c.Files[templates.Root+"/tenants/basic/t1.yaml"]; ok || !strings.Contains(c.Message, "Tenant t1 is in tiers basic and premium") {
		t.Errorf("the tier deployment touched t1 or did not say why not: %v\n%s", c.Paths(), c.Message)
	}
	if where := whereIs(m, "t2"); where != "basic@3.0" {
		t.Errorf("t2 is %s, want basic@3.0: the others go on", where)
	}
	if where := whereIs(m, "t1"); where != "basic@0.0,premium@0.0" {
		t.Errorf("t1 is %s, want as it was", where)
	}
}
