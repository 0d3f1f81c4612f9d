// Package validate checks a changed tree the way Flux will read it: the
// tenants and pooled-envs kustomizations must build, and every HelmRelease in
// a changed file must decode strictly into Flux's own API type.
package validate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	helmv2beta1 "github.com/fluxcd/helm-controller/api/v2beta1"
	helmv2beta2 "github.com/fluxcd/helm-controller/api/v2beta2"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// Source is a snapshot of the repository that can be walked.
type Source interface {
	gitops.Reader
	// WalkFiles calls fn for every file below dir.
	WalkFiles(dir string, fn func(name string, content []byte) error) error
}

// Hasher is a Source that can name a directory's contents by hash (a git
// tree hash). Builds of such sources are cached: a directory that did not
// change since it was last built is not built again.
type Hasher interface {
	DirHash(dir string) (string, error)
}

// maxReleaseName is Helm's limit on release names.
const maxReleaseName = 53

// cacheSize bounds the build results kept.
const cacheSize = 256

// Checker validates changes for one repository layout. It is safe for
// concurrent use.
type Checker struct {
	layout gitops.Layout

	mu    sync.Mutex
	built map[string]error // dir@hash -> build result
	order []string
	ids   ids
	dups  map[string]*dupIndex // by folder
}

// NewChecker returns a Checker for layout.
func NewChecker(layout gitops.Layout) *Checker {
	return &Checker{layout: layout, built: map[string]error{}}
}

// Check runs CheckFiles and CheckDirs.
func (c *Checker) Check(src Source, changed []string) error {
	return errors.Join(c.CheckFiles(src, changed), c.CheckDirs(src, changed))
}

// CheckDirs builds the kustomizations (tenants/, pooled-envs/) that changed
// touches (paths relative to the repository root).
// With shard folders applied by Kustomizations of their own, each is built
// on its own, as its Kustomization builds it.
func (c *Checker) CheckDirs(src Source, changed []string) error {
	l, err := c.layout.Of(src)
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range l.AppliedDirs(changed) {
		errs = append(errs, c.build(src, dir, changed))
	}
	return errors.Join(errs...)
}

