// Package inventory reads what the GitOps repository says about tenants:
// the tiers, the tenants of each (and whether their file and kustomization
// entry agree), the chart version each HelmRelease asks for and the image
// tags Flux image automation keeps on the $imagepolicy lines.
package inventory

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/kustomization"
)

// Tenant is one tenant, or one pooled environment.
type Tenant struct {
	ID   string `json:"id"`
	Tier string `json:"tier"`
	// Pool is true for a pooled environment (pooled-envs/), shared by the
	// tenants of a pool tier.
	Pool bool `json:"pool,omitempty"`
	// ChartVersion is the version constraint of the HelmRelease's chart.
	ChartVersion string `json:"chart_version"`
	// Images maps an image policy (producer-image-policy) to its tag.
	Images map[string]string `json:"images"`
	// File and Listed say whether the tenant has a file and an entry in its
	// tier's kustomization; a healthy tenant has both.
	File   bool `json:"file"`
	Listed bool `json:"listed"`
}

// Inventory is everything read.
type Inventory struct {
	Tiers   []string `json:"tiers"`
	Tenants []Tenant `json:"tenants"`
}

var imagePolicy = regexp.MustCompile(`tag:\s*"?([^"\s#]*)"?\s*#\s*\{"\$imagepolicy":\s*"[^":]*:([^":]+):tag"\}`)

// Read reads the inventory under layout l. progress, if not nil, is called
// with the tier being read.
func Read(r gitops.Reader, l gitops.Layout, progress func(tier string, n int)) (Inventory, error) {
	tiers, err := l.Tiers(r)
	if err != nil {
		return Inventory{}, fmt.Errorf("list tiers: %w", err)
	}
	inv := Inventory{Tiers: tiers, Tenants: []Tenant{}}
	for _, tier := range tiers {
		k, err := r.ReadFile(l.TierKustomization(tier))
		if err != nil {
			return inv, err
		}
		entries, err := kustomization.Resources(k)
		if err != nil {
			return inv, fmt.Errorf("%s: %w", l.TierKustomization(tier), err)
		}
		listed := map[string]bool{}
		for _, e := range entries {
			if id, ok := strings.CutSuffix(e, ".yaml"); ok && id != "dummy-configmap" {
				listed[id] = true
			}
		}
		ids, err := l.TenantFiles(r, tier)
		if err != nil {
			return inv, err
		}
		files := map[string]bool{}
		all := make([]string, 0, len(listed))
		for _, id := range ids {
			files[id] = true
			if !listed[id] {
				all = append(all, id) // a file without an entry
			}
		}
		for id := range listed {
			all = append(all, id)
		}
		sort.Strings(all)
		if progress != nil {
			progress(tier, len(all))
		}
		for _, id := range all {
			t := Tenant{ID: id, Tier: tier, File: files[id], Listed: listed[id], Images: map[string]string{}}
			if t.File {
				if err := describe(r, l.TenantFile(tier, id), &t); err != nil {
					return inv, err
				}
			}
			inv.Tenants = append(inv.Tenants, t)
		}
	}
	envs, err := l.PooledEnvs(r)
	if err != nil {
		return inv, fmt.Errorf("list pooled environments: %w", err)
	}
	for _, id := range envs {
		t := Tenant{ID: id, Pool: true, Listed: true, Images: map[string]string{}}
		name := path.Join(l.PooledEnvsDir(), id+".yaml")
		if _, err := r.ReadFile(name); err == nil {
			t.File = true
			if err := describe(r, name, &t); err != nil {
				return inv, err
			}
		}
		inv.Tenants = append(inv.Tenants, t)
	}
	return inv, nil
}

// describe fills the chart version and image tags from a tenant file.
func describe(r gitops.Reader, name string, t *Tenant) error {
	content, err := r.ReadFile(name)
	if err != nil {
		return err
	}
	for _, m := range imagePolicy.FindAllSubmatch(content, -1) {
		t.Images[string(m[2])] = string(m[1])
	}
	rs, err := gitops.HelmReleases(content)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, r := range rs {
		t.ChartVersion = r.Version
	}
	return nil
}
