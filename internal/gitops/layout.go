// Package gitops knows the layout of the platform's GitOps repository and
// turns a validated request into the file changes that carry it out. It reads
// a snapshot through Reader and never writes: the result is a Change that the
// caller validates, commits and pushes.
package gitops

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/yaml"

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
	// Shards is how many shard folders each tier's tenant files are spread
	// over, by a stable hash of the tenant id: tenants/<tier>/shard-NN/
	// with a kustomization each, listed by the tier's kustomization. Zero
	// is the platform's own layout, every tenant file in the tier's
	// folder. It is a property of the repository (tenants/layout.yaml,
	// written by `tenant-worker layout migrate`): Of reads it.
	Shards int
	// ShardKustomizations says each shard folder is applied by a Flux
	// Kustomization of its own (of the GitRepository, or of an
	// ExternalArtifact of the folder), not through its tier: the tier's
	// kustomization does not list it, and the folder stays when its last
	// tenant leaves (listing nothing, for its Kustomization to prune).
	ShardKustomizations bool
}

// MaxShards bounds Shards: shard folders are named shard-00 to shard-99.
const MaxShards = 100

// shardPrefix starts the name of every shard folder.
const shardPrefix = "shard-"

// LayoutFile says how the tenant files are laid out (see Layout.Shards).
// No kustomization lists it: Flux never applies it.
func (l Layout) LayoutFile() string { return path.Join(l.TenantsDir(), "layout.yaml") }

// Of returns l with the layout the snapshot r records in LayoutFile: flat
// when there is none. A file that does not say one layout clearly is a
// fault of the repository (ErrBroken): guessing would put tenants where no
// other reader looks for them.
func (l Layout) Of(r interface{ ReadFile(string) ([]byte, error) }) (Layout, error) {
	l.Shards, l.ShardKustomizations = 0, false
	content, err := r.ReadFile(l.LayoutFile())
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("read %s: %w", l.LayoutFile(), err)
	}
	var v struct {
		Shards              *int `json:"shards"`
		ShardKustomizations bool `json:"shardKustomizations"`
	}
	if err := yaml.UnmarshalStrict(content, &v); err != nil {
		return l, fmt.Errorf("%w: %s: want the fields shards and shardKustomizations: %v", ErrBroken, l.LayoutFile(), err)
	}
	if v.Shards == nil || *v.Shards < 1 || *v.Shards > MaxShards {
		return l, fmt.Errorf("%w: %s: shards must be 1 to %d", ErrBroken, l.LayoutFile(), MaxShards)
	}
	l.Shards, l.ShardKustomizations = *v.Shards, v.ShardKustomizations
	return l, nil
}

// LayoutContent is the layout file of l (Shards at least 1).
func (l Layout) LayoutContent() []byte {
	b := []byte("# Written by `tenant-worker layout migrate`: each tier's tenant files are in\n" +
		"# shard-NN/ folders, NN the FNV-1a hash of the tenant id modulo shards.\n" +
		"# Change it only with that command, which moves the files too.\n" +
		"shards: " + strconv.Itoa(l.Shards) + "\n")
	if l.ShardKustomizations {
		b = append(b, "# Each shard folder is applied by a Kustomization of its own.\nshardKustomizations: true\n"...)
	}
	return b
}

