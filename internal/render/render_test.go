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

func TestKeepImagePolicies(t *testing.T) {
	current := strings.Replace(tmpl, `tag: "0.1" # {"$imagepolicy": "flux-system:consumer`, `tag: "0.7.3" # {"$imagepolicy": "flux-system:consumer`, 1)
	current = strings.Replace(current, `tag: "0.1" # {"$imagepolicy": "flux-system:producer`, `tag: 0.5 # {"$imagepolicy": "flux-system:producer`, 1)
	rendered, err := Render([]byte(strings.ReplaceAll(tmpl, "{RELEASE_VERSION}", "2.0")), Vars{TenantID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	got := string(KeepImagePolicies(rendered, []byte(current)))
	for _, want := range []string{
		`tag: "0.7.3" # {"$imagepolicy": "flux-system:consumer-image-policy:tag"}`,
		`tag: 0.5 # {"$imagepolicy": "flux-system:producer-image-policy:tag"}`,
		`version: "2.0.x"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("result lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n"); n != strings.Count(tmpl, "\n") {
		t.Errorf("line count changed: %d", n)
	}
	// A file without markers leaves the rendering untouched.
	if got := KeepImagePolicies(rendered, []byte("kind: X\n")); string(got) != string(rendered) {
		t.Error("no markers in current: rendering changed")
	}
}
