package gitops

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"strings"
	"testing"
	"testing/fstest"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tenant-worker/tenant-worker/internal/kustomization"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/templates"
)

// built is what kustomize builds from the tenants folder of m, as Flux's
// one Kustomization of it applies: each object's YAML by its id.
func built(t *testing.T, m fstest.MapFS) map[string]string {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	for p, f := range m {
		if err := fsys.MkdirAll(path.Dir("/" + p)); err != nil {
			t.Fatal(err)
		}
		if err := fsys.WriteFile("/"+p, f.Data); err != nil {
			t.Fatal(err)
		}
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, "/"+layout.TenantsDir())
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	out := map[string]string{}
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		out[r.CurId().String()] = string(y)
	}
	return out
}

// migrate moves m to shards and returns the change.
func migrate(t *testing.T, m fstest.MapFS, shards int) map[string][]byte {
	t.Helper()
	files, err := layout.Migrate(FS{m}, shards)
	if err != nil {
		t.Fatalf("migrate to %d shards: %v", shards, err)
	}
	apply(m, Change{Files: files})
	return files
}

func onboardN(t *testing.T, m fstest.MapFS, tier string, n int) []string {
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%d", tier, i)
		mustPlan(t, m, message.Onboarding, `{"tenant_id":"`+id+`","tenant_tier":"`+tier+`","release_version":"1.0"}`)
		ids = append(ids, id)
	}
	return ids
}

// TestMigrateMovesOnlyPaths: moving a platform to shard folders and back
// changes where files are, never what kustomize builds from them.
func TestMigrateMovesOnlyPaths(t *testing.T) {
	m := seed(t)
	premium := onboardN(t, m, "premium", 12)
	onboardN(t, m, "basic", 5)
	// A file nobody lists stays unlisted wherever it goes.
	m[layout.TierDir("premium")+"/stray.yaml"] = &fstest.MapFile{Data: []byte(sedRender(t, "premium", "stray", "1.0"))}
	before := built(t, m)

	migrate(t, m, 4)
	if got := built(t, m); !maps.Equal(got, before) {
		t.Fatalf("sharded, kustomize builds %d objects, not the %d it built before", len(got), len(before))
	}
	l, err := layout.Of(FS{m})
	if err != nil || l.Shards != 4 {
		t.Fatalf("layout after migrating: %+v, %v", l, err)
	}
	for _, id := range append(premium, "stray") {
		if _, ok := m[l.TenantFile("premium", id)]; !ok {
			t.Errorf("%s is not at %s", id, l.TenantFile("premium", id))
		}
		if _, ok := m[layout.TenantFile("premium", id)]; ok {
			t.Errorf("%s is still in the tier's folder", id)
		}
	}
	if k := at(m, l.TierKustomization("premium")); !strings.Contains(k, "dummy-configmap.yaml") || !strings.Contains(k, "shard-") {
		t.Errorf("the tier's kustomization lost its shared file or lists no shard:\n%s", k)
	}
	if again, err := l.Migrate(FS{m}, 4); err != nil || len(again) != 0 {
		t.Errorf("migrating to the layout it has changes %v (%v)", keys(again), err)
	}

	migrate(t, m, 0)
	if got := built(t, m); !maps.Equal(got, before) {
		t.Fatalf("back in the tiers' folders, kustomize builds %d objects, not %d", len(got), len(before))
	}
	for p := range m {
		if strings.Contains(p, "/shard-") || p == layout.LayoutFile() {
			t.Errorf("%s is left after migrating back", p)
		}
	}
}