// Shard is the shard folder of tenant id ("" in the flat layout).
func (l Layout) Shard(id string) string {
	if l.Shards <= 0 {
		return ""
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return fmt.Sprintf("%s%02d", shardPrefix, h.Sum32()%uint32(l.Shards))
}

// IsShard reports whether a folder name is a shard folder's.
func IsShard(name string) bool {
	n, ok := strings.CutPrefix(name, shardPrefix)
	if !ok || len(n) != 2 {
		return false
	}
	_, err := strconv.Atoi(n)
	return err == nil && n[0] != '-' && n[0] != '+'
}

// ShardOf returns the tier and shard folder a file under the tenants
// folder is in; false for a file in no shard folder.
func (l Layout) ShardOf(p string) (tier, shard string, ok bool) {
	rel, in := strings.CutPrefix(p, l.TenantsDir()+"/")
	parts := strings.Split(rel, "/")
	if !in || len(parts) < 3 || !IsShard(parts[1]) {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// ShardDirs lists the shard folders of a tier.
func (l Layout) ShardDirs(r Reader, tier string) []string {
	names, _ := r.ReadDir(l.TierDir(tier))
	var out []string
	for _, n := range names {
		if IsShard(n) {
			if _, err := r.ReadDir(path.Join(l.TierDir(tier), n)); err == nil {
				out = append(out, path.Join(l.TierDir(tier), n))
			}
		}
	}
	return out
}

// TenantDir is the folder of tenant id's file and of the kustomization
// that lists it.
func (l Layout) TenantDir(tier, id string) string {
	return path.Join(l.TierDir(tier), l.Shard(id))
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
func (l Layout) TenantFile(tier, id string) string {
	return path.Join(l.TenantDir(tier, id), id+".yaml")
}

// TenantPaths reports whether p is where the tenant's file may be: its
// place in this layout, or, sharded, in the tier's own folder (a tenant
// written there before the migration, or by hand, is still that tenant).
func (l Layout) TenantPaths(tier, id string) func(p string) bool {
	places := l.TenantFilePlaces(tier, id)
	return func(p string) bool { return slices.Contains(places, p) }
}

// TenantFilePlaces are where tenant id's file may be, its place in this
// layout first: sharded, the tier's own folder too.
func (l Layout) TenantFilePlaces(tier, id string) []string {
	at := l.TenantFile(tier, id)
	if flat := path.Join(l.TierDir(tier), id+".yaml"); flat != at {
		return []string{at, flat}
	}
	return []string{at}
}

// InTier reports whether p is a file of a tier's folder or of one of its
// shard folders: where a deployment of the tier rewrites files.
func (l Layout) InTier(tier, p string) bool {
	rest, ok := strings.CutPrefix(p, l.TierDir(tier)+"/")
	if !ok {
		return false
	}
	dir, _, nested := strings.Cut(rest, "/")
	return !nested || IsShard(dir) && !strings.Contains(rest[len(dir)+1:], "/")
}

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

// Tenant is a tenant file of a tier: the tenant's id and the file's path.
type Tenant struct {
	ID, File string
}

// Tenants lists the tenant files of a tier: those in its folder and in its
// shard folders, whatever the layout (a file is where it was written).
func (l Layout) Tenants(r Reader, tier string) ([]Tenant, error) {
	var out []Tenant
	var walk func(dir string, top bool) error
	walk = func(dir string, top bool) error {
		names, err := r.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, n := range names {
			if n == kustomizationFile || n == dummyConfigMap {
				continue
			}
			if id, ok := strings.CutSuffix(n, ".yaml"); ok {
				out = append(out, Tenant{ID: id, File: path.Join(dir, n)})
			} else if top && IsShard(n) {
				if err := walk(path.Join(dir, n), false); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(l.TierDir(tier), true)
}

// Listed returns the ids of the tenant files a tier's kustomization lists,
// and those the kustomizations of the shard folders it lists list.
func (l Layout) Listed(r Reader, tier string) (map[string]bool, error) {
	out := map[string]bool{}
	var read func(dir string, top bool) error
	read = func(dir string, top bool) error {
		name := path.Join(dir, kustomizationFile)
		k, err := r.ReadFile(name)
		if err != nil {
			return err
		}
		entries, err := kustomization.Resources(k)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, e := range entries {
			if id, ok := strings.CutSuffix(e, ".yaml"); ok && e != dummyConfigMap {
				out[id] = true
			} else if top && IsShard(e) && !l.ShardKustomizations {
				if err := read(path.Join(dir, e), false); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := read(l.TierDir(tier), true); err != nil {
		return out, err
	}
	if l.ShardKustomizations { // each shard's list is read by its own Kustomization
		for _, dir := range l.ShardDirs(r, tier) {
			if err := read(dir, false); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// tenantState says where a tenant stands in one tier.
type tenantState struct {
	dir    string // the folder it is in, or goes to
	file   bool   // <dir>/<id>.yaml exists
	listed bool   // listed in <dir>/kustomization.yaml
}

func (s tenantState) present() bool { return s.file || s.listed }

// tenantIn finds a tenant in a tier: in its place in the layout or,
// sharded, in the tier's own folder.
func (l Layout) tenantIn(r Reader, tier, id string) (tenantState, error) {
	s, err := l.tenantAt(r, l.TenantDir(tier, id), id, l.Shards > 0)
	if err != nil || s.present() || l.Shards == 0 {
		return s, err
	}
	flat, err := l.tenantAt(r, l.TierDir(tier), id, false)
	if err != nil || !flat.present() {
		return s, err
	}
	return flat, nil
}

// tenantAt finds a tenant in one folder; a shard folder may not exist yet.
func (l Layout) tenantAt(r Reader, dir, id string, shard bool) (tenantState, error) {
	s := tenantState{dir: dir}
	_, err := r.ReadFile(path.Join(dir, id+".yaml"))
	switch {
	case err == nil:
		s.file = true
	case !errors.Is(err, fs.ErrNotExist):
		return s, err
	}
	name := path.Join(dir, kustomizationFile)
	k, err := r.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) && shard {
		// A shard folder not made yet, or one whose kustomization has
		// another name kustomize reads, which the worker does not edit:
		// a second one beside it would break the folder.
		names, _ := r.ReadDir(dir) // none: the folder is not made yet
		for _, n := range names {
			if slices.Contains(konfig.RecognizedKustomizationFileNames(), n) {
				return s, fmt.Errorf("%w: %s: a shard folder's kustomization must be named %s", ErrBroken, path.Join(dir, n), kustomizationFile)
			}
		}
		return s, nil
	}
	if err != nil {
		return s, err
	}
	s.listed, err = kustomization.Contains(k, id+".yaml")
	return s, formError(name, err)
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
