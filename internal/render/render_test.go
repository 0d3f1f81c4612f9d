package render

import (
	"strings"
	"testing"
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
