package gitops

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/tenant-worker/tenant-worker/internal/kustomization"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/render"
)

// Migrate returns the file changes that move every tenant file of every
// tier to where a layout of shards puts it (0: the tier's own folder),
// keeping whether shard folders have Kustomizations of their own, and
// record that layout in LayoutFile. See MigrateTo.
func (l Layout) Migrate(r Reader, shards int) (map[string][]byte, error) {
	from, err := l.Of(r)
	if err != nil {
		return nil, err
	}
	to := from
	to.Shards = shards
	if shards == 0 {
		to.ShardKustomizations = false
	}
	return l.MigrateTo(r, to)
}

// MigrateTo returns the file changes that move every tenant file of every
// tier to where layout to puts it, and record to in LayoutFile. Files move
// byte for byte and keep whether a kustomization lists them, so the
// objects Flux applies are the same before and after: only the paths, and
// with ShardKustomizations the Kustomization applying them, differ. A tier
// whose folder holds what the move cannot carry (a listed file that does
// not exist, a shard folder with files of its own) is refused as
// ErrBroken, naming it, and nothing is returned.
func (l Layout) MigrateTo(r Reader, to Layout) (map[string][]byte, error) {
	if to.Shards < 0 || to.Shards > MaxShards {
		return nil, fmt.Errorf("shards must be 0 (the tier's folder) to %d, not %d", MaxShards, to.Shards)
	}
	if to.Shards == 0 && to.ShardKustomizations {
		return nil, errors.New("shard Kustomizations need shard folders")
	}
	from, err := l.Of(r)
	if err != nil {
		return nil, err
	}
	to.Root = l.Root
	into := !from.ShardKustomizations && to.ShardKustomizations && from.Shards == to.Shards
	outOf := from.ShardKustomizations && !to.ShardKustomizations && from.Shards == to.Shards
	if !into && !outOf && (from.ShardKustomizations || to.ShardKustomizations) && (from.Shards != to.Shards || from.ShardKustomizations != to.ShardKustomizations) {
		// A tenant would move from one Flux Kustomization to another, and
		// the one it leaves prunes what the other has not yet taken over:
		// that needs the Kustomizations handed over in the cluster. Only the
		// ways into and out of Kustomizations per shard folder, with the
		// same folders, are done (with the handover by tenant-worker layout
		// migrate).
		return nil, fmt.Errorf("%w: moving tenants between shard Kustomizations (from %s to %s) needs their handover in the cluster, "+
			"which this version does not do", ErrUnsupported, from.Describe(), to.Describe())
	}
	tiers, err := from.Tiers(r)
	if err != nil {
		return nil, fmt.Errorf("list tiers: %w", err)
	}
	files := map[string][]byte{}
	for _, tier := range tiers {
		if err := from.migrateTier(r, to, tier, files); err != nil {
			return nil, err
		}
	}
	current, err := r.ReadFile(l.LayoutFile())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", l.LayoutFile(), err)
	}
	switch {
	case to.Shards == 0 && current != nil:
		files[l.LayoutFile()] = nil
	case to.Shards > 0 && !bytes.Equal(current, to.LayoutContent()):
		files[l.LayoutFile()] = to.LayoutContent()
	}
	return files, nil
}

