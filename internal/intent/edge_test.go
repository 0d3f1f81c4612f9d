package intent

import (
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/templates"
)

func crlf(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n")
}

func buildIDs(t *testing.T, m fstest.MapFS) []string {
	t.Helper()
	objs, err := buildTraced(mem{m}, layout.TenantsDir())
	if err != nil {
		t.Fatal(err)
	}
	return slices.Collect(maps.Keys(objs))
}

// TestCRLFFilesAreComparedWhole: a file with CRLF line ends (a template
// saved on Windows renders every tenant that way) is read whole, as
// kustomize reads it, by the listed-files path and the kustomize path
// alike: a change beyond the release in its second document is named.
func TestCRLFFilesAreComparedWhole(t *testing.T) {
	p1 := path.Join(templates.Root, "tenants/premium/p1.yaml")
	for _, tc := range []struct {
		name string
		crlf bool
	}{{"LF", false}, {"CRLF", true}} {
		t.Run(tc.name, func(t *testing.T) {
			before := onboarded(t, "b1", "p1", "p2")
			if tc.crlf {
				before[p1].Data = []byte(crlf(string(before[p1].Data)))
			}
			req, after, changed := planned(t, before, message.Deployment, `{"tenant_tier":"premium","release_version":"2.0"}`)
			if !strings.Contains(string(after[p1].Data), `version: "2.0.x"`) {
				t.Fatalf("the plan did not deploy p1:\n%s", after[p1].Data)
			}
			after[p1].Data = []byte(strings.Replace(string(after[p1].Data), "interval: 1m0s", "interval: 9m0s", 1))
			err := NewChecker(layout).Check(mem{before}, mem{after}, req, changed)
			if _, ok := As(err); !ok || !strings.Contains(err.Error(), "spec.interval") {
				t.Errorf("Check = %v, want the HelmRelease p1-premium's interval change named", err)
			}
			// The same trees with a transformer go through kustomize.
			k := path.Join(templates.Root, "tenants/premium/kustomization.yaml")
			bb, ab := clone(before), clone(after)
			bb[k].Data = append(bb[k].Data, "\ncommonAnnotations:\n  team: saas\n"...)
			ab[k].Data = append(ab[k].Data, "\ncommonAnnotations:\n  team: saas\n"...)
			if _, ok := As(NewChecker(layout).Check(mem{bb}, mem{ab}, req, changed)); !ok {
				t.Errorf("the kustomize path does not see it either")
			}
		})
	}
}

// TestCRLFTenantFileShowsItsHelmRelease: in a CRLF tenant file the
// HelmRelease (second document) is seen: a deployment that also switches a
// producer off, and an onboarding whose commit deletes it, are named.
func TestCRLFTenantFileShowsItsHelmRelease(t *testing.T) {
	before := onboarded(t, "p1", "p2")
	f := path.Join(templates.Root, "tenants/premium/p1.yaml")
	before[f].Data = []byte(crlf(string(before[f].Data)))
	req, after, changed := planned(t, before, message.Deployment, `{"tenant_tier":"premium","release_version":"2.0","tenant_id":"p1"}`)
	if !slices.Contains(changed, f) {
		t.Fatalf("plan did not change %s: %v", f, changed)
	}
	after[f].Data = []byte(strings.Replace(string(after[f].Data), "enabled: true", "enabled: false", 1))
	if b, a := buildIDs(t, before), buildIDs(t, after); !slices.Contains(b, "HelmRelease flux-system/p1-premium") || !slices.Contains(a, "HelmRelease flux-system/p1-premium") {
		t.Fatalf("kustomize should build the HelmRelease on both sides: %v / %v", b, a)
	}
	if err := NewChecker(layout).Check(mem{before}, mem{after}, req, changed); err == nil {
		t.Errorf("Check passed a deployment that also sets apps.producer.enabled=false in a CRLF tenant file")
	}
	req2, after2, changed2 := planned(t, before, message.Onboarding, `{"tenant_id":"p3","tenant_tier":"premium","release_version":"0.0"}`)
	doc := string(before[f].Data)
	after2[f] = &fstest.MapFile{Data: []byte(doc[:strings.Index(doc, "---\r\n")])}
	changed2 = append(changed2, f)
	if err := NewChecker(layout).Check(mem{before}, mem{after2}, req2, changed2); err == nil {
		t.Errorf("Check passed an onboarding of p3 whose commit also deletes HelmRelease p1-premium (CRLF file)")
	}
}

