package validate

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/templates"
)

const root = templates.Root

func seed(t testing.TB) fstest.MapFS {
	t.Helper()
	m, err := templates.MapFS()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func tenant(t testing.TB, m fstest.MapFS, tier, id string) string {
	t.Helper()
	tmpl := string(m[root+"/tier-templates/"+tier+"_tenant_template.yaml"].Data)
	return strings.NewReplacer("{TENANT_ID}", id, "{RELEASE_VERSION}", "0.0").Replace(tmpl)
}

func TestCheck(t *testing.T) {
	checker := NewChecker(gitops.Layout{Root: root})
	kpath := root + "/tenants/premium/kustomization.yaml"
	fpath := root + "/tenants/premium/t1.yaml"
	tests := []struct {
		name    string
		edit    func(m fstest.MapFS)
		wantErr string
	}{
		{"valid onboarding", func(m fstest.MapFS) {}, ""},
		{"duplicate entry (reference defect 1)", func(m fstest.MapFS) {
			m[kpath].Data = append(m[kpath].Data, "\n  - t1.yaml"...)
		}, "kustomize build"},
		{"missing file", func(m fstest.MapFS) { delete(m, fpath) }, "kustomize build"},
		{"unknown field", func(m fstest.MapFS) {
			m[fpath].Data = []byte(strings.Replace(string(m[fpath].Data), "  interval: 1m0s", "  interval: 1m0s\n  intervall: 2m", 1))
		}, "unknown field"},
		{"bad duration", func(m fstest.MapFS) {
			m[fpath].Data = []byte(strings.Replace(string(m[fpath].Data), "interval: 1m0s", "interval: often", 1))
		}, "HelmRelease"},
		{"malformed yaml", func(m fstest.MapFS) {
			m[fpath].Data = append(m[fpath].Data, "\n  : : -\n\t["...)
		}, "t1.yaml"},
		{"unknown apiVersion", func(m fstest.MapFS) {
			m[fpath].Data = []byte(strings.Replace(string(m[fpath].Data), "helm.toolkit.fluxcd.io/v2beta1", "helm.toolkit.fluxcd.io/v9", 1))
		}, "unknown apiVersion"},
		{"two documents with the same name", func(m fstest.MapFS) {
			m[fpath].Data = append(m[fpath].Data, "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: t1\n"...)
		}, "kustomize build"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := seed(t)
			m[fpath] = &fstest.MapFile{Data: []byte(tenant(t, m, "premium", "t1"))}
			m[kpath].Data = append(m[kpath].Data, "\n  - t1.yaml"...)
			tt.edit(m)
			err := checker.Check(gitops.FS{FS: m}, []string{fpath, kpath})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Check = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestHelmReleaseV2(t *testing.T) {
	doc := "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: x\nspec:\n  interval: 1m\n  chart:\n    spec:\n      chart: c\n      sourceRef:\n        kind: HelmRepository\n        name: r\n"
	if err := HelmReleases([]byte(doc)); err != nil {
		t.Fatalf("v2: %v", err)
	}
	long := strings.Replace(doc, "name: x", "name: "+strings.Repeat("a", 60), 1)
	if err := HelmReleases([]byte(long)); err == nil {
		t.Fatal("release name over 53 characters accepted")
	}
}

// TestHelmReleasesInAList: kustomize applies a List's items, so a
// HelmRelease among them is decoded as strictly as one of its own.
func TestHelmReleasesInAList(t *testing.T) {
	item := "  - apiVersion: helm.toolkit.fluxcd.io/v2\n    kind: HelmRelease\n    metadata:\n      name: NAME\n    spec:\n      interval: 1m\n      chart:\n        spec:\n          chart: c\n          sourceRef:\n            kind: HelmRepository\n            name: r\n"
	list := "apiVersion: v1\nkind: List\nitems:\n" + strings.Replace(item, "NAME", "x", 1)
	if err := HelmReleases([]byte(list)); err != nil {
		t.Fatalf("a valid HelmRelease in a List: %v", err)
	}
	bad := list + strings.Replace(item, "NAME", strings.Repeat("a", 60), 1)
	if err := HelmReleases([]byte(bad)); err == nil || !strings.Contains(err.Error(), "item 2") {
		t.Fatalf("a HelmRelease in a List with a name over 53 characters: %v", err)
	}
}
