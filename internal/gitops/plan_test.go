package gitops

import (
	"github.com/tenant-worker/tenant-worker/internal/ledger"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/templates"
)

var layout = Layout{Root: templates.Root}

// seed copies the embedded reference tree into a map file system.
func seed(t *testing.T) fstest.MapFS {
	t.Helper()
	m, err := templates.MapFS()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ledgerDir is where the tests keep the ledger branch's tree: in the one
// folder of the branch that the collision check passes over (where the
// ledger was kept before it had a branch).
var ledgerDir = path.Join(templates.Root, ledger.LegacyDir)

func apply(m fstest.MapFS, c Change) {
	for p, b := range c.Files {
		if b == nil {
			delete(m, p)
		} else {
			m[p] = &fstest.MapFile{Data: b}
		}
	}
	for p, b := range c.Ledger {
		p = path.Join(ledgerDir, p)
		if b != nil {
			m[p] = &fstest.MapFile{Data: b}
			continue
		}
		for q := range m {
			if q == p || strings.HasPrefix(q, p+"/") {
				delete(m, q)
			}
		}
	}
}

// records reads the ledger branch's tree the tests keep in m.
func records(m fstest.MapFS) FS {
	sub, _ := fs.Sub(m, ledgerDir)
	return FS{sub}
}

func plan(t *testing.T, m fstest.MapFS, kind message.Kind, body string) (Change, error) {
	t.Helper()
	req, err := message.Decode(kind, []byte(body))
	if err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return layout.Plan(FS{m}, req)
}

func mustPlan(t *testing.T, m fstest.MapFS, kind message.Kind, body string) Change {
	t.Helper()
	c, err := plan(t, m, kind, body)
	if err != nil {
		t.Fatalf("plan %s: %v", body, err)
	}
	apply(m, c)
	return c
}

func file(m fstest.MapFS, name string) string {
	if f, ok := m[path.Join(templates.Root, name)]; ok {
		return string(f.Data)
	}
	return "<absent>"
}

// sedRender runs the reference's own substitution.
func sedRender(t *testing.T, tier, id, ver string) string {
	t.Helper()
	src := path.Join("../../templates", templates.Root, "tier-templates", tier+"_tenant_template.yaml")
	out, err := exec.Command("sed", "s|{TENANT_ID}|"+id+"|g; s|{RELEASE_VERSION}|"+ver+"|g", src).Output()
	if err != nil {
		t.Fatalf("sed: %v", err)
	}
	return string(out)
}

func TestTiers(t *testing.T) {
	m := seed(t)
	tiers, err := layout.Tiers(FS{m})
	if err != nil || strings.Join(tiers, ",") != "advanced,basic,premium" {
		t.Fatalf("Tiers = %v, %v", tiers, err)
	}
	// A tier is data: a template and a folder make a new one.
	m[templates.Root+"/tier-templates/gold_tenant_template.yaml"] = &fstest.MapFile{Data: []byte("x")}
	if tiers, _ := layout.Tiers(FS{m}); len(tiers) != 3 {
		t.Fatalf("template without folder counted as a tier: %v", tiers)
	}
	m[templates.Root+"/tenants/gold/kustomization.yaml"] = &fstest.MapFile{Data: []byte("resources: []\n")}
	if tiers, _ := layout.Tiers(FS{m}); len(tiers) != 4 {
		t.Fatalf("new tier not found: %v", tiers)
	}
}

func TestOnboardMatchesReference(t *testing.T) {
	m := seed(t)
	for _, tc := range []struct{ id, tier string }{{"tenant-1", "premium"}, {"tenant-2", "advanced"}, {"tenant-3", "basic"}} {
		c := mustPlan(t, m, message.Onboarding, `{"tenant_id":"`+tc.id+`","tenant_tier":"`+tc.tier+`","release_version":"0.0"}`)
		if want := "Adding new tenant " + tc.id + " in tier " + tc.tier; c.Message != want {
			t.Errorf("message %q, want %q", c.Message, want)
		}
		if got, want := file(m, "tenants/"+tc.tier+"/"+tc.id+".yaml"), sedRender(t, tc.tier, tc.id, "0.0"); got != want {
			t.Errorf("%s differs from the reference's sed output:\n%s\nwant\n%s", tc.id, got, want)
		}
		wantK := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - dummy-configmap.yaml\n  - " + tc.id + ".yaml"
		if got := file(m, "tenants/"+tc.tier+"/kustomization.yaml"); got != wantK {
			t.Errorf("kustomization:\n%q\nwant\n%q", got, wantK)
		}
	}
	golden(t, m, "onboard-three")
}

func TestOnboardIdempotentAndConflicts(t *testing.T) {
	m := seed(t)
	body := `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`
	mustPlan(t, m, message.Onboarding, body)
	if c := mustPlan(t, m, message.Onboarding, body); !c.Empty() {
		t.Fatalf("second onboarding changed %v", c.Paths())
	}
	// A late duplicate with another version leaves the tenant as it is.
	if c := mustPlan(t, m, message.Onboarding, strings.Replace(body, "0.0", "3.0", 1)); !c.Empty() {
		t.Fatalf("duplicate onboarding with another version changed %v", c.Paths())
	}
	rejects := map[string]reject.Reason{
		`{"tenant_id":"tenant-1","tenant_tier":"basic","release_version":"0.0"}`: reject.TierConflict,
		`{"tenant_id":"pool-1","tenant_tier":"basic","release_version":"0.0"}`:   reject.ReservedTenant,
		`{"tenant_id":"t9","tenant_tier":"gold","release_version":"0.0"}`:        reject.UnknownTier,
	}
	for body, reason := range rejects {
		_, err := plan(t, m, message.Onboarding, body)
		if r, ok := reject.As(err); !ok || r.Reason != reason {
			t.Errorf("%s: got %v, want %s", body, err, reason)
		}
	}
	// A tenant file nobody applies (no entry), left over or written by
	// hand, is rendered again: the onboarding asks for the template's
	// objects at its release, not for what the file holds.
	m2 := seed(t)
	t5 := templates.Root + "/tenants/basic/t5.yaml"
	kept := mustPlan(t, seed(t), message.Onboarding, `{"tenant_id":"t5","tenant_tier":"basic","release_version":"7.0"}`).Files[t5]
	kept = append(kept, "# edited by hand\n"...)
	m2[t5] = &fstest.MapFile{Data: kept}
	c := mustPlan(t, m2, message.Onboarding, `{"tenant_id":"t5","tenant_tier":"basic","release_version":"0.0"}`)
	if got := string(c.Files[t5]); !strings.Contains(got, `version: "0.0.x"`) || strings.Contains(got, "edited by hand") {
		t.Fatalf("a leftover file of the tenant's objects was listed as it is:\n%s", got)
	}
	m2 = seed(t)
	m2[t5] = &fstest.MapFile{Data: []byte("apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: pool-1\n  namespace: flux-system\n")}
	c = mustPlan(t, m2, message.Onboarding, `{"tenant_id":"t5","tenant_tier":"basic","release_version":"0.0"}`)
	if got := string(c.Files[t5]); !strings.Contains(got, "name: t5-basic") || strings.Contains(got, "name: pool-1") {
		t.Fatalf("a file declaring another object was not rendered again: %v\n%s", c.Paths(), got)
	}
}

func TestOffboard(t *testing.T) {
	m := seed(t)
	orig := file(m, "tenants/advanced/kustomization.yaml")
	mustPlan(t, m, message.Onboarding, `{"tenant_id":"tenant-2","tenant_tier":"advanced","release_version":"0.0"}`)
	c := mustPlan(t, m, message.Offboarding, `{"tenant_id":"tenant-2","tenant_tier":"advanced"}`)
	if c.Message != "Removing tenant tenant-2 in tier advanced" {
		t.Errorf("message %q", c.Message)
	}
	if file(m, "tenants/advanced/tenant-2.yaml") != "<absent>" || file(m, "tenants/advanced/kustomization.yaml") != orig {
		t.Fatalf("offboarding left traces:\n%s", file(m, "tenants/advanced/kustomization.yaml"))
	}
	if c := mustPlan(t, m, message.Offboarding, `{"tenant_id":"tenant-2","tenant_tier":"advanced"}`); !c.Empty() {
		t.Fatalf("offboarding an absent tenant changed %v", c.Paths())
	}
	mustPlan(t, m, message.Onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`)
	_, err := plan(t, m, message.Offboarding, `{"tenant_id":"tenant-1","tenant_tier":"basic"}`)
	if r, ok := reject.As(err); !ok || r.Reason != reject.TierConflict {
		t.Fatalf("offboarding from the wrong tier: %v", err)
	}
}

func TestDeployKeepsImageTags(t *testing.T) {
	m := seed(t)
	for _, id := range []string{"b1", "b2"} {
		mustPlan(t, m, message.Onboarding, `{"tenant_id":"`+id+`","tenant_tier":"basic","release_version":"0.0"}`)
	}
	mustPlan(t, m, message.Onboarding, `{"tenant_id":"p1","tenant_tier":"premium","release_version":"0.0"}`)
	// Flux image automation set a tag on the pool env.
	pool := templates.Root + "/pooled-envs/pool-1.yaml"
	m[pool].Data = []byte(strings.Replace(string(m[pool].Data), `tag: "0.1" # {"$imagepolicy": "flux-system:consumer`, `tag: "0.9" # {"$imagepolicy": "flux-system:consumer`, 1))
	premiumBefore := file(m, "tenants/premium/p1.yaml")

	c := mustPlan(t, m, message.Deployment, `{"tenant_tier":"basic","release_version":"1.0"}`)
	if c.Message != "Deploying to basic tenants, version 1.0" {
		t.Errorf("message %q", c.Message)
	}
	for _, id := range []string{"b1", "b2"} {
		if got, want := file(m, "tenants/basic/"+id+".yaml"), sedRender(t, "basic", id, "1.0"); got != want {
			t.Errorf("%s after deploy:\n%s\nwant\n%s", id, got, want)
		}
	}
	p := file(m, "pooled-envs/pool-1.yaml")
	for _, want := range []string{`version: "1.0.x"`, `tag: "0.9" # {"$imagepolicy": "flux-system:consumer-image-policy:tag"}`,
		`tag: "0.1" # {"$imagepolicy": "flux-system:producer-image-policy:tag"}`, "name: pool-1\n"} {
		if !strings.Contains(p, want) {
			t.Errorf("pool-1 lacks %q:\n%s", want, p)
		}
	}
	if file(m, "tenants/premium/p1.yaml") != premiumBefore {
		t.Error("basic deployment touched a premium tenant")
	}
	if c := mustPlan(t, m, message.Deployment, `{"tenant_tier":"basic","release_version":"1.0"}`); !c.Empty() {
		t.Fatalf("repeated deployment changed %v", c.Paths())
	}
	golden(t, m, "deploy-basic")

	c = mustPlan(t, m, message.Deployment, `{"tenant_tier":"premium","release_version":"2.0","tenant_id":"p1"}`)
	if len(c.Files) != 1 || !strings.Contains(file(m, "tenants/premium/p1.yaml"), `"2.0.x"`) {
		t.Fatalf("single-tenant deployment changed %v", c.Paths())
	}
	_, err := plan(t, m, message.Deployment, `{"tenant_tier":"premium","release_version":"2.0","tenant_id":"nobody"}`)
	if r, ok := reject.As(err); !ok || r.Reason != reject.TenantNotFound {
		t.Fatalf("deploy to unknown tenant: %v", err)
	}
}

// golden compares the tree's changed files with testdata/<name>/, or writes
// them there when UPDATE_GOLDEN=1.
func golden(t *testing.T, m fstest.MapFS, name string) {
	t.Helper()
	base := seed(t)
	for p, f := range m {
		if b, ok := base[p]; ok && string(b.Data) == string(f.Data) {
			continue
		}
		g := path.Join("testdata", name, strings.TrimPrefix(p, templates.Root+"/"))
		if os.Getenv("UPDATE_GOLDEN") == "1" {
			if err := os.MkdirAll(path.Dir(g), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(g, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(g)
		if err != nil {
			t.Fatalf("golden file: %v (run with UPDATE_GOLDEN=1)", err)
		}
		if string(want) != string(f.Data) {
			t.Errorf("%s differs from %s:\n%s", p, g, f.Data)
		}
	}
}

func TestTemplatesMatchFixture(t *testing.T) {
	fixture := "../../../shared/fixtures/reference-gitops-repo"
	if _, err := os.Stat(fixture); err != nil {
		t.Skipf("reference fixture not beside the checkout: %v", err)
	}
	err := fs.WalkDir(templates.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ours, _ := fs.ReadFile(templates.FS, p)
		theirs, err := os.ReadFile(path.Join(fixture, p))
		if err != nil || string(ours) != string(theirs) {
			t.Errorf("templates/%s differs from the reference fixture (%v)", p, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