// CheckFiles decodes the HelmReleases of the changed files strictly.
func (c *Checker) CheckFiles(src Source, changed []string) error {
	var errs []error
	for _, name := range changed {
		if !strings.HasSuffix(name, ".yaml") || path.Base(name) == "kustomization.yaml" {
			continue
		}
		content, err := src.ReadFile(name)
		if err != nil {
			continue // deleted
		}
		if err := HelmReleases(content); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (c *Checker) build(src Source, dir string, changed []string) error {
	h, ok := src.(Hasher)
	if !ok {
		return c.buildUncached(src, dir, changed)
	}
	hash, err := h.DirHash(dir)
	if err != nil {
		return fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	// A large tree's check builds a copy pruned to the changed paths: its
	// verdict holds for those paths on that tree.
	sum := sha256.Sum256([]byte(strings.Join(changed, "\n")))
	key := dir + "@" + hash + "@" + hex.EncodeToString(sum[:8])
	c.mu.Lock()
	res, hit := c.built[key]
	c.mu.Unlock()
	if hit {
		return res
	}
	res = c.buildUncached(src, dir, changed)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.built[key]; !ok {
		c.built[key] = res
		c.order = append(c.order, key)
		if len(c.order) > cacheSize {
			delete(c.built, c.order[0])
			c.order = c.order[1:]
		}
	}
	return res
}

// buildUncached runs kustomize over the whole tree when it is small, and
// the scalable check (buildLarge) when it is large.
func (c *Checker) buildUncached(src Source, dir string, changed []string) error {
	if ix, ok := src.(Indexer); ok {
		var files []resourceFile
		var kusts []string
		plain := true
		err := collect(ix, dir, &files, &kusts, &plain)
		switch {
		case errors.Is(err, errUnsupported):
			// a layout the scalable check cannot follow: kustomize decides
		case err != nil:
			return fmt.Errorf("kustomize build %s: %w", dir, err)
		case len(files) > fullBuildLimit:
			return c.buildLarge(ix, dir, changed, files, kusts, plain)
		}
	}
	return Build(src, dir)
}

// Build runs `kustomize build dir` in memory over the files below dir.
func Build(src Source, dir string) error {
	fsys := filesys.MakeFsInMemory()
	err := src.WalkFiles(dir, func(name string, content []byte) error {
		return fsys.WriteFile("/"+name, content)
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	if _, err := k.Run(fsys, "/"+dir); err != nil {
		return fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return nil
}

// HelmReleases decodes every HelmRelease document in content strictly into
// the helm-controller type of its apiVersion.
func HelmReleases(content []byte) error {
	for i, doc := range gitops.Documents(content) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return fmt.Errorf("document %d: %w", i+1, err)
		}
		if strings.HasSuffix(meta.Kind, "List") {
			// kustomize applies a list's items: each HelmRelease among them
			// is checked as a document of its own.
			if err := listedHelmReleases([]byte(doc)); err != nil {
				return fmt.Errorf("document %d (%s): %w", i+1, meta.Kind, err)
			}
			continue
		}
		if meta.Kind != "HelmRelease" {
			continue
		}
		if err := checkHelmRelease(meta.APIVersion, []byte(doc)); err != nil {
			return fmt.Errorf("document %d (HelmRelease %s): %w", i+1, meta.APIVersion, err)
		}
	}
	return nil
}

func checkHelmRelease(apiVersion string, doc []byte) error {
	body, err := withoutSubstitutions(doc)
	if err != nil {
		return err
	}
	return helmRelease(apiVersion, body)
}

// listedHelmReleases checks the HelmReleases among a list's items.
func listedHelmReleases(doc []byte) error {
	var body map[string]any
	if err := yaml.Unmarshal(doc, &body); err != nil {
		return err
	}
	for j, item := range gitops.Expand(body) {
		if kind, _ := item["kind"].(string); kind != "HelmRelease" {
			continue
		}
		apiVersion, _ := item["apiVersion"].(string)
		js, err := json.Marshal(item)
		if err != nil {
			return err
		}
		if err := checkHelmRelease(apiVersion, js); err != nil {
			return fmt.Errorf("item %d (HelmRelease %s): %w", j+1, apiVersion, err)
		}
	}
	return nil
}

// withoutSubstitutions leaves out of doc every value that holds a Flux
// post-build substitution (${VAR}, filled in the cluster from ConfigMaps the
// platform owns): its type is known only once Flux fills it, so it is
// Flux's to check. Names keep a stand-in of the same length.
func withoutSubstitutions(doc []byte) ([]byte, error) {
	if !bytes.Contains(doc, []byte("${")) {
		return doc, nil
	}
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	var prune func(v any) any
	prune = func(v any) any {
		switch t := v.(type) {
		case map[string]any:
			for k, x := range t {
				if s, ok := x.(string); ok && strings.Contains(s, "${") {
					if k == "name" || k == "releaseName" {
						t[k] = strings.Repeat("x", len(s))
					} else {
						delete(t, k)
					}
					continue
				}
				t[k] = prune(x)
			}
		case []any:
			out := t[:0]
			for _, x := range t {
				if s, ok := x.(string); ok && strings.Contains(s, "${") {
					continue
				}
				out = append(out, prune(x))
			}
			return out
		}
		return v
	}
	return yaml.Marshal(prune(v))
}

func helmRelease(apiVersion string, doc []byte) error {
	var name, releaseName string
	switch apiVersion {
	case helmv2.GroupVersion.String():
		var hr helmv2.HelmRelease
		if err := yaml.UnmarshalStrict(doc, &hr); err != nil {
			return err
		}
		name, releaseName = hr.Name, hr.GetReleaseName()
	case helmv2beta2.GroupVersion.String():
		var hr helmv2beta2.HelmRelease
		if err := yaml.UnmarshalStrict(doc, &hr); err != nil {
			return err
		}
		name, releaseName = hr.Name, hr.GetReleaseName()
	case helmv2beta1.GroupVersion.String():
		var hr helmv2beta1.HelmRelease
		if err := yaml.UnmarshalStrict(doc, &hr); err != nil {
			return err
		}
		name, releaseName = hr.Name, hr.GetReleaseName()
	default:
		return fmt.Errorf("unknown apiVersion %q", apiVersion)
	}
	switch {
	case name == "":
		return errors.New("metadata.name is empty")
	case len(releaseName) > maxReleaseName:
		return fmt.Errorf("release name %q is longer than %d characters", releaseName, maxReleaseName)
	}
	return nil
}
