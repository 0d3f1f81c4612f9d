package gitops

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Release is a HelmRelease a change touches, as Flux will see it.
type Release struct {
	// Path is the file that declares it.
	Path string `json:"path"`
	// Namespace and Name identify the HelmRelease object.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Version is the chart version (or range) the file asks for; empty
	// when it asks for none.
	Version string `json:"version,omitempty"`
	// Gone: the change removes the HelmRelease.
	Gone bool `json:"gone,omitempty"`
}

// Releases lists the HelmReleases that files (path to new content, nil for
// a deleted file) change under the tenants and pooled-envs folders, reading
// deleted files from before. Kustomizations and the ledger are skipped: they
// declare no release.
func (l Layout) Releases(before Reader, files map[string][]byte) []Release {
	var out []Release
	for _, p := range sortedKeys(files) {
		if !l.appliedByFlux(p) {
			continue
		}
		content, gone := files[p], files[p] == nil
		if gone {
			old, err := before.ReadFile(p)
			if err != nil {
				continue
			}
			content = old
		}
		rs, _ := HelmReleases(content) // what does not decode, validation has judged
		for _, r := range rs {
			r.Path, r.Gone = p, gone
			out = append(out, r)
		}
	}
	return out
}

// Touches reports whether files change anything under the folders Flux
// applies (tenants and pooled environments), not only the ledger.
func (l Layout) Touches(files map[string][]byte) bool {
	for p := range files {
		for _, dir := range []string{l.TenantsDir(), l.PooledEnvsDir()} {
			if strings.HasPrefix(p, dir+"/") {
				return true
			}
		}
	}
	return false
}

// AppliedDirs lists the folders Flux applies (tenants, pooled-envs) that
// the changed paths touch, in that order.
// With ShardKustomizations, each shard folder is a folder of its own
// (after the tenants folder, in the order of changed).
func (l Layout) AppliedDirs(changed []string) []string {
	var out []string
	for _, dir := range []string{l.TenantsDir(), l.PooledEnvsDir()} {
		for _, p := range changed {
			if strings.HasPrefix(p, dir+"/") && l.shardOf(p) == "" {
				out = append(out, dir)
				break
			}
		}
	}
	for _, p := range changed {
		if dir := l.shardOf(p); dir != "" && !slices.Contains(out, dir) {
			out = append(out, dir)
		}
	}
	return out
}

// shardOf is the shard folder holding p when shard folders are applied by
// Kustomizations of their own, else "".
func (l Layout) shardOf(p string) string {
	rest, ok := strings.CutPrefix(p, l.TenantsDir()+"/")
	if !l.ShardKustomizations || !ok {
		return ""
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 3 || !IsShard(parts[1]) {
		return ""
	}
	return path.Join(l.TenantsDir(), parts[0], parts[1])
}

// appliedByFlux reports whether p is a manifest of a folder Flux applies.
func (l Layout) appliedByFlux(p string) bool {
	if !strings.HasSuffix(p, ".yaml") || path.Base(p) == "kustomization.yaml" {
		return false
	}
	for _, dir := range []string{l.TenantsDir(), l.PooledEnvsDir()} {
		if strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	return false
}

// HelmReleases decodes the HelmRelease documents of a manifest (Path and
// Gone left unset). On a document that does not decode it returns those
// before it and the error.
func HelmReleases(content []byte) ([]Release, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(content), 4096)
	var out []Release
	for {
		var doc struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Spec struct {
				Chart struct {
					Spec struct {
						Version string `json:"version"`
					} `json:"spec"`
				} `json:"chart"`
			} `json:"spec"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if doc.Kind == "HelmRelease" && doc.Metadata.Name != "" {
			out = append(out, Release{Namespace: doc.Metadata.Namespace, Name: doc.Metadata.Name, Version: doc.Spec.Chart.Spec.Version})
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TypeRef is an apiVersion and kind a manifest uses.
type TypeRef struct {
	APIVersion, Kind string
	// File is the first file that uses it.
	File string
}

var placeholder = regexp.MustCompile(`\{[A-Z][A-Z0-9_]*\}`)

// Types lists the apiVersions and kinds the tier templates and pooled
// environments declare, each once: what Flux will ask the cluster to
// serve for every tenant.
func (l Layout) Types(r Reader) ([]TypeRef, error) {
	var files []string
	for _, dir := range []string{l.TemplatesDir(), l.PooledEnvsDir()} {
		names, err := r.ReadDir(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("list %s: %w", dir, err)
		}
		for _, n := range names {
			if strings.HasSuffix(n, ".yaml") && n != "kustomization.yaml" {
				files = append(files, path.Join(dir, n))
			}
		}
	}
	seen := map[string]bool{}
	var out []TypeRef
	for _, f := range files {
		b, err := r.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		// Placeholders such as {TENANT_ID} are not YAML: fill them first.
		b = placeholder.ReplaceAll(b, []byte("probe"))
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var doc struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := dec.Decode(&doc); err != nil {
				break // the end, or a template that only renders as YAML: validation judges it
			}
			key := doc.APIVersion + " " + doc.Kind
			if doc.Kind == "" || doc.APIVersion == "" || seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, TypeRef{APIVersion: doc.APIVersion, Kind: doc.Kind, File: f})
		}
	}
	return out, nil
}
