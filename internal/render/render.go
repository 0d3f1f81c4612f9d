// Package render turns tier templates into tenant and environment files by
// plain text substitution, the way the reference's sed does, so every comment
// and Flux image-automation marker survives byte for byte.
package render

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// Placeholders of the reference templates.
const (
	TenantID       = "{TENANT_ID}"
	ReleaseVersion = "{RELEASE_VERSION}"
	EnvironmentID  = "{ENVIRONMENT_ID}"
)

// Vars are the values substituted into a template.
type Vars struct {
	TenantID       string
	ReleaseVersion string
	EnvironmentID  string
}

var leftover = regexp.MustCompile(`\{[A-Z][A-Z0-9_]*\}`)

// Render substitutes every placeholder in tmpl. A placeholder that Vars does
// not fill is an error: a half-rendered file must never reach the repository.
func Render(tmpl []byte, v Vars) ([]byte, error) {
	var pairs []string
	for _, p := range []struct{ name, value string }{
		{TenantID, v.TenantID}, {ReleaseVersion, v.ReleaseVersion}, {EnvironmentID, v.EnvironmentID},
	} {
		if p.value != "" {
			pairs = append(pairs, p.name, p.value)
		}
	}
	out := []byte(strings.NewReplacer(pairs...).Replace(string(tmpl)))
	for _, loc := range leftover.FindAllIndex(out, -1) {
		// ${NAME} is Flux's post-build substitution, filled in the cluster
		// (the platform's tenants Kustomization enables it): not ours.
		if loc[0] > 0 && out[loc[0]-1] == '$' {
			continue
		}
		return nil, fmt.Errorf("template placeholder %s has no value", out[loc[0]:loc[1]])
	}
	return out, nil
}

// marker matches a line whose value Flux image automation owns:
//
//	tag: "0.1" # {"$imagepolicy": "flux-system:producer-image-policy:tag"}
var marker = regexp.MustCompile(`^(\s*[^\s:#][^:#]*:[ \t]*)(.*?)([ \t]*#[ \t]*(\{"\$imagepolicy":[^}]*\})[ \t]*)$`)

// KeepImagePolicies returns rendered with the value of every image-policy
// marker line taken from current, so re-rendering a file does not reset the
// image tags that Flux image automation has set. Lines are matched by marker
// text and by occurrence, so two lines with the same marker keep their order.
func KeepImagePolicies(rendered, current []byte) []byte {
	values := map[string][]string{}
	for _, line := range bytes.Split(current, []byte("\n")) {
		if m := marker.FindSubmatch(bytes.TrimRight(line, "\r")); m != nil {
			key := string(m[4])
			values[key] = append(values[key], string(m[2]))
		}
	}
	if len(values) == 0 {
		return rendered
	}
	lines := bytes.Split(rendered, []byte("\n"))
	for i, line := range lines {
		body := bytes.TrimRight(line, "\r")
		m := marker.FindSubmatch(body)
		if m == nil {
			continue
		}
		key := string(m[4])
		if len(values[key]) == 0 {
			continue
		}
		value := values[key][0]
		values[key] = values[key][1:]
		var b bytes.Buffer
		b.Write(m[1])
		b.WriteString(value)
		b.Write(m[3])
		b.Write(line[len(body):])
		lines[i] = b.Bytes()
	}
	return bytes.Join(lines, []byte("\n"))
}
