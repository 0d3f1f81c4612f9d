// Package templates holds the project's own copy of the platform's GitOps
// layout (tier templates, tenant and pooled-env kustomizations), byte for byte
// as the reference repository has it. `make run` seeds its local git server
// from it, and tests use it as the starting tree.
package templates

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"
)

// FS holds application-plane/production/... as in the reference repository.
//
//go:embed all:application-plane
var FS embed.FS

// Root is the GITOPS_ROOT of the embedded tree.
const Root = "application-plane/production"

// Files returns every embedded file by path, for seeding test trees.
func Files() (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(FS, p)
		files[p] = b
		return err
	})
	return files, err
}

// MapFS returns the embedded tree as a writable in-memory file system, a
// starting tree for tests that edit it.
func MapFS() (fstest.MapFS, error) {
	files, err := Files()
	m := fstest.MapFS{}
	for p, b := range files {
		m[p] = &fstest.MapFile{Data: b}
	}
	return m, err
}

// WithTenants returns MapFS with the tenants ids of tier onboarded as the
// reference's scripts onboard them: each file rendered from the tier
// template by plain substitution at release 0.0, and listed in the tier's
// kustomization.
func WithTenants(tier string, ids ...string) (fstest.MapFS, error) {
	m, err := MapFS()
	if err != nil {
		return nil, err
	}
	return m, AddTenants(m, tier, ids...)
}

// AddTenants onboards the tenants ids of tier into m (a tree of MapFS) as
// WithTenants does.
func AddTenants(m fstest.MapFS, tier string, ids ...string) error {
	tmpl, ok := m[Root+"/tier-templates/"+tier+"_tenant_template.yaml"]
	k, listed := m[Root+"/tenants/"+tier+"/kustomization.yaml"]
	if !ok || !listed {
		return fmt.Errorf("no tier %q", tier)
	}
	var list strings.Builder
	list.WriteString(strings.TrimRight(string(k.Data), "\n") + "\n")
	for _, id := range ids {
		m[Root+"/tenants/"+tier+"/"+id+".yaml"] = &fstest.MapFile{
			Data: []byte(strings.NewReplacer("{TENANT_ID}", id, "{RELEASE_VERSION}", "0.0").Replace(string(tmpl.Data)))}
		list.WriteString("  - " + id + ".yaml\n")
	}
	k.Data = []byte(list.String())
	return nil
}
