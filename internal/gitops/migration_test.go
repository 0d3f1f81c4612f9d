package gitops

import (
	"io/fs"
	"os"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/message"
)

// fromFixture is the reference tree with the files of testdata/name laid
// over it.
func fromFixture(t *testing.T, name string) fstest.MapFS {
	t.Helper()
	m := seed(t)
	root := os.DirFS("testdata/" + name)
	err := fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(root, p)
		m[p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLedgerOfTheVersionBeforeTheFold: testdata/ledger-2026-12-07 is the
// tree and ledger that the version before the tenants' histories (main at
// 6a31272) left after these messages (sent at second n):
//
//	a1-on          onboarding a1 premium 0.0 @1     applied
//	a2-on          onboarding a2 basic 0.0 @2       applied
//	dep-premium-2  deployment premium 2.0 @3        applied (a1 at 2.0)
//	a2-move-on     onboarding a2 premium 1.0 @6     held (a2 is in basic)
//	a3-dep         deployment a3 advanced 4.0 @8    held (a3 not there)
//	a4-on, a4-off  a4 in advanced @10, out @12      applied
//	dep-basic-5    deployment basic 5.0 @14         applied (a2, pool-1 at 5.0)
//
// Every kind of record it wrote (a tenant's existence, its release per
// tier, a held onboarding, a held deployment, a tier's and an
// environment's last deployment, message ids) must still decide what it
// decided: the messages below, delivered to this version, end every
// tenant where the whole history in send order leaves it.
func TestLedgerOfTheVersionBeforeTheFold(t *testing.T) {
	m := fromFixture(t, "ledger-2026-12-07")
	for _, tc := range []struct {
		x       msg
		outcome string
	}{
		// Its id is in the ledger: a duplicate.
		{msg{"a1-on", message.Onboarding, `{"tenant_id":"a1","tenant_tier":"premium","release_version":"0.0"}`, 1}, "duplicate"},
		// Sent before a4's offboarding, which undoes it.
		{msg{"a4-late", message.Onboarding, `{"tenant_id":"a4","tenant_tier":"advanced","release_version":"3.0"}`, 11}, "stale"},
		// The offboarding the held move waits for: a2 goes to premium at
		// the held onboarding's 1.0 (basic's deployment came after it left).
		{msg{"a2-off", message.Offboarding, `{"tenant_id":"a2","tenant_tier":"basic"}`, 4}, "applied"},
		// The onboarding the held deployment waits for: a3 at 4.0.
		{msg{"a3-on", message.Onboarding, `{"tenant_id":"a3","tenant_tier":"advanced","release_version":"0.0"}`, 7}, "applied"},
		// Deployments sent before the last ones of their tiers: a1 stays
		// at 2.0, pool-1 at 5.0.
		{msg{"dep-premium-1", message.Deployment, `{"tenant_tier":"premium","release_version":"1.0"}`, 2}, "stale"},
		{msg{"dep-basic-4", message.Deployment, `{"tenant_tier":"basic","release_version":"4.0"}`, 13}, "stale"},
		// A new tenant onboarded before basic's deployment takes its release.
		{msg{"a5-on", message.Onboarding, `{"tenant_id":"a5","tenant_tier":"basic","release_version":"0.0"}`, 9}, "applied"},
	} {
		c := deliver(t, m, tc.x)
		if got := outcome(c); got != tc.outcome {
			t.Errorf("%s: %s, want %s (%s)", tc.x.id, got, tc.outcome, c.Message)
		}
	}
	for id, want := range map[string]string{"a1": "premium@2.0", "a2": "premium@1.0", "a3": "advanced@4.0", "a4": "nowhere", "a5": "basic@5.0"} {
		if got := whereIs(m, id); got != want {
			t.Errorf("%s is %s, want %s", id, got, want)
		}
	}
	if _, pool := treeOf(m, nil); pool != "5.0" {
		t.Errorf("pool-1 is at %s, want 5.0", pool)
	}
}