// migrateTier moves one tier's tenant files from layout l to layout to.
func (l Layout) migrateTier(r Reader, to Layout, tier string, files map[string][]byte) error {
	tierK := l.TierKustomization(tier)
	content, err := r.ReadFile(tierK)
	if err != nil {
		return fmt.Errorf("read %s: %w", tierK, err)
	}
	listed, err := l.Listed(r, tier)
	if err != nil {
		return formError(tierK, err)
	}
	tenants, err := l.Tenants(r, tier)
	if err != nil {
		return fmt.Errorf("list tenants of tier %s: %w", tier, err)
	}
	tmpl, err := r.ReadFile(l.TenantTemplate(tier))
	if err != nil {
		return fmt.Errorf("read template: %w", err)
	}
	p := planner{Layout: l, r: r}
	// A file of the tier's own folder is a tenant's when it declares what
	// the template renders for its name; anything else there (the tier's
	// shared ConfigMap, files added by hand) stays where it is.
	moving := map[string]Tenant{}
	for _, t := range tenants {
		if path.Dir(t.File) == l.TierDir(tier) {
			c, err := r.ReadFile(t.File)
			if err != nil {
				return fmt.Errorf("read %s: %w", t.File, err)
			}
			if message.ValidateTenantID(t.ID) != nil || !p.renderedFrom(c, tmpl, render.Vars{TenantID: t.ID, ReleaseVersion: "0"}) {
				continue
			}
		}
		if _, twice := moving[t.ID]; twice {
			return fmt.Errorf("%w: tenant %s has two files in tier %s (%s and %s): remove one first",
				ErrBroken, t.ID, tier, moving[t.ID].File, t.File)
		}
		moving[t.ID] = t
	}
	// Every listed tenant must have its file: kustomize refuses the tier
	// otherwise, and the move would hide that.
	for id := range listed {
		if _, ok := moving[id]; ok {
			continue
		}
		if _, err := r.ReadFile(path.Join(l.TierDir(tier), id+".yaml")); err == nil {
			continue // a shared file of the tier listed by name, staying
		}
		return fmt.Errorf("%w: %s lists %s.yaml, which does not exist: fix the tier first", ErrBroken, tier, id)
	}

	// The new lists: the tier's keeps every entry that is not a moving
	// tenant's or a shard folder's; each shard folder lists its tenants.
	moved := map[string]bool{}
	for id := range moving {
		moved[id+".yaml"] = true
	}
	out, _, err := kustomization.Filter(content, func(e string) bool { return !moved[e] && !IsShard(e) })
	if err != nil {
		return formError(tierK, err)
	}
	lists := map[string][]string{} // folder -> tenant entries, for those listed
	ids := make([]string, 0, len(moving))
	for id := range moving {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		t := moving[id]
		dst := to.TenantFile(tier, id)
		if dst != t.File {
			c, err := r.ReadFile(t.File)
			if err != nil {
				return fmt.Errorf("read %s: %w", t.File, err)
			}
			files[t.File], files[dst] = nil, c
		}
		dir := path.Dir(dst)
		if _, ok := lists[dir]; !ok {
			lists[dir] = nil
		}
		if listed[id] {
			lists[dir] = append(lists[dir], id+".yaml")
		}
	}
	var shardDirs []string
	for dir, entries := range lists {
		if dir == l.TierDir(tier) {
			for _, e := range entries {
				if out, _, err = kustomization.Add(out, e); err != nil {
					return formError(tierK, err)
				}
			}
			continue
		}
		shardDirs = append(shardDirs, dir)
		name := path.Join(dir, kustomizationFile)
		if c, err := r.ReadFile(name); err == nil {
			if have, err := kustomization.Resources(c); err == nil && sameSet(have, entries) {
				continue // listed as it is already
			}
		}
		files[name] = ShardKustomization(entries)
	}
	slices.Sort(shardDirs)
	for _, dir := range shardDirs {
		if to.ShardKustomizations {
			break // each is applied by a Kustomization of its own
		}
		if out, _, err = kustomization.Add(out, path.Base(dir)); err != nil {
			return formError(tierK, err)
		}
	}
	if !bytes.Equal(out, content) {
		files[tierK] = out
	}
	// Shard folders left empty go, with their kustomization; one holding
	// anything else is not ours to remove.
	names, err := r.ReadDir(l.TierDir(tier))
	if err != nil {
		return fmt.Errorf("list %s: %w", l.TierDir(tier), err)
	}
	for _, n := range names {
		dir := path.Join(l.TierDir(tier), n)
		if _, target := lists[dir]; !IsShard(n) || target {
			continue
		}
		inside, err := r.ReadDir(dir)
		if err != nil {
			continue // a file named like a shard folder
		}
		for _, f := range inside {
			q := path.Join(dir, f)
			if c, moved := files[q]; f == kustomizationFile || moved && c == nil {
				files[q] = nil
				continue
			}
			return fmt.Errorf("%w: %s holds %s, which is not a tenant file: move it first", ErrBroken, dir, f)
		}
	}
	return nil
}

// ErrUnsupported is a migration this version does not do.
var ErrUnsupported = errors.New("not supported")

// Describe says where l puts tenant files.
func (l Layout) Describe() string {
	switch {
	case l.Shards == 0:
		return "in each tier's folder"
	case l.ShardKustomizations:
		return fmt.Sprintf("in %d shard folders per tier, each applied by a Kustomization of its own", l.Shards)
	}
	return fmt.Sprintf("in %d shard folders per tier", l.Shards)
}

// ShardKustomization is the kustomization of a shard folder listing
// entries.
func ShardKustomization(entries []string) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n")
	if len(entries) == 0 {
		b.WriteString("resources: []\n")
		return []byte(b.String())
	}
	b.WriteString("resources:\n")
	for _, e := range entries {
		b.WriteString("  - " + e + "\n")
	}
	return []byte(b.String())
}

// sameSet reports whether a and b hold the same strings, each once.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	in := make(map[string]bool, len(a))
	for _, s := range a {
		in[s] = true
	}
	for _, s := range b {
		if !in[s] {
			return false
		}
	}
	return len(in) == len(a)
}
