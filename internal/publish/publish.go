// Package publish keeps one ExternalArtifact per shard folder of the
// branch (issue 21): it serves each folder's archive over HTTP and writes
// the object's status to point at it, so that Flux's kustomize-controller,
// for a Kustomization whose source is that ExternalArtifact, fetches and
// applies one folder, and only when that folder changed. Nothing in Flux
// owns ExternalArtifact objects; the worker, which knows the commit each
// folder came from, is their producer.
package publish

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/tenant-worker/tenant-worker/internal/artifact"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// OriginRevision is the artifact metadata key kustomize-controller copies
// into a Kustomization's status.lastAppliedOriginRevision: the commit the
// applied folder came from.
const OriginRevision = "org.opencontainers.image.revision"

// Source is a snapshot of the branch (a git snapshot is one).
type Source interface {
	gitops.Reader
	artifact.Source
	DirHash(dir string) (string, error)
}

// Options configure a Publisher.
type Options struct {
	Layout gitops.Layout
	// Namespace holds the ExternalArtifact objects (Flux's, flux-system).
	Namespace string
	// URL is where kustomize-controller reaches this Publisher's handler
	// (the worker's Service); archives are at URL/<digest hex>.tar.gz.
	URL string
	// Client writes the objects.
	Client dynamic.Interface
	// Branch names the branch in the origin revision ("main@sha1:<commit>").
	Branch string
	// Template names the Kustomization (the one applying the tenants
	// folder) whose settings each shard's Kustomization takes: interval,
	// prune, timeout, post-build substitutions, service account.
	Template string
	// Interval, when set, is the interval of each Kustomization made
	// instead of the template's: how often it applies its folder again
	// with nothing changed. A change reaches it through its
	// ExternalArtifact at once, whatever the interval; what the interval
	// costs is every tenant applied again once per interval, in whatever
	// number of Kustomizations they are.
	Interval time.Duration
	// At, if set, calls fn with the snapshot of a commit (fetched if this
	// replica does not have it yet): an archive another replica published
	// is built again on request, so that any replica behind a Service
	// serves any URL (the bytes depend on the folder alone).
	At func(ctx context.Context, commit string, fn func(Source) error) error
}

// Publisher serves the archives and writes the objects. It is safe for
// concurrent use.
type Publisher struct {
	o Options

	mu sync.Mutex
	// served holds each folder's current archive and the one before (a
	// controller may still be fetching it), by file name.
	served map[string][]byte
	// byName is, per object, the file names it pointed at, newest last.
	byName map[string][]string
	// trees is the tree id each folder was last published from.
	trees map[string]string
	// applied are the Kustomizations seen to exist.
	applied map[string]bool
}

// New returns a Publisher.
func New(o Options) *Publisher {
	return &Publisher{o: o, served: map[string][]byte{}, byName: map[string][]string{}, trees: map[string]string{}, applied: map[string]bool{}}
}

// BuildWith sets Options.At; call it before serving.
func (p *Publisher) BuildWith(at func(ctx context.Context, commit string, fn func(Source) error) error) {
	p.o.At = at
}

// Forget drops what the Publisher remembers of the cluster (which tree
// each folder was published from, which Kustomizations exist), so that
// the next Publish reads every object again and makes any that is missing
// or points elsewhere: one deleted by hand, by a migration back, or
// written by another replica. The archives served are kept.
func (p *Publisher) Forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.trees)
	clear(p.applied)
}

// Name is the ExternalArtifact of a tier's shard folder.
func Name(tier, shard string) string { return "tenants-" + tier + "-" + shard }