// TestAnAliasedChartSpecIsNotDeployed: a hand-edited CRLF tenant file
// shares its chart spec through an anchor; setting the release would
// change the alias too, so the plan refuses it as a fault of the
// repository naming the file, and a change that does it anyway is named
// by the check.
func TestAnAliasedChartSpecIsNotDeployed(t *testing.T) {
	before := onboarded(t, "p1", "p2")
	f := path.Join(templates.Root, "tenants/premium/p1.yaml")
	s := string(before[f].Data)
	s = strings.Replace(s, "  chart:\n    spec:\n", "  chart:\n    spec: &chartspec\n", 1)
	s = strings.Replace(s, "  values:\n", "  values:\n    installedChart: *chartspec\n", 1)
	before[f].Data = []byte(crlf(s))
	req, err := message.Decode(message.Deployment, []byte(`{"tenant_tier":"premium","release_version":"2.0"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := layout.Plan(gitops.FS{FS: before}, req); !gitops.IsBroken(err) || !strings.Contains(err.Error(), "p1.yaml") {
		t.Errorf("plan = %v, want a fault of the repository naming p1.yaml", err)
	}
	after := clone(before)
	after[f].Data = []byte(strings.Replace(string(after[f].Data), "version: \"0.0.x\"", "version: \"2.0.x\"", 1))
	if err := NewChecker(layout).Check(mem{before}, mem{after}, req, []string{f}); err == nil {
		t.Errorf("Check passed a deployment that also changes spec.values.installedChart of HelmRelease p1-premium")
	}
}

// TestAListKustomizeDoesNotReadIsNotEdited: the tier kustomization's list
// stands in a second YAML document, which kustomize never reads. The plan
// refuses to edit it (a fault of the repository, naming the file), and a
// change that appends to it anyway fails the check: Flux would apply
// nothing of the tenant.
func TestAListKustomizeDoesNotReadIsNotEdited(t *testing.T) {
	before := onboarded(t, "b1", "b2")
	k := path.Join(templates.Root, "tenants/basic/kustomization.yaml")
	before[k].Data = append([]byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n---\n"), before[k].Data...)
	req, err := message.Decode(message.Onboarding, []byte(`{"tenant_id":"b3","tenant_tier":"basic","release_version":"0.0"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := layout.Plan(gitops.FS{FS: before}, req); !gitops.IsBroken(err) || !strings.Contains(err.Error(), "kustomization.yaml") {
		t.Errorf("plan = %v, want a fault of the repository naming the kustomization", err)
	}
	_, rendered, _ := planned(t, seed(t), message.Onboarding, `{"tenant_id":"b3","tenant_tier":"basic","release_version":"0.0"}`)
	after := clone(before)
	b3 := path.Join(templates.Root, "tenants/basic/b3.yaml")
	after[b3] = rendered[b3]
	after[k].Data = append(slices.Clone(before[k].Data), "  - b3.yaml\n"...)
	// kustomize refuses such a file: validation refuses the change, and
	// the check, with nothing built to compare, leaves it to validation.
	if _, err := buildTraced(mem{after}, layout.TenantsDir()); err == nil {
		if err := NewChecker(layout).Check(mem{before}, mem{after}, req, []string{b3, k}); err == nil {
			t.Errorf("Check passed an onboarding whose tenant kustomize never builds (the list is in document 2)")
		}
	}
}

// TestOnboardingAddsOnlyTheTenantsObjects: a file left in the tier's
// folder, unlisted, declares the shared pool's HelmRelease. The worker's
// plan renders the tenant's file again, and a change that lists the file
// as it is fails the check: Flux's tenants Kustomization would take over
// HelmRelease flux-system/pool-1 (and prune it at the offboarding).
func TestOnboardingAddsOnlyTheTenantsObjects(t *testing.T) {
	before := onboarded(t, "b1", "b2")
	odd := "apiVersion: helm.toolkit.fluxcd.io/v2beta1\nkind: HelmRelease\nmetadata:\n  name: pool-1\n  namespace: flux-system\nspec:\n  releaseName: pool-1\n"
	put(before, "tenants/basic/b3.yaml", odd)
	req, after, changed := planned(t, before, message.Onboarding, `{"tenant_id":"b3","tenant_tier":"basic","release_version":"0.0"}`)
	b3 := path.Join(templates.Root, "tenants/basic/b3.yaml")
	if string(after[b3].Data) == odd {
		t.Fatalf("the plan listed the file as it is")
	}
	if err := NewChecker(layout).Check(mem{before}, mem{after}, req, changed); err != nil {
		t.Errorf("the worker's plan: %v", err)
	}
	after[b3].Data = []byte(odd)
	err := NewChecker(layout).Check(mem{before}, mem{after}, req, changed)
	if _, ok := As(err); !ok || !strings.Contains(err.Error(), "add HelmRelease flux-system/pool-1") {
		t.Errorf("Check = %v, want the pool's HelmRelease named", err)
	}
}

// TestRootKustomizationUnderAnyName: kustomize and Flux accept
// tenants/kustomization.yml as the root. The check reads it, and names an
// onboarding whose commit also drops another tenant's entry.
func TestRootKustomizationUnderAnyName(t *testing.T) {
	before := onboarded(t, "b1", "b2")
	root := path.Join(templates.Root, "tenants/kustomization.yaml")
	before[path.Join(templates.Root, "tenants/kustomization.yml")] = before[root]
	delete(before, root)
	req, after, changed := planned(t, before, message.Onboarding, `{"tenant_id":"b3","tenant_tier":"basic","release_version":"0.0"}`)
	k := path.Join(templates.Root, "tenants/basic/kustomization.yaml")
	after[k].Data = []byte(strings.Replace(string(after[k].Data), "  - b1.yaml\n", "", 1))
	err := NewChecker(layout).Check(mem{before}, mem{after}, req, changed)
	if _, ok := As(err); !ok || !strings.Contains(err.Error(), "remove HelmRelease flux-system/b1-basic") {
		t.Fatalf("Check = %v, want b1's removal named as unintended", err)
	}
}

// TestDeriveFollowsTheListsAfter: when a change drops a folder from its
// parent and edits the folder's own list, the tree derived from the
// changed paths is the one resolved in full: nothing of the folder is
// applied, so the onboarding into it is named as not carried out.
func TestDeriveFollowsTheListsAfter(t *testing.T) {
	before := onboarded(t, "b1")
	pk := path.Join(templates.Root, "tenants/premium/kustomization.yaml")
	before[pk].Data = []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: []\n")
	req, after, changed := planned(t, before, message.Onboarding, `{"tenant_id":"p3","tenant_tier":"premium","release_version":"0.0"}`)
	root := path.Join(templates.Root, "tenants/kustomization.yaml")
	after[root].Data = []byte(strings.Replace(string(after[root].Data), "\n  - premium", "", 1))
	changed = append(changed, root)
	slices.Sort(changed)
	full := NewChecker(layout).Check(mem{before}, listed{mem{after}}, req, changed)
	if _, ok := As(full); !ok {
		t.Fatalf("resolved in full: %v, want an intent error (p3 is not applied)", full)
	}
	fast := NewChecker(layout).Check(mem{before}, mem{after}, req, changed)
	if fast == nil || fast.Error() != full.Error() {
		t.Errorf("derived from the changed paths: %v\nresolved in full:             %v", fast, full)
	}
}

// TestAMoveIsCheckedAsBothMessages: an offboarding that completes a held
// onboarding to another tier removes the tenant's objects from one tier
// and adds them to the other (its Namespace changes file). Checked with
// both requests it passes; with the offboarding's alone it is named.
func TestAMoveIsCheckedAsBothMessages(t *testing.T) {
	before := onboarded(t, "b1", "p1", "p2")
	offReq, after, changed := planned(t, before, message.Offboarding, `{"tenant_id":"p1","tenant_tier":"premium"}`)
	onReq, moved, more := planned(t, after, message.Onboarding, `{"tenant_id":"p1","tenant_tier":"basic","release_version":"0.0"}`)
	changed = append(changed, more...)
	if err := NewChecker(layout).Check(mem{before}, mem{moved}, offReq, changed, onReq); err != nil {
		t.Errorf("the move checked as both messages: %v", err)
	}
	if err := NewChecker(layout).Check(mem{before}, mem{moved}, offReq, changed); err == nil {
		t.Errorf("the move checked as the offboarding alone passed")
	}
}
