package intent

import (
	"path"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/templates"
)

// TestListsStandForTheirItems: kustomize expands a
// document of kind List into its items, but the listed-files path of the
// check (and the planner's collision check) read such a document as one
// object, "List <name>". A premium template written as a List whose items
// are the tenant's Namespace and HelmRelease plus the shared pool's
// HelmRelease flux-system/pool-1: the onboarding of p3 is planned (no
// name_collision) and passes the intent check (the template "renders"
// List p3-objects, and that is what was added), while what Flux builds
// gains HelmRelease flux-system/pool-1 from p3.yaml: the tenants
// Kustomization takes over the pool (and prunes it at p3's offboarding).
//
// Expected: the plan is refused, or the check names HelmRelease
// flux-system/pool-1 as an unintended addition (objects as kustomize
// builds them, List items included).
func TestListsStandForTheirItems(t *testing.T) {
	before := onboarded(t, "b1", "p2")
	tp := path.Join(templates.Root, "tier-templates/premium_tenant_template.yaml")
	ns, hr, _ := strings.Cut(string(before[tp].Data), "---\n")
	pool := "apiVersion: helm.toolkit.fluxcd.io/v2beta1\nkind: HelmRelease\nmetadata:\n  name: pool-1\n  namespace: flux-system\nspec:\n  releaseName: pool-1\n"
	var items strings.Builder
	for _, doc := range []string{ns, hr, pool} {
		for i, l := range strings.Split(strings.TrimRight(doc, "\n"), "\n") {
			if i == 0 {
				items.WriteString("  - " + l + "\n")
			} else {
				items.WriteString("    " + l + "\n")
			}
		}
	}
	before[tp].Data = []byte("apiVersion: v1\nkind: List\nmetadata:\n  name: {TENANT_ID}-objects\nitems:\n" + items.String())

	req, err := message.Decode(message.Onboarding, []byte(`{"tenant_id":"p3","tenant_tier":"premium","release_version":"0.0"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := layout.Plan(gitops.FS{FS: before}, req); err != nil {
		return // refused: fine
	}
	_, after, changed := planned(t, before, message.Onboarding, `{"tenant_id":"p3","tenant_tier":"premium","release_version":"0.0"}`)
	built, err := buildTraced(mem{after}, layout.TenantsDir())
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	if o, ok := built["HelmRelease flux-system/pool-1"]; !ok {
		t.Fatalf("the premise: kustomize should build the pool's HelmRelease from p3.yaml")
	} else {
		t.Logf("kustomize builds HelmRelease flux-system/pool-1 from %s", o.file)
	}
	err = NewChecker(layout).Check(mem{before}, mem{after}, req, changed)
	if e, ok := As(err); !ok || !strings.Contains(e.Error(), "HelmRelease flux-system/pool-1") {
		t.Errorf("Check = %v, want HelmRelease flux-system/pool-1 named as an unintended addition", err)
	}
}