// TestShardedLayoutPlans: onboarding, deployment, offboarding and a move
// between tiers write into the shard folders, and kustomize builds what
// each message asks.
func TestShardedLayoutPlans(t *testing.T) {
	m := seed(t)
	migrate(t, m, 3)
	l, _ := layout.Of(FS{m})
	ids := onboardN(t, m, "premium", 9)
	for _, id := range ids {
		if at(m, l.TenantFile("premium", id)) != sedRender(t, "premium", id, "1.0") {
			t.Fatalf("%s: not rendered at %s", id, l.TenantFile("premium", id))
		}
	}
	objs := built(t, m)
	if n := strings.Count(strings.Join(slicesOf(objs), "\n"), "kind: HelmRelease"); n != 9 {
		t.Fatalf("kustomize builds %d HelmReleases, want 9", n)
	}

	// A tier deployment rewrites every tenant of the tier, in any folder
	// (listed where it is: a file nobody lists is nobody's tenant).
	m[layout.TenantFile("premium", "legacy")] = &fstest.MapFile{Data: []byte(sedRender(t, "premium", "legacy", "1.0"))}
	listing, _, err := kustomization.Add(m[l.TierKustomization("premium")].Data, "legacy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m[l.TierKustomization("premium")] = &fstest.MapFile{Data: listing}
	c := mustPlan(t, m, message.Deployment, `{"tenant_tier":"premium","release_version":"2.0"}`)
	for _, id := range ids {
		if !strings.Contains(at(m, l.TenantFile("premium", id)), `"2.0"`) && !strings.Contains(at(m, l.TenantFile("premium", id)), "2.0") {
			t.Errorf("%s kept its release after a tier deployment", id)
		}
	}
	if _, ok := c.Files[layout.TenantFile("premium", "legacy")]; !ok {
		t.Errorf("a tenant left in the tier's folder was not deployed: %v", keys(c.Files))
	}

	// A per-tenant deployment and an offboarding find the tenant in its
	// shard; offboarding the tier's-folder tenant finds it there.
	c = mustPlan(t, m, message.Deployment, `{"tenant_id":"premium-4","tenant_tier":"premium","release_version":"3.0"}`)
	if len(c.Files) != 1 || c.Files[l.TenantFile("premium", "premium-4")] == nil {
		t.Errorf("per-tenant deployment changed %v", keys(c.Files))
	}
	c = mustPlan(t, m, message.Offboarding, `{"tenant_id":"premium-4","tenant_tier":"premium"}`)
	if _, ok := m[l.TenantFile("premium", "premium-4")]; ok || len(c.Files) != 2 {
		t.Errorf("offboarding changed %v", keys(c.Files))
	}
	// An onboarding of a tenant in the tier's own folder finds it.
	if c, err := plan(t, m, message.Onboarding, `{"tenant_id":"legacy","tenant_tier":"basic","release_version":"1.0"}`); !isReason(err, reject.TierConflict) {
		t.Errorf("onboarding to another tier of a tenant in the tier's folder: %v, %v", keys(c.Files), err)
	}

	// A move: offboarding from premium, onboarding to basic.
	mustPlan(t, m, message.Offboarding, `{"tenant_id":"premium-1","tenant_tier":"premium"}`)
	mustPlan(t, m, message.Onboarding, `{"tenant_id":"premium-1","tenant_tier":"basic","release_version":"1.0"}`)
	if _, ok := m[l.TenantFile("basic", "premium-1")]; !ok {
		t.Errorf("the moved tenant is not in basic's shard")
	}
	after := built(t, m)
	for id := range after {
		if strings.Contains(id, "premium-4") {
			t.Errorf("the offboarded tenant's %s is still built", id)
		}
	}
	// Offboarding every tenant of a shard leaves a kustomization that
	// still builds (an empty list).
	for _, id := range ids {
		if id == "premium-4" || id == "premium-1" {
			continue
		}
		mustPlan(t, m, message.Offboarding, `{"tenant_id":"`+id+`","tenant_tier":"premium"}`)
	}
	built(t, m)
	for p := range m {
		if strings.HasPrefix(p, l.TierDir("premium")+"/shard-") {
			t.Errorf("%s is left after its shard's last tenant left", p)
		}
	}
	if k := at(m, l.TierKustomization("premium")); strings.Contains(k, "shard-") {
		t.Errorf("the tier still lists a shard folder:\n%s", k)
	}
}

// TestLayoutFileRefused: a layout file that does not say one shard count
// clearly stops the worker on the repository, naming the file.
func TestLayoutFileRefused(t *testing.T) {
	for _, body := range []string{"shards: 0\n", "shards: 101\n", "shard: 4\n", "shards: four\n", "shards: 4\nextra: 1\n", ""} {
		m := seed(t)
		m[layout.LayoutFile()] = &fstest.MapFile{Data: []byte(body)}
		_, err := plan(t, m, message.Onboarding, `{"tenant_id":"t1","tenant_tier":"premium","release_version":"1.0"}`)
		if !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), "layout.yaml") {
			t.Errorf("layout file %q: %v", body, err)
		}
	}
}

