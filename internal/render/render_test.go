package render

import (
	"errors"
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/templates"
	"go.yaml.in/yaml/v3"
)

const tmpl = `metadata:
  name: {TENANT_ID}-premium
spec:
  chart:
    spec:
      version: "{RELEASE_VERSION}.x"
  values:
    producer:
      image:
        tag: "0.1" # {"$imagepolicy": "flux-system:producer-image-policy:tag"}
    consumer:
      image:
        tag: "0.1" # {"$imagepolicy": "flux-system:consumer-image-policy:tag"}
`

func TestRender(t *testing.T) {
	out, err := Render([]byte(tmpl), Vars{TenantID: "t1", ReleaseVersion: "1.0"})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer("{TENANT_ID}", "t1", "{RELEASE_VERSION}", "1.0").Replace(tmpl)
	if string(out) != want {
		t.Fatalf("Render =\n%s\nwant\n%s", out, want)
	}
	if _, err := Render([]byte(tmpl), Vars{TenantID: "t1"}); err == nil {
		t.Fatal("missing RELEASE_VERSION: want an error")
	}
}

// TestSetReleaseChangesOnlyTheRelease: a deployment sets the values the
// template takes from the release and leaves every other byte: hand edits,
// a field the template gained since, image tags, spacing, quoting.
func TestSetReleaseChangesOnlyTheRelease(t *testing.T) {
	current := strings.NewReplacer("{TENANT_ID}", "t1", "{RELEASE_VERSION}", "1.0").Replace(tmpl)
	current = strings.Replace(current, "  name: t1-premium\n", "  name: t1-premium\n  labels: {team: a}   # by hand\n", 1)
	current = strings.Replace(current, `tag: "0.1" # {"$imagepolicy": "flux-system:consumer`, `tag: "0.7.3" # {"$imagepolicy": "flux-system:consumer`, 1)
	gained := strings.Replace(tmpl, "spec:\n", "spec:\n  storageNamespace: x\n", 1)
	for name, tc := range map[string]struct{ in, out string }{
		"double-quoted":  {current, strings.Replace(current, `version: "1.0.x"`, `version: "2.0.x"`, 1)},
		"single-quoted":  {strings.Replace(current, `"1.0.x"`, `'1.0.x'`, 1), strings.Replace(current, `version: "1.0.x"`, `version: '2.0.x'`, 1)},
		"plain, comment": {strings.Replace(current, `"1.0.x"`, `1.0.x   # pinned`, 1), strings.Replace(current, `version: "1.0.x"`, `version: 2.0.x   # pinned`, 1)},
	} {
		for _, template := range []string{tmpl, gained} {
			got, err := SetRelease([]byte(tc.in), []byte(template), Vars{TenantID: "t1", ReleaseVersion: "2.0"})
			if err != nil || string(got) != tc.out {
				t.Errorf("%s: SetRelease = %v\n%s\nwant\n%s", name, err, got, tc.out)
			}
		}
	}
	same, err := SetRelease([]byte(current), []byte(tmpl), Vars{TenantID: "t1", ReleaseVersion: "1.0"})
	if err != nil || string(same) != current {
		t.Errorf("the release in place: changed the file (%v)", err)
	}
	for name, in := range map[string]string{
		"no version":      strings.Replace(current, `      version: "1.0.x"`+"\n", "", 1),
		"other name":      strings.Replace(current, "name: t1-premium", "name: t2-premium", 1),
		"block scalar":    strings.Replace(current, `version: "1.0.x"`, "version: |\n        1.0.x", 1),
		"multi-line text": strings.Replace(current, `version: "1.0.x"`, "version: \"1.0\n        .x\"", 1),
	} {
		if _, err := SetRelease([]byte(in), []byte(tmpl), Vars{TenantID: "t1", ReleaseVersion: "2.0"}); err == nil {
			t.Errorf("%s: SetRelease succeeded, want an error", name)
		}
	}
}

