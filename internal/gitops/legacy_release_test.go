package gitops

import (
	"fmt"
	"testing"
)

// TestHeldLegacyReleaseDoesNotMakeOwnTierDeploymentStale.
//
// Defect (26fa11a, freshRelease/olderRelease): the legacy per-tenant record
// release/<id> now makes a message stale even when the tenant has a
// per-tier record of its own (`p.older(ledger.Release(id)) || ...`).
// Versions before per-tier records (0fb9113) wrote release/<id> for a
// deployment HELD for a tier the tenant was not in (value "premium:2.0"),
// the very record TestHeldDeploymentToAnotherTierLeavesTheTenantsOwn says
// must not touch the tenant's release in another tier. After migration
// that record is never rewritten nor pruned (no commit dirties its group),
// so every deployment of the tenant's real tier sent before it is judged
// stale forever, although the tenant has its own, older, release/basic/t1.
// Before 26fa11a the legacy record counted only while no per-tier record
// existed.
//
// Scenario: 0fb9113 held "deploy t1 premium 2.0 @5" (t1 nowhere yet); the
// repository is migrated; then "on t1 basic @1" and "deploy basic 3.0 @3"
// (or the per-tenant deployment of basic @3) arrive. Send order: on basic@1,
// deploy basic 3.0@3, deploy t1 premium@5 (tier_conflict).
//
// Expected: t1 ends basic@3.0.
func TestHeldLegacyReleaseDoesNotMakeOwnTierDeploymentStale(t *testing.T) {
	for _, tc := range []struct {
		name string
		dep  msg
	}{
		{"tier deployment", depTier("basic", "3.0", 3)},
		{"per-tenant deployment", depTenant("t1", "basic", "3.0", 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t)
			migrated(t, m, fmt.Sprintf("release/t1 %d premium:2.0\n", ms(5)), "")
			outcomes := arrive(t, m, []msg{onTo("t1", "basic", 1), tc.dep})
			if where := whereIs(m, "t1"); where != "basic@3.0" {
				t.Errorf("t1 ends %s, want basic@3.0; outcomes: %s", where, outcomes)
			}
		})
	}
}
