package intent

import (
	"path"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/templates"
)

// transformers are kustomize's transformers as a tier's (or the tenants')
// kustomization may hold them.
var transformers = map[string]string{
	"namePrefix":        "namePrefix: acme-\n",
	"nameSuffix":        "nameSuffix: -eu\n",
	"namespace":         "namespace: tenants\n",
	"labels":            "labels:\n  - pairs:\n      team: saas\n",
	"commonLabels":      "commonLabels:\n  team: saas\n",
	"commonAnnotations": "commonAnnotations:\n  team: saas\n",
	"patch":             "patches:\n  - target:\n      kind: HelmRelease\n    patch: |-\n      apiVersion: helm.toolkit.fluxcd.io/v2beta1\n      kind: HelmRelease\n      metadata:\n        name: any\n      spec:\n        interval: 10m\n",
	"json6902":          "patches:\n  - target:\n      kind: HelmRelease\n    patch: |-\n      - op: add\n        path: /spec/suspend\n        value: false\n",
	"prefixAndLabels":   "namePrefix: acme-\ncommonLabels:\n  team: saas\n",
	"generator":         "configMapGenerator:\n  - name: tier-settings\n    literals:\n      - region=eu\n",
	"images":            "images:\n  - name: producer\n    newTag: \"9.9\"\n",
	"replacements":      "replacements:\n  - source:\n      kind: ConfigMap\n      name: dummy-configmap-premium\n      fieldPath: metadata.name\n    targets:\n      - select:\n          kind: HelmRelease\n        fieldPaths:\n          - metadata.annotations.source\n        options:\n          create: true\n",
}

// TestEveryTransformerWithEveryFlow: with each transformer in the premium
// tier's kustomization, and in the tenants' one, the worker's own
// onboarding, offboarding, deployment of a tenant and of the tier each do
// what they name: the intent check compares both sides through the same
// build, and passes them.
func TestEveryTransformerWithEveryFlow(t *testing.T) {
	for name, tr := range transformers {
		// kustomize's namespace transformer would give every tenant's
		// Namespace one name: tried on the tier without Namespaces.
		tier, p := "premium", "p"
		if name == "namespace" {
			tier, p = "basic", "b"
		}
		for _, at := range []string{"tenants/" + tier + "/kustomization.yaml", "tenants/kustomization.yaml"} {
			t.Run(name+" in "+path.Dir(at), func(t *testing.T) {
				base := onboarded(t, p+"1", p+"2")
				k := path.Join(templates.Root, at)
				base[k].Data = append(append(slices.Clone(base[k].Data), '\n'), tr...)
				c := NewChecker(layout)
				for _, body := range []string{
					`{"tenant_id":"` + p + `3","tenant_tier":"` + tier + `","release_version":"0.0"}`,
					`{"tenant_id":"` + p + `1","tenant_tier":"` + tier + `"}`,
					`{"tenant_id":"` + p + `2","tenant_tier":"` + tier + `","release_version":"2.0"}`,
					`{"tenant_tier":"` + tier + `","release_version":"3.0"}`,
				} {
					kind := message.Deployment
					switch {
					case strings.Contains(body, "3\",\"tenant_tier"):
						kind = message.Onboarding
					case !strings.Contains(body, "release_version"):
						kind = message.Offboarding
					}
					req, after, changed := planned(t, base, kind, body)
					// Both sides build: the check compares, not skips.
					for _, side := range []fstest.MapFS{base, after} {
						if _, err := buildTraced(mem{side}, layout.TenantsDir()); err != nil {
							t.Fatalf("%s %s: %v", kind, body, err)
						}
					}
					if err := c.Check(mem{base}, mem{after}, req, changed); err != nil {
						t.Errorf("%s %s: %v", kind, body, err)
					}
				}
			})
		}
	}
}

// TestReleaseOutsideAHelmRelease: a template that writes the release in
// a label of the tenant's Namespace: a deployment may change exactly that
// value too, on any kind, and nothing else.
func TestReleaseOutsideAHelmRelease(t *testing.T) {
	m := seed(t)
	tmpl := path.Join(templates.Root, "tier-templates/premium_tenant_template.yaml")
	m[tmpl].Data = []byte(strings.Replace(string(m[tmpl].Data), "  name: {TENANT_ID}\n", "  name: {TENANT_ID}\n  labels:\n    release: \"{RELEASE_VERSION}\"\n", 1))
	if !strings.Contains(string(m[tmpl].Data), `release: "{RELEASE_VERSION}"`) {
		t.Fatal("the template has no Namespace to label")
	}
	for _, id := range []string{"p1", "p2"} {
		_, m, _ = planned(t, m, message.Onboarding, `{"tenant_id":"`+id+`","tenant_tier":"premium","release_version":"0.0"}`)
	}
	c := NewChecker(layout)
	for _, body := range []string{`{"tenant_id":"p2","tenant_tier":"premium","release_version":"2.0"}`, `{"tenant_tier":"premium","release_version":"3.0"}`} {
		req, after, changed := planned(t, m, message.Deployment, body)
		if err := c.Check(mem{m}, mem{after}, req, changed); err != nil {
			t.Errorf("deployment %s: %v", body, err)
		}
		// The same change with another label of the Namespace changed too
		// is more than the release.
		worse := clone(after)
		p := path.Join(templates.Root, "tenants/premium/p2.yaml")
		worse[p] = &fstest.MapFile{Data: []byte(strings.Replace(string(after[p].Data), "  labels:\n", "  labels:\n    other: x\n", 1))}
		if err := c.Check(mem{m}, mem{worse}, req, changed); err == nil {
			t.Errorf("deployment %s with another label changed passed", body)
		}
	}
}
