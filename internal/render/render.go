// Package render turns tier templates into tenant and environment files by
// plain text substitution, the way the reference's sed does, so every comment
// and Flux image-automation marker survives byte for byte.
package render

import (
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