// ServeHTTP serves GET /<commit>/<tier>/<shard>/<digest hex>.tar.gz: an
// archive this replica published, or, with Options.At, one it builds again
// from that commit's folder, served only when its digest is the one named.
func (p *Publisher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	key := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	p.mu.Lock()
	data, ok := p.served[key]
	p.mu.Unlock()
	if !ok && p.o.At != nil { // set before the handler serves (BuildWith)
		data, ok = p.rebuild(r.Context(), key)
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Write(data)
}

// rebuild builds the archive a key names from its commit's folder.
func (p *Publisher) rebuild(ctx context.Context, key string) ([]byte, bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 4 || !strings.HasSuffix(parts[3], ".tar.gz") || !gitops.IsShard(parts[2]) {
		return nil, false
	}
	commit, tier, shard, digest := parts[0], parts[1], parts[2], strings.TrimSuffix(parts[3], ".tar.gz")
	var data []byte
	err := p.o.At(ctx, commit, func(src Source) error {
		a, err := artifact.Build(src, path.Join(p.o.Layout.TierDir(tier), shard))
		if err != nil {
			return err
		}
		if a.Digest != "sha256:"+digest {
			return errors.New("another digest")
		}
		data = a.Data
		return nil
	})
	if err != nil {
		return nil, false
	}
	p.serve(Name(tier, shard), key, data)
	return data, true
}

// Folder is one published folder.
type Folder struct {
	Tier, Shard, Name string
	// Revision is the ExternalArtifact's revision ("latest@sha256:...").
	Revision string
	// Changed: the object was created or pointed at a new archive.
	Changed bool
}

// Publish brings the ExternalArtifact of every shard folder in snap (at
// commit) to that folder, when the layout gives shard folders
// Kustomizations of their own (else it does nothing): a folder whose tree
// is the one last published costs nothing, a new archive is served before
// the object points at it, and the folder's Kustomization is made if it is
// missing. Shard folders are never removed in that layout.
func (p *Publisher) Publish(ctx context.Context, snap Source, commit string) ([]Folder, error) {
	l, err := p.o.Layout.Of(snap)
	if err != nil || !l.ShardKustomizations {
		if err == nil {
			// Migrated back: its objects are deleted. A migration in again
			// must make them again, not trust what was published before.
			p.Forget()
		}
		return nil, err
	}
	tiers, err := l.Tiers(snap)
	if err != nil {
		return nil, fmt.Errorf("list tiers: %w", err)
	}
	var out []Folder
	var errs []error
	for _, tier := range tiers {
		_, dirs, err := snap.Entries(l.TierDir(tier))
		if err != nil {
			return out, fmt.Errorf("list %s: %w", l.TierDir(tier), err)
		}
		for _, shard := range dirs {
			if !gitops.IsShard(shard) {
				continue
			}
			f, err := p.publish(ctx, snap, commit, tier, shard, path.Join(l.TierDir(tier), shard))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, f)
		}
	}
	return out, errors.Join(errs...)
}

func (p *Publisher) publish(ctx context.Context, snap Source, commit, tier, shard, dir string) (Folder, error) {
	f := Folder{Tier: tier, Shard: shard, Name: Name(tier, shard)}
	tree, err := snap.DirHash(dir)
	if err != nil {
		return f, fmt.Errorf("read %s: %w", dir, err)
	}
	p.mu.Lock()
	same := p.trees[dir] == tree
	p.mu.Unlock()
	if same {
		return f, nil
	}
	a, err := artifact.Build(snap, dir)
	if err != nil {
		return f, err
	}
	f.Revision = a.Revision
	file := path.Join(commit, tier, shard, strings.TrimPrefix(a.Digest, "sha256:")+".tar.gz")
	p.serve(f.Name, file, a.Data)
	f.Changed, err = p.point(ctx, f.Name, file, a, commit)
	if err != nil {
		return f, fmt.Errorf("publish %s: %w", f.Name, err)
	}
	if err := p.kustomization(ctx, f.Name); err != nil {
		return f, fmt.Errorf("Kustomization of %s: %w", f.Name, err)
	}
	p.mu.Lock()
	p.trees[dir] = tree
	p.mu.Unlock()
	return f, nil
}

// serve adds an archive, keeping the object's previous one. A folder can
// come back to content it had (an onboarding, then its offboarding): the
// archive it had is served again, not dropped as the oldest.
func (p *Publisher) serve(name, file string, data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	files := p.byName[name]
	if len(files) > 0 && files[len(files)-1] == file {
		return
	}
	p.served[file] = data
	kept := make([]string, 0, 3)
	for _, f := range files {
		if f != file {
			kept = append(kept, f)
		}
	}
	kept = append(kept, file)
	for len(kept) > 2 {
		old := kept[0]
		kept = kept[1:]
		p.byName[name] = kept
		if !p.usedLocked(old, "") {
			delete(p.served, old)
		}
	}
	p.byName[name] = kept
}

// usedLocked reports whether an object other than except points at file
// (two folders with the same content share an archive).
func (p *Publisher) usedLocked(file, except string) bool {
	for n, files := range p.byName {
		if n != except && slices.Contains(files, file) {
			return true
		}
	}
	return false
}

