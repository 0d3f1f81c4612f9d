package publish

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// A tenant moved to another tier in one commit (the offboarding and the
// onboarding of a move) leaves one shard folder and enters another, and
// both tiers' templates declare its Namespace: two Kustomizations, in no
// order of their own, one giving up the Namespace, one taking it. Flux
// prunes only objects that carry the pruning Kustomization's name, and an
// apply writes its own name on them: so the folder that takes an object
// is published first, and the folder that gives it up waits until the
// taker's Kustomization has applied it. Applied the other way round, the
// giver would prune the Namespace and everything in it, to be made again
// empty by the taker.

// maxMoveHold bounds how long a folder that gives objects up waits for
// the folder taking them to be applied: long enough for an apply of a
// shard folder and its new Kustomization's first, short enough that a
// taker that fails to apply does not hold the giver's other changes for
// good. Past it the giver is written, as it was before moves were ordered.
const maxMoveHold = 10 * time.Minute

// takers lists, for each folder of the chain's last commit that gives up
// an object another of its changed folders takes (compared with the
// chain's first commit), those folders. Nothing without a complete chain
// of at least two commits: then what moved is not known.
func takers(h History, dirs []string) (map[string][]string, error) {
	if !h.Complete || len(h.Chain) < 2 {
		return nil, nil
	}
	first, last := h.Chain[0], h.Chain[len(h.Chain)-1]
	gone := map[string][]string{} // folder -> objects it no longer builds
	came := map[string]string{}   // object -> folder that now builds it
	for _, dir := range dirs {
		if !h.changed(dir) {
			continue
		}
		was, err := folderObjects(first, dir)
		if err != nil {
			return nil, err
		}
		now, err := folderObjects(last, dir)
		if err != nil {
			return nil, err
		}
		for o := range was {
			if !now[o] {
				gone[dir] = append(gone[dir], o)
			}
		}
		for o := range now {
			if !was[o] {
				came[o] = dir
			}
		}
	}
	out := map[string][]string{}
	for dir, objs := range gone {
		for _, o := range objs {
			if to, ok := came[o]; ok && to != dir && !slices.Contains(out[dir], to) {
				out[dir] = append(out[dir], to)
			}
		}
	}
	return out, nil
}

// folderObjects are the objects (kind, namespace and name) the files of a
// folder declare; none when the folder does not exist.
func folderObjects(src Source, dir string) (map[string]bool, error) {
	files, _, err := src.Entries(dir)
	out := map[string]bool{}
	if err != nil {
		return out, nil // not there on this side
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if name == "kustomization.yaml" || path.Ext(name) != ".yaml" {
			continue
		}
		content, err := src.ReadBlob(files[name])
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path.Join(dir, name), err)
		}
		for _, doc := range gitops.Documents(content) {
			var obj struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if yaml.Unmarshal([]byte(doc), &obj) != nil || obj.Kind == "" {
				continue // the build's to judge
			}
			out[obj.Kind+" "+obj.Metadata.Namespace+"/"+obj.Metadata.Name] = true
		}
	}
	return out, nil
}

// taken reports whether the Kustomization of every folder in to has
// applied what its ExternalArtifact holds now: the objects the giver
// gives up carry its name. When one has not, the giver is held (see
// Waiting) and ErrApplying returned.
func (p *Publisher) taken(ctx context.Context, giver *change, to []string) error {
	// Read now, not from the publish's view: the taker was written by
	// this very publish.
	get := func(gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
		return p.o.Client.Resource(gvr).Namespace(p.o.Namespace).Get(ctx, name, metav1.GetOptions{})
	}
	for _, dir := range to {
		tier, shard := path.Base(path.Dir(dir)), path.Base(dir)
		name := Name(tier, shard)
		obj, err := get(flux.ExternalArtifacts, name)
		rev := ""
		if err == nil {
			rev, _, _ = unstructured.NestedString(obj.Object, "status", "artifact", "revision")
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("publish %s: read %s: %w", giver.f.Name, name, err)
		}
		k, err := get(flux.Kustomizations, name)
		applied := ""
		if err == nil {
			applied, _, _ = unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("publish %s: read the Kustomization %s: %w", giver.f.Name, name, err)
		}
		if rev != "" && applied == rev {
			continue
		}
		now := p.now()
		p.mu.Lock()
		h, held := p.holding[giver.dir]
		if !held || !h.move || h.name != name || h.rev != rev {
			h = hold{name: name, rev: rev, since: now, move: true}
		}
		p.holding[giver.dir] = h
		p.mu.Unlock()
		if now.Sub(h.since) >= maxMoveHold {
			continue // waited long enough: written as before
		}
		return fmt.Errorf("publish %s: %w: %s takes some of its objects and has not applied them yet", giver.f.Name, ErrApplying, name)
	}
	return nil
}
