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

	"github.com/tenant-worker/tenant-worker/internal/gitops"
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
	l, err := l.Of(r)
	if err != nil {
		return Inventory{}, err
	}
	tiers, err := l.Tiers(r)
	if err != nil {
		return Inventory{}, fmt.Errorf("list tiers: %w", err)
	}
	inv := Inventory{Tiers: tiers, Tenants: []Tenant{}}
	for _, tier := range tiers {
		listed, err := l.Listed(r, tier)
		if err != nil {
			return inv, err
		}
		tenants, err := l.Tenants(r, tier)
		if err != nil {
			return inv, err
		}
		files := map[string]string{}
		all := make([]string, 0, len(listed))
		for _, t := range tenants {
			files[t.ID] = t.File
			if !listed[t.ID] {
				all = append(all, t.ID) // a file without an entry
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
			t := Tenant{ID: id, Tier: tier, File: files[id] != "", Listed: listed[id], Images: map[string]string{}}
			if t.File {
				if err := describe(r, files[id], &t); err != nil {
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