// point creates the object if it is missing and sets its status to the
// archive; it reports whether it changed anything.
func (p *Publisher) point(ctx context.Context, name, file string, a artifact.Artifact, commit string) (bool, error) {
	res := p.o.Client.Resource(flux.ExternalArtifacts).Namespace(p.o.Namespace)
	obj, err := res.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "ExternalArtifact",
			"metadata": map[string]any{"name": name, "namespace": p.o.Namespace,
				"labels": map[string]any{"app.kubernetes.io/managed-by": "tenant-worker"}},
			"spec": map[string]any{},
		}}
		obj, err = res.Create(ctx, obj, metav1.CreateOptions{})
	}
	if err != nil {
		return false, err
	}
	if rev, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "revision"); rev == a.Revision {
		// Published before (by this replica before a restart, or another,
		// at another commit): the same digest is the same bytes, served
		// here under the URL the object names too.
		if u, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "url"); strings.HasPrefix(u, strings.TrimSuffix(p.o.URL, "/")+"/") {
			p.serve(name, strings.TrimPrefix(u, strings.TrimSuffix(p.o.URL, "/")+"/"), a.Data)
		}
		return false, nil
	}
	now := time.Now().UTC().Format(time.RFC3339)
	origin := p.o.Branch + "@sha1:" + commit
	status := map[string]any{
		"artifact": map[string]any{
			"digest": a.Digest, "revision": a.Revision, "lastUpdateTime": now,
			"path": file, "url": strings.TrimSuffix(p.o.URL, "/") + "/" + file,
			"size":     int64(len(a.Data)),
			"metadata": map[string]any{OriginRevision: origin},
		},
		"conditions": []any{map[string]any{
			"type": "Ready", "status": "True", "reason": "Succeeded", "lastTransitionTime": now,
			"observedGeneration": obj.GetGeneration(),
			"message":            "stored artifact for revision '" + a.Revision + "' from " + origin,
		}},
	}
	if err := unstructured.SetNestedMap(obj.Object, status, "status"); err != nil {
		return false, err
	}
	if _, err := res.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return false, err
	}
	return true, nil
}

// FromTemplate returns a Kustomization named name, in tmpl's namespace,
// applying dir of source with tmpl's settings (prune, timeout,
// substitutions, service account), never suspended. A positive interval
// replaces tmpl's; the timeout and retry interval Flux would have derived
// from tmpl's interval are then written out, so that a longer interval
// does not also stretch how long an apply may take and how soon a failed
// one is tried again.
func FromTemplate(tmpl *unstructured.Unstructured, name string, source map[string]any, dir string, interval time.Duration) *unstructured.Unstructured {
	spec, _, _ := unstructured.NestedMap(tmpl.Object, "spec")
	if spec == nil {
		spec = map[string]any{}
	}
	spec["path"] = dir
	spec["sourceRef"] = source
	delete(spec, "suspend")
	if interval > 0 {
		if was, err := time.ParseDuration(fmt.Sprint(spec["interval"])); err == nil {
			// Flux's GetTimeout and GetRetryInterval, of tmpl.
			if _, set := spec["timeout"]; !set {
				spec["timeout"] = max(was-30*time.Second, 30*time.Second).String()
			}
			if _, set := spec["retryInterval"]; !set {
				spec["retryInterval"] = was.String()
			}
		}
		spec["interval"] = interval.String()
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": name, "namespace": tmpl.GetNamespace()},
		"spec":     spec,
	}}
}

// kustomization makes the Kustomization applying the ExternalArtifact
// name, if it is missing, with the settings of the template Kustomization.
// One that exists is left as it is: an operator may tune it.
func (p *Publisher) kustomization(ctx context.Context, name string) error {
	if p.o.Template == "" {
		return nil
	}
	p.mu.Lock()
	seen := p.applied[name]
	p.mu.Unlock()
	if seen {
		return nil
	}
	res := p.o.Client.Resource(flux.Kustomizations).Namespace(p.o.Namespace)
	_, err := res.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		var tmpl *unstructured.Unstructured
		if tmpl, err = res.Get(ctx, p.o.Template, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("read the template Kustomization %s: %w", p.o.Template, err)
		}
		k := FromTemplate(tmpl, name, map[string]any{"kind": "ExternalArtifact", "name": name}, "./", p.o.Interval)
		k.SetLabels(map[string]string{"app.kubernetes.io/managed-by": "tenant-worker"})
		_, err = res.Create(ctx, k, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil // another replica made it
		}
	}
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.applied[name] = true
	p.mu.Unlock()
	return nil
}