func tierTemplate(t *testing.T, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(templates.FS, path.Join(templates.Root, "tier-templates", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSetReleaseMatchesKindNamespaceAndName: a tenant file that also holds
// a HelmRelease of the same name in another namespace, written before the
// tenant's own (flux-system) one: the deployment moves the tenant's own and
// leaves the other alone. A file with only the other is not the tenant's.
func TestSetReleaseMatchesKindNamespaceAndName(t *testing.T) {
	tmpl := tierTemplate(t, "premium_tenant_template.yaml")
	own, err := Render(tmpl, Vars{TenantID: "p1", ReleaseVersion: "0.0"})
	if err != nil {
		t.Fatal(err)
	}
	other := "apiVersion: helm.toolkit.fluxcd.io/v2beta1\nkind: HelmRelease\nmetadata:\n  name: p1-premium\n  namespace: p1-tools\n" +
		"spec:\n  interval: 1m0s\n  chart:\n    spec:\n      chart: tools-chart\n      version: \"0.0.x\"\n      sourceRef:\n" +
		"        kind: HelmRepository\n        name: tools\n---\n"
	current := other + string(own)
	out, err := SetRelease([]byte(current), tmpl, Vars{TenantID: "p1", ReleaseVersion: "2.0"})
	if err != nil {
		t.Fatal(err)
	}
	if want := other + strings.Replace(string(own), `version: "0.0.x"`, `version: "2.0.x"`, 1); string(out) != want {
		t.Errorf("SetRelease =\n%s\nwant\n%s", out, want)
	}
	for name, in := range map[string]string{
		"only the other namespace": strings.TrimSuffix(other, "---\n"),
		"no namespace":             strings.Replace(string(own), "  namespace: flux-system\n", "", 1),
		"another kind":             strings.Replace(string(own), "kind: HelmRelease", "kind: Kustomization", 1),
	} {
		if _, err := SetRelease([]byte(in), tmpl, Vars{TenantID: "p1", ReleaseVersion: "2.0"}); !errors.Is(err, ErrNoReleaseField) {
			t.Errorf("%s: SetRelease = %v, want ErrNoReleaseField", name, err)
		}
	}
}

// TestSetReleaseInFlowMapping: a hand-edited tenant file whose chart spec
// is a flow mapping with a plain version ("spec: {chart: c, version: 0.0.x,
// sourceRef: {...}}") is valid YAML that Flux reads: the version is set in
// place, the rest of the line stays.
func TestSetReleaseInFlowMapping(t *testing.T) {
	tmpl := tierTemplate(t, "premium_tenant_template.yaml")
	own, err := Render(tmpl, Vars{TenantID: "p1", ReleaseVersion: "0.0"})
	if err != nil {
		t.Fatal(err)
	}
	block := "    spec:\n      chart: helm-tenant-chart\n      version: \"0.0.x\"\n      sourceRef:\n        kind: HelmRepository\n        name: helm-tenant-chart\n"
	if !strings.Contains(string(own), block) {
		t.Fatalf("template changed:\n%s", own)
	}
	flow := "    spec: {chart: helm-tenant-chart, version: 0.0.x, sourceRef: {kind: HelmRepository, name: helm-tenant-chart}}\n"
	current := strings.Replace(string(own), block, flow, 1)
	out, err := SetRelease([]byte(current), tmpl, Vars{TenantID: "p1", ReleaseVersion: "2.0"})
	if err != nil {
		t.Fatalf("SetRelease: %v", err)
	}
	want := strings.Replace(current, "version: 0.0.x,", "version: 2.0.x,", 1)
	if string(out) != want {
		t.Errorf("SetRelease =\n%s\nwant\n%s", out, want)
	}
}

// TestSetReleaseAnchoredTaggedOrOneLine: a value with an anchor no alias
// uses, or with an explicit tag, is set in place, behind its properties;
// so are a value in a file with CRLF line ends, two values on one line
// (the type each has kept), and a document on the line of a byte order
// mark.
func TestSetReleaseAnchoredTaggedOrOneLine(t *testing.T) {
	current := strings.NewReplacer("{TENANT_ID}", "t1", "{RELEASE_VERSION}", "1.0").Replace(tmpl)
	v := Vars{TenantID: "t1", ReleaseVersion: "2.0"}
	for name, tc := range map[string]struct{ from, to string }{
		"anchored":          {`version: &v "1.0.x"`, `version: &v "2.0.x"`},
		"tagged":            {`version: !!str 1.0.x`, `version: !!str 2.0.x`},
		"tagged, anchored":  {`version: !!str &v '1.0.x' # pinned`, `version: !!str &v '2.0.x' # pinned`},
		"anchored mapping":  {`version: "1.0.x"`, `version: "2.0.x"`},
		"escaped in quotes": {`version: "1.0\x2ex"`, `version: "2.0.x"`},
	} {
		in := strings.Replace(current, `version: "1.0.x"`, tc.from, 1)
		if name == "anchored mapping" {
			in = strings.Replace(in, "  chart:\n    spec:\n", "  chart: &c\n    spec:\n", 1)
		}
		got, err := SetRelease([]byte(in), []byte(tmpl), v)
		if want := strings.Replace(in, tc.from, tc.to, 1); err != nil || string(got) != want {
			t.Errorf("%s: SetRelease = %v\n%s\nwant\n%s", name, err, got, want)
		}
	}
	crlf := strings.ReplaceAll(strings.Replace(current, `"1.0.x"`, "1.0.x", 1), "\n", "\r\n")
	if got, err := SetRelease([]byte(crlf), []byte(tmpl), v); err != nil || string(got) != strings.Replace(crlf, "1.0.x", "2.0.x", 1) {
		t.Errorf("CRLF: SetRelease = %v %q", err, got)
	}
	two := "metadata:\n  name: a\nspec:\n  version: \"{RELEASE_VERSION}.x\"\n  appVersion: \"{RELEASE_VERSION}\"\n"
	for in, want := range map[string]string{
		"metadata: {name: a}\nspec: {version: 1.0.x, appVersion: '1.0'}\n":     "metadata: {name: a}\nspec: {version: 2.0.x, appVersion: '2.0'}\n",
		"metadata: {name: a}\nspec: {version: 1.0.x, appVersion: 1.0.x}\n":     "metadata: {name: a}\nspec: {version: 2.0.x, appVersion: \"2.0\"}\n",
		"\ufeff{metadata: {name: a}, spec: {version: 1.0.x, appVersion: 1.0}}": "\ufeff{metadata: {name: a}, spec: {version: 2.0.x, appVersion: 2.0}}",
	} {
		if got, err := SetRelease([]byte(in), []byte(two), v); err != nil || string(got) != want {
			t.Errorf("SetRelease(%q) = %v %q, want %q", in, err, got, want)
		}
	}
}

// TestSetReleaseRefusesValueSharedThroughAnchor: a hand-edited file whose
// release value is shared through an anchor, alone or in a mapping, and
// used again elsewhere: setting it would change the alias too, which the
// message does not name, so the deployment is refused.
func TestSetReleaseRefusesValueSharedThroughAnchor(t *testing.T) {
	current := strings.NewReplacer("{TENANT_ID}", "t1", "{RELEASE_VERSION}", "1.0").Replace(tmpl)
	for name, in := range map[string]string{
		"anchored mapping": strings.Replace(
			strings.Replace(current, "  chart:\n    spec:\n", "  chart:\n    spec: &chartspec\n", 1),
			"  values:\n", "  values:\n    installedChart: *chartspec\n", 1),
		"anchored scalar": strings.Replace(
			strings.Replace(current, `version: "1.0.x"`, `version: &v "1.0.x"`, 1),
			"  values:\n", "  values:\n    pinnedVersion: *v\n", 1),
		"aliased in a later document": strings.Replace(current, `version: "1.0.x"`, `version: &v "1.0.x"`, 1) +
			"---\nkind: ConfigMap\ndata:\n  version: *v\n",
		"merged elsewhere": strings.Replace(
			strings.Replace(current, "  chart:\n    spec:\n", "  chart:\n    spec: &chartspec\n", 1),
			"  values:\n", "  values:\n    installedChart:\n      <<: *chartspec\n", 1),
	} {
		got, err := SetRelease([]byte(in), []byte(tmpl), Vars{TenantID: "t1", ReleaseVersion: "2.0"})
		if !errors.Is(err, ErrNotInPlace) {
			t.Errorf("%s: SetRelease = %v\n%s\nwant ErrNotInPlace", name, err, got)
		}
	}
}

// TestSetReleaseRefusesWhatItCannotSetAlone: the object or its release
// value is there but cannot be set by itself, so the file is left to a
// person (ErrNotInPlace, not ErrNoReleaseField: the object is there).
func TestSetReleaseRefusesWhatItCannotSetAlone(t *testing.T) {
	current := strings.NewReplacer("{TENANT_ID}", "t1", "{RELEASE_VERSION}", "1.0").Replace(tmpl)
	for name, in := range map[string]string{
		"object twice": current + "---\n" + current,
		"key twice":    strings.Replace(current, `version: "1.0.x"`, "version: \"1.0.x\"\n      version: \"1.0.x\"", 1),
		"through an alias": strings.Replace(
			strings.Replace(current, "  chart:\n    spec:\n      version: \"1.0.x\"\n", "  chart: *c\n", 1),
			"  name: t1-premium\n", "  name: t1-premium\n  annotations:\n    chart: &c {spec: {version: 1.0.x}}\n", 1),
		"by a merge key":   strings.Replace(current, "  chart:\n    spec:\n      version: \"1.0.x\"\n", "  <<: {chart: {spec: {version: 1.0.x}}}\n", 1),
		"a list":           strings.Replace(current, `version: "1.0.x"`, `version: ["1.0.x"]`, 1),
		"a block scalar":   strings.Replace(current, `version: "1.0.x"`, "version: |\n        1.0.x", 1),
		"anchor alone":     strings.Replace(current, `version: "1.0.x"`, "version: &v\n        1.0.x", 1),
		"a float for text": strings.Replace(current, `version: "1.0.x"`, "version: 1.0", 1),
	} {
		got, err := SetRelease([]byte(in), []byte(tmpl), Vars{TenantID: "t1", ReleaseVersion: "2.0"})
		if !errors.Is(err, ErrNotInPlace) {
			t.Errorf("%s: SetRelease = %v\n%s\nwant ErrNotInPlace", name, err, got)
		}
	}
}

// TestSameExceptSeesAnyOtherChange: the check SetRelease makes of its own
// result, apart from the reasoning that led to it, sees a change anywhere
// but the values it was told of: a value, a type, an alias moved, a key.
func TestSameExceptSeesAnyOtherChange(t *testing.T) {
	const before = "a: &x 1.0.x\nb: *x\nc: {d: \"1\"}\n---\ne: f\n"
	b, err := parse([]byte(before))
	if err != nil {
		t.Fatal(err)
	}
	set := map[*yaml.Node]string{b[0].Content[0].Content[1]: "2.0.x"}
	for after, ok := range map[string]bool{
		"a: &x 2.0.x\nb: *x\nc: {d: \"1\"}\n---\ne: f\n":      true,
		"a: &x '2.0.x'\nb:   *x\nc: {d: '1'}\n---\ne: f # \n": true,
		"a: &x 1.0.x\nb: *x\nc: {d: \"1\"}\n---\ne: f\n":      false,
		"a: &x 2.0.x\nb: *x\nc: {d: 1}\n---\ne: f\n":          false,
		"a: &x 2.0.x\nb: 2.0.x\nc: {d: \"1\"}\n---\ne: f\n":   false,
		"a: &x 2.0.x\nb: *x\nc: {d: \"1\"}\n---\nE: f\n":      false,
		"a: &x 2.0.x\nb: *x\nc: {d: \"1\"}\n":                 false,
		"a: &y 2.0.x\nb: *y\nc: {d: \"1\"}\n---\ne: f\n":      false,
	} {
		a, err := parse([]byte(after))
		if err != nil {
			t.Fatal(err)
		}
		if err := sameExcept(b, a, set); (err == nil) != ok {
			t.Errorf("sameExcept(%q) = %v, want ok %v", after, err, ok)
		}
	}
}
