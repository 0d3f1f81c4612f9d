// Package gitops knows the layout of the platform's GitOps repository and
// turns a validated request into the file changes that carry it out. It reads
// a snapshot through Reader and never writes: the result is a Change that the
// caller validates, commits and pushes.
package gitops

import (
	"sigs.k8s.io/kustomize/api/konfig"

	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/tenant-worker/tenant-worker/internal/kustomization"
)

// Reader reads one snapshot of the repository. Paths are slash-separated and
// relative to the repository root. Missing paths give an error matching
// fs.ErrNotExist.
type Reader interface {
	ReadFile(name string) ([]byte, error)
	// ReadDir lists the names of the entries of a directory, sorted.
	ReadDir(name string) ([]string, error)
}

// FS adapts an fs.FS (such as os.DirFS) to Reader.
type FS struct{ FS fs.FS }

// ReadFile implements Reader.
func (f FS) ReadFile(name string) ([]byte, error) { return fs.ReadFile(f.FS, name) }

// ReadDir implements Reader.
func (f FS) ReadDir(name string) ([]string, error) {
	entries, err := fs.ReadDir(f.FS, name)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// File names that the layout fixes.
const (
	kustomizationFile = "kustomization.yaml"
	dummyConfigMap    = "dummy-configmap.yaml"
	tenantSuffix      = "_tenant_template.yaml"
	envSuffix         = "_env_template.yaml"
)

// Layout locates the platform's folders below Root (for the reference
// platform "application-plane/production").
type Layout struct {
	Root string
}

// TemplatesDir holds the tier templates.
func (l Layout) TemplatesDir() string { return path.Join(l.Root, "tier-templates") }

// TenantsDir is the kustomization Flux applies for all tenants.
func (l Layout) TenantsDir() string { return path.Join(l.Root, "tenants") }

// PooledEnvsDir is the kustomization Flux applies for shared environments.
func (l Layout) PooledEnvsDir() string { return path.Join(l.Root, "pooled-envs") }

// TierDir holds the tenant files of one tier.
func (l Layout) TierDir(tier string) string { return path.Join(l.TenantsDir(), tier) }

// TenantFile is where a tenant of a tier is written.
func (l Layout) TenantFile(tier, id string) string { return path.Join(l.TierDir(tier), id+".yaml") }

// TierKustomization lists the tenant files of a tier.
func (l Layout) TierKustomization(tier string) string {
	return path.Join(l.TierDir(tier), kustomizationFile)
}

// TenantTemplate renders a tenant file of a tier.
func (l Layout) TenantTemplate(tier string) string {
	return path.Join(l.TemplatesDir(), tier+tenantSuffix)
}

// EnvTemplate renders the pooled environments a tier shares, if it has one.
func (l Layout) EnvTemplate(tier string) string { return path.Join(l.TemplatesDir(), tier+envSuffix) }

// Tiers lists the tiers of the repository: a tier exists when it has a tenant
// template and a kustomization folder.
func (l Layout) Tiers(r Reader) ([]string, error) {
	names, err := r.ReadDir(l.TemplatesDir())
	if err != nil {
		return nil, err
	}
	var tiers []string
	for _, n := range names {
		tier, ok := strings.CutSuffix(n, tenantSuffix)
		if !ok || tier == "" {
			continue
		}
		if _, err := r.ReadFile(l.TierKustomization(tier)); err == nil {
			tiers = append(tiers, tier)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	sort.Strings(tiers)
	return tiers, nil
}

// PooledEnvs lists the ids of the shared environments Flux applies, from the
// entries of pooled-envs/kustomization.yaml.
func (l Layout) PooledEnvs(r Reader) ([]string, error) {
	// The platform does not edit this file: it may have any name kustomize
	// reads.
	var name string
	var content []byte
	for _, n := range konfig.RecognizedKustomizationFileNames() {
		name = path.Join(l.PooledEnvsDir(), n)
		var err error
		if content, err = r.ReadFile(name); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	if content == nil {
		return nil, nil
	}
	entries, err := kustomization.Resources(content)
	if err != nil {
		return nil, formError(name, err)
	}
	var envs []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e, ".yaml"); ok && !strings.Contains(id, "/") {
			envs = append(envs, id)
		}
	}
	return envs, nil
}

// TenantFiles lists the tenant ids with a file in a tier's folder.
func (l Layout) TenantFiles(r Reader, tier string) ([]string, error) {
	names, err := r.ReadDir(l.TierDir(tier))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, n := range names {
		if n == kustomizationFile || n == dummyConfigMap {
			continue
		}
		if id, ok := strings.CutSuffix(n, ".yaml"); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// tenantState says where a tenant stands in one tier.
type tenantState struct {
	file   bool // tenants/<tier>/<id>.yaml exists
	listed bool // listed in tenants/<tier>/kustomization.yaml
}

func (s tenantState) present() bool { return s.file || s.listed }

func (l Layout) tenantIn(r Reader, tier, id string) (tenantState, error) {
	var s tenantState
	_, err := r.ReadFile(l.TenantFile(tier, id))
	switch {
	case err == nil:
		s.file = true
	case !errors.Is(err, fs.ErrNotExist):
		return s, err
	}
	k, err := r.ReadFile(l.TierKustomization(tier))
	if err != nil {
		return s, err
	}
	s.listed, err = kustomization.Contains(k, id+".yaml")
	return s, formError(l.TierKustomization(tier), err)
}

// formError names the file of a kustomization the editor refuses to edit,
// a fault of the repository: no message can pass until someone rewrites it.
func formError(name string, err error) error {
	if kustomization.IsForm(err) {
		return fmt.Errorf("%w: %s: %v", ErrBroken, name, err)
	}
	return err
}

// WalkFiles calls fn for every regular file below dir, in lexical order.
func (f FS) WalkFiles(dir string, fn func(name string, content []byte) error) error {
	return fs.WalkDir(f.FS, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(f.FS, p)
		if err != nil {
			return err
		}
		return fn(p, b)
	})
}
