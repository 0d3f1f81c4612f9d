package pipeline

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/templates"
)

// TestBatchThatBuildsOnlyApartIsNotPushed: the premium tier's list holds a
// replacement whose source is the ConfigMap named "shared", which must be
// one, and the premium template renders one per tenant (in the tenant's
// namespace): a tenant alone builds, two do not. A batch of two such onboardings and an
// unrelated basic one, on a tier large enough for the pruned check, builds
// job by job and not together. Nothing is pushed, no message is sent to
// the dead-letter queue (the basic one, last, used to be, by the verdict
// of the whole batch), and the branch is reported broken.
func TestBatchThatBuildsOnlyApartIsNotPushed(t *testing.T) {
	e := setup(t)
	var seeds []Job
	for i := range 70 {
		seeds = append(seeds, Job{Request: onboard(t, fmt.Sprintf("seed-%d", i), "premium")})
	}
	for i, r := range e.p.Apply(context.Background(), seeds) {
		if r.Err != nil {
			t.Fatalf("seed %d: %v", i, r.Err)
		}
	}
	tmpl := templates.Root + "/tier-templates/premium_tenant_template.yaml"
	b, _ := fs.ReadFile(templates.FS, tmpl)
	shared := string(b) + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: {TENANT_ID}\n"
	if err := e.srv.WriteFile("gitops.git", "main", tmpl, shared, "a ConfigMap per tenant"); err != nil {
		t.Fatal(err)
	}
	kpath := templates.Root + "/tenants/premium/kustomization.yaml"
	list := show(t, e, "tenants/premium/kustomization.yaml")
	patched := strings.TrimRight(list, "\n") + "\nreplacements:\n  - source:\n      kind: ConfigMap\n      name: shared\n      fieldPath: metadata.name\n" +
		"    targets:\n      - select:\n          kind: ConfigMap\n          name: shared\n        fieldPaths:\n          - data.copy\n        options:\n          create: true\n"
	if err := e.srv.WriteFile("gitops.git", "main", kpath, patched, "one namespace for the shared ConfigMaps"); err != nil {
		t.Fatal(err)
	}
	head := strings.TrimSpace(mustOut(t, e, "rev-parse", "main"))

	res := e.p.Apply(context.Background(), []Job{
		{Request: onboard(t, "x1", "premium")},
		{Request: onboard(t, "x2", "premium")},
		{Request: onboard(t, "b1", "basic")},
	})
	for i, r := range res {
		if _, rejected := reject.As(r.Err); rejected || r.Applied {
			t.Errorf("job %d: applied %v, %v; want neither applied nor rejected", i, r.Applied, r.Err)
		}
		if !gitops.IsBroken(r.Err) {
			t.Errorf("job %d: %v, want the branch reported broken", i, r.Err)
		}
	}
	if now := strings.TrimSpace(mustOut(t, e, "rev-parse", "main")); now != head {
		t.Fatalf("main moved from %s to %s", head, now)
	}
}