// at is the content of the file at full path p of m.
func at(m fstest.MapFS, p string) string {
	if f, ok := m[p]; ok {
		return string(f.Data)
	}
	return "<absent>"
}

func isReason(err error, reason reject.Reason) bool {
	r, ok := reject.As(err)
	return ok && r.Reason == reason
}

func slicesOf(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, strings.TrimPrefix(k, templates.Root+"/"))
	}
	return out
}

// TestShardKustomizationsLayout: when each shard folder has a Kustomization
// of its own, the tier never lists a shard folder, a shard's last tenant
// leaves its folder listing nothing (for its Kustomization to prune), the
// tenants are still found, and no migration moves a tenant between
// Kustomizations.
func TestShardKustomizationsLayout(t *testing.T) {
	m := seed(t)
	l := Layout{Root: templates.Root, Shards: 2, ShardKustomizations: true}
	m[l.LayoutFile()] = &fstest.MapFile{Data: l.LayoutContent()}
	if got, err := layout.Of(FS{m}); err != nil || got != l {
		t.Fatalf("layout read back: %+v, %v", got, err)
	}
	ids := onboardN(t, m, "premium", 6)
	tierK := at(m, l.TierKustomization("premium"))
	if strings.Contains(tierK, "shard-") {
		t.Fatalf("the tier lists a shard folder:\n%s", tierK)
	}
	listed, err := l.Listed(FS{m}, "premium")
	if err != nil || len(listed) != len(ids) {
		t.Fatalf("listed %v (%v), want the %d tenants", listed, err, len(ids))
	}
	if c, err := plan(t, m, message.Onboarding, `{"tenant_id":"premium-3","tenant_tier":"basic","release_version":"1.0"}`); !isReason(err, reject.TierConflict) {
		t.Errorf("onboarding of a tenant of a shard to another tier: %v, %v", keys(c.Files), err)
	}
	for _, id := range ids {
		if l.Shard(id) == l.Shard(ids[0]) {
			mustPlan(t, m, message.Offboarding, `{"tenant_id":"`+id+`","tenant_tier":"premium"}`)
		}
	}
	k := l.TenantDir("premium", ids[0]) + "/kustomization.yaml"
	if got := at(m, k); !strings.Contains(got, "resources: []") {
		t.Errorf("the emptied shard's kustomization is %q, want it listing nothing", got)
	}
	built(t, m) // the tenants folder still builds
	for _, to := range []Layout{{Shards: 4, ShardKustomizations: true}, {Shards: 4}, {}} {
		if _, err := layout.MigrateTo(FS{m}, to); !errors.Is(err, ErrUnsupported) {
			t.Errorf("migrating to %s: %v, want it refused", to.Describe(), err)
		}
	}
	// Out of it, with the same folders: the tiers list them again.
	files, err := layout.MigrateTo(FS{m}, Layout{Shards: 2})
	if err != nil {
		t.Fatalf("out of shard Kustomizations: %v", err)
	}
	apply(m, Change{Files: files})
	if k := at(m, l.TierKustomization("premium")); !strings.Contains(k, "shard-") {
		t.Errorf("the tier lists no shard folder after leaving shard Kustomizations:\n%s", k)
	}
	built(t, m)
}

// TestShardOf: the tier and shard folder of a file under the tenants
// folder; none for a file outside any shard folder.
func TestShardOf(t *testing.T) {
	l := Layout{Root: "root"}
	for _, tc := range []struct {
		path, tier, shard string
		ok                bool
	}{
		{"root/tenants/premium/shard-03/t1.yaml", "premium", "shard-03", true},
		{"root/tenants/basic/shard-00/kustomization.yaml", "basic", "shard-00", true},
		{"root/tenants/premium/t1.yaml", "", "", false},
		{"root/tenants/premium/shard-03", "", "", false},
		{"root/tenants/premium/shard-3/t1.yaml", "", "", false},
		{"root/pooled-envs/premium/shard-03/t1.yaml", "", "", false},
		{"other/tenants/premium/shard-03/t1.yaml", "", "", false},
	} {
		tier, shard, ok := l.ShardOf(tc.path)
		if tier != tc.tier || shard != tc.shard || ok != tc.ok {
			t.Errorf("ShardOf(%q) = %q, %q, %v; want %q, %q, %v", tc.path, tier, shard, ok, tc.tier, tc.shard, tc.ok)
		}
	}
}
