package gitops

import (
	"fmt"
	"path"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/message"
)

// TestReviewOffboardingBesideAMovedLeftoverKeepsTheTreeBuilding: a
// leftover tenant file nobody lists (Flux does not apply it) sits in a
// tier's folder; the migration moves it, unlisted, into the shard folder
// of a listed tenant. Offboarding that tenant empties the shard's list but
// keeps the folder (something else is in it) and the tier's entry for it:
// the shard kustomization is left as "resources:" with no items, which
// kustomize refuses ("kustomization.yaml is empty"), so the whole tenants
// Kustomization stops building and the offboarding can never be pushed.
// It should leave a tree kustomize builds (an explicit empty list, or the
// folder out of the tier's list).
func TestReviewOffboardingBesideAMovedLeftoverKeepsTheTreeBuilding(t *testing.T) {
	m := seed(t)
	mustPlan(t, m, message.Onboarding, `{"tenant_id":"a1","tenant_tier":"premium","release_version":"1.0"}`)
	sharded := layout
	sharded.Shards = 4
	stray := ""
	for i := 0; stray == ""; i++ {
		if id := fmt.Sprintf("leftover%d", i); sharded.Shard(id) == sharded.Shard("a1") {
			stray = id
		}
	}
	m[layout.TierDir("premium")+"/"+stray+".yaml"] = &fstest.MapFile{Data: []byte(sedRender(t, "premium", stray, "1.0"))}
	built(t, m) // the flat tree builds

	migrate(t, m, 4)
	built(t, m) // so does the migrated one
	if _, ok := m[sharded.TenantFile("premium", stray)]; !ok {
		t.Fatalf("setup: %s was not moved beside a1", stray)
	}

	c, err := plan(t, m, message.Offboarding, `{"tenant_id":"a1","tenant_tier":"premium"}`)
	if err != nil {
		t.Fatalf("offboarding a1: %v", err)
	}
	apply(m, c)
	k := path.Join(sharded.TenantDir("premium", "a1"), "kustomization.yaml")
	t.Logf("changed %v; %s is now:\n%s", keys(c.Files), k, at(m, k))
	built(t, m) // fails: kustomization.yaml is empty
}

// TestReviewShardKustomizationUnderAnotherName: kustomize and Flux read a
// folder's kustomization under any of its names (kustomization.yml,
// Kustomization), and the intent check follows them too. A shard folder
// whose kustomization someone saved as kustomization.yml is taken by the
// planner for a folder "not made yet": an onboarding to it writes a second
// kustomization (kustomization.yaml) beside the first, and kustomize
// refuses the folder ("Found multiple kustomization files"), so the
// tenants tree no longer builds. The onboarding should list the tenant in
// the folder's kustomization (or be refused naming it), leaving a tree
// kustomize builds.
func TestReviewShardKustomizationUnderAnotherName(t *testing.T) {
	m := seed(t)
	migrate(t, m, 4)
	l, _ := layout.Of(FS{m})
	mustPlan(t, m, message.Onboarding, `{"tenant_id":"a1","tenant_tier":"premium","release_version":"1.0"}`)
	dir := l.TenantDir("premium", "a1")
	m[dir+"/kustomization.yml"] = m[dir+"/kustomization.yaml"]
	delete(m, dir+"/kustomization.yaml")
	built(t, m) // kustomize reads it

	other := ""
	for i := 0; other == ""; i++ {
		if id := fmt.Sprintf("b%d", i); l.Shard(id) == l.Shard("a1") {
			other = id
		}
	}
	c, err := plan(t, m, message.Onboarding, `{"tenant_id":"`+other+`","tenant_tier":"premium","release_version":"1.0"}`)
	if err != nil {
		t.Logf("refused: %v", err)
		return
	}
	apply(m, c)
	t.Logf("onboarding %s changed %v", other, keys(c.Files))
	built(t, m)
}
