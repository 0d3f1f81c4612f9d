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
	"maps"
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

// OriginRevision is the artifact metadata key of the commit an archive
// came from (flux.OriginRevision).
const OriginRevision = flux.OriginRevision

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
	// Head, if set, reads the branch's commit on the server: a commit that
	// is no longer the head is not published (see Publish).
	Head func(ctx context.Context) (string, error)
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
	// built is each folder's last archive, by the tree it was built from:
	// a periodic publish, which reads every object again, builds nothing
	// again.
	built map[string]builtDir
	// last is the commit last published without an error.
	last string
	// pending are the folders changed since last whose objects are not
	// written yet: each is written at the next publish even if it already
	// points at the same archive (see Publish).
	pending map[string]bool
	// holding are the folders whose new archive waits for their
	// Kustomization's apply, by folder (see settled). A folder leaves it
	// once its object is written or found as it should be.
	holding map[string]hold
	now     func() time.Time
}

// New returns a Publisher.
func New(o Options) *Publisher {
	return &Publisher{o: o, served: map[string][]byte{}, byName: map[string][]string{}, trees: map[string]string{}, applied: map[string]bool{},
		pending: map[string]bool{}, built: map[string]builtDir{}, holding: map[string]hold{}, now: time.Now}
}

// BuildWith sets Options.At; call it before serving.
func (p *Publisher) BuildWith(at func(ctx context.Context, commit string, fn func(Source) error) error) {
	p.o.At = at
}

// CheckHeadWith sets Options.Head; call it before publishing.
func (p *Publisher) CheckHeadWith(head func(ctx context.Context) (string, error)) {
	p.o.Head = head
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
	// Revision is the ExternalArtifact's revision (see Revision).
	Revision string
	// Changed: the object was created or pointed at a new archive.
	Changed bool
}

// ErrSuperseded: the commit being published is no longer the branch's
// head, or another replica wrote an object since it was read. Nothing of
// the commit was pointed at; fetch the branch and publish its head.
var ErrSuperseded = errors.New("superseded by a newer commit")

// Publish brings the ExternalArtifact of every shard folder in snap (at
// commit) to that folder, when the layout gives shard folders
// Kustomizations of their own (else it does nothing): a folder whose tree
// is the one last published costs nothing, a new archive is served before
// the object points at it, and the folder's Kustomization is made if it is
// missing. Shard folders are never removed in that layout.
//
// h is what the branch went through since this Publisher's last
// published commit (Last). Replicas publish in the order of their pushes:
// every object to change is read first, then, with Options.Head, the
// commit must still be the branch's head, and each object is written only
// if nobody wrote it since it was read (its resourceVersion). Every folder
// that changed in any commit of h is written, even when its object
// already points at the same archive (a folder back to an earlier
// content), unless it is already from this commit: its resourceVersion
// moves, so a replica that read it before, to publish an older commit
// that was the head then, is refused. With h incomplete (the first
// publish, a long or rewritten history) every folder counts as changed.
// A publish after a push comes after any older publish's head check:
// either its write comes last, or the older write is refused. Otherwise
// Publish points at nothing and returns ErrSuperseded; the folders still
// to write are written at the next Publish.
func (p *Publisher) Publish(ctx context.Context, snap Source, commit string, h History) ([]Folder, error) {
	l, err := p.o.Layout.Of(snap)
	if err != nil || !l.ShardKustomizations {
		if err == nil {
			// Migrated back: its objects are deleted. A migration in again
			// must make them again, not trust what was published before.
			p.Forget()
			p.mu.Lock()
			clear(p.pending)
			clear(p.holding)
			p.last = ""
			p.mu.Unlock()
		}
		return nil, err
	}
	tiers, err := l.Tiers(snap)
	if err != nil {
		return nil, fmt.Errorf("list tiers: %w", err)
	}
	var (
		out     []Folder
		changes []*change
		dones   []*change // pointed at already; made Kustomizations of, if missing
		dirs    []string  // every shard folder
		errs    []error
		v       = newView(p.o.Client, p.o.Namespace)
	)
	for _, tier := range tiers {
		_, shards, err := snap.Entries(l.TierDir(tier))
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", l.TierDir(tier), err)
		}
		for _, shard := range shards {
			if !gitops.IsShard(shard) {
				continue
			}
			dir := path.Join(l.TierDir(tier), shard)
			dirs = append(dirs, dir)
			if h.changed(dir) {
				p.mu.Lock()
				p.pending[dir] = true
				p.mu.Unlock()
			}
			c, err := p.read(ctx, v, snap, commit, tier, shard, dir)
			switch {
			case err != nil:
				errs = append(errs, err)
			case c.obj != nil:
				changes = append(changes, c)
			case c.tree != "":
				dones = append(dones, c)
			default:
				out = append(out, c.f)
			}
		}
	}
	// Nothing is made or pointed at from a commit that is no longer the
	// branch's head: a missing object or Kustomization may be missing
	// because a newer commit took the layout back (layout migrate
	// --no-shard-kustomizations deletes them).
	if p.o.Head != nil && (len(changes) > 0 || p.making(dones)) {
		head, err := p.o.Head(ctx)
		if err != nil {
			return out, errors.Join(append(errs, fmt.Errorf("read the branch's head: %w", err))...)
		}
		if head != commit {
			return out, errors.Join(append(errs, fmt.Errorf("publish %s: %w: the branch is at %s", commit, ErrSuperseded, head))...)
		}
	}
	for _, c := range dones {
		if err := p.done(ctx, v, c); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, c.f)
	}
	// A folder that gives up objects another takes is written after the
	// taker's Kustomization applied them (see moves.go): takers first.
	take, err := takers(h, dirs)
	if err != nil {
		return out, errors.Join(append(errs, err)...)
	}
	slices.SortStableFunc(changes, func(a, b *change) int {
		return boolInt(len(take[a.dir]) > 0) - boolInt(len(take[b.dir]) > 0)
	})
	for _, c := range changes {
		if to := take[c.dir]; len(to) > 0 {
			if err := p.taken(ctx, c, to); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := p.write(ctx, v, c); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, c.f)
	}
	if len(errs) == 0 {
		p.mu.Lock()
		p.last = commit
		p.mu.Unlock()
	}
	return out, errors.Join(errs...)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// History is what the branch went through since the Publisher's last
// published commit.
type History struct {
	// Chain is the branch's first-parent chain from that commit to the one
	// published, oldest first, both included.
	Chain []Source
	// Complete says Chain starts at that commit. Without it, what changed
	// is not known: every folder counts as changed.
	Complete bool
}

// NewHistory is the History of chain, oldest first.
func NewHistory[S Source](chain []S, complete bool) History {
	h := History{Chain: make([]Source, len(chain)), Complete: complete}
	for i, c := range chain {
		h.Chain[i] = c
	}
	return h
}

// changed reports whether dir differs between any two commits next to
// each other in the chain (or cannot be compared), or is not known.
func (h History) changed(dir string) bool {
	if !h.Complete {
		return true
	}
	var was string
	for i, c := range h.Chain {
		now, err := c.DirHash(dir)
		if err != nil || i > 0 && now != was {
			return true
		}
		was = now
	}
	return false
}

// Last is the last commit this Publisher published without an error, ""
// before the first.
func (p *Publisher) Last() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// A change is a folder whose object must point at a new archive.
type change struct {
	f         Folder
	dir, tree string
	// obj is the object as read, nil when it points at the folder already;
	// create: it is missing, made by write.
	obj    *unstructured.Unstructured
	create bool
	file   string
	a      artifact.Artifact
	// origin is the branch and commit the archive came from.
	origin string
}

// Revision is the ExternalArtifact revision a write gives an archive
// published from origin ("main@sha1:<commit>"), when the object held
// another archive (was, its digest; rev, its revision): the origin of the
// first publish of this content since the object last held another. The
// object's own revision is kept when the archive is the same, so a write
// that changes nothing applies nothing. A revision is never one the
// object held before another, so a Kustomization's last applied revision
// names one publish: a folder back to what it held (an onboarding, then
// its offboarding) under a revision naming the content alone would look
// applied to the readiness follower while its Kustomization was still
// applying the onboarding's archive, to apply the offboarding's after it
// (TestAFolderBackToItsContentDuringAnApplyIsApplied).
func Revision(digest, was, rev, origin string) string {
	if digest == was && rev != "" {
		return rev
	}
	return origin
}

// read serves the folder's archive and reads its object (making it when
// missing). A folder already pointed at is done: its Kustomization is made
// if missing and its tree remembered.
func (p *Publisher) read(ctx context.Context, v *view, snap Source, commit, tier, shard, dir string) (*change, error) {
	c := &change{f: Folder{Tier: tier, Shard: shard, Name: Name(tier, shard)}, dir: dir}
	tree, err := snap.DirHash(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	p.mu.Lock()
	same, force := p.trees[dir] == tree, p.pending[dir]
	p.mu.Unlock()
	if same && !force {
		return c, nil // published from this tree: nothing to do
	}
	c.tree = tree
	if c.a, err = p.build(snap, dir, tree); err != nil {
		return nil, err
	}
	c.origin = p.o.Branch + "@sha1:" + commit
	c.file = path.Join(commit, tier, shard, strings.TrimPrefix(c.a.Digest, "sha256:")+".tar.gz")
	p.serve(c.f.Name, c.file, c.a.Data)
	obj, write, missing, err := p.object(ctx, v, c.f.Name, c.a, force, c.origin)
	c.create = missing
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", c.f.Name, err)
	}
	was, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "digest")
	rev, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "revision")
	c.f.Revision = Revision(c.a.Digest, was, rev, c.origin)
	if write && was != "" && was != c.a.Digest {
		if err := p.settled(ctx, v, c, rev); err != nil {
			return nil, err
		}
	}
	if write {
		c.obj = obj
		return c, nil
	}
	return c, nil // pointed at already: done once the head is checked
}

// making reports whether any of cs lacks a Kustomization that done would
// make.
func (p *Publisher) making(cs []*change) bool {
	if p.o.Template == "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		if !p.applied[c.f.Name] {
			return true
		}
	}
	return false
}

// ErrApplying: the Kustomization of a folder to write has not finished
// applying the folder's current archive. The folder is written by a later
// Publish, once that apply is done or maxHold after it was first held (see
// Waiting).
var ErrApplying = errors.New("its Kustomization is applying the folder's current archive")

// maxHold bounds how long a folder's new archive waits for its
// Kustomization to finish applying the one before, from the first time it
// was held until it is written, or until the object holds another archive
// (another replica wrote it), whose apply it then waits for afresh.
const maxHold = time.Minute

// A hold is a folder whose new archive waits: its object's name, the
// revision the object holds, and since when.
type hold struct {
	name, rev string
	since     time.Time
	// move: the folder gives up objects that the Kustomization name takes,
	// and waits until it has applied rev (see taken).
	move bool
}

// settled returns ErrApplying while the folder's Kustomization has not
// finished applying the archive its object holds (rev; see applying), for
// at most maxHold per folder. kustomize-controller starts a revision that
// came during an apply right after it, reading the Kustomization from its
// cache, and a cache not yet holding the status it just wrote has the
// inventory from before: an object the first revision made and the next
// one removes is then neither pruned nor kept in the inventory, and stays
// in the cluster for good (a tenant's offboarding right after its
// onboarding; seen in TestReadinessWithShardKustomizations). Written once
// that apply is done, the next archive's apply starts from its own event,
// after the worker read the finished status.
func (p *Publisher) settled(ctx context.Context, v *view, c *change, rev string) error {
	k, err := v.get(ctx, flux.Kustomizations, c.f.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("publish %s: read its Kustomization: %w", c.f.Name, err)
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	h, held := p.holding[c.dir]
	if !held || h.rev != rev {
		// First held, or the object moved since: another replica wrote the
		// folder, and the apply of its archive gets a minute of its own.
		h.since = now
	}
	h.name, h.rev = c.f.Name, rev
	if !applying(k, rev) || now.Sub(h.since) >= maxHold {
		return nil // held until written (done), so a refused write is not held again
	}
	p.holding[c.dir] = h
	return fmt.Errorf("publish %s: %w", c.f.Name, ErrApplying)
}

// applying reports whether Kustomization k has yet to finish with revision
// rev of its source: it has not attempted it (kustomize-controller sets
// the last attempted revision once it fetched the archive), or its
// Reconciling condition is True and not for a retry after a failure
// (reason ProgressingWithRetry, kept until the next success). A
// suspended Kustomization applies nothing.
func applying(k *unstructured.Unstructured, rev string) bool {
	if suspended, _, _ := unstructured.NestedBool(k.Object, "spec", "suspend"); suspended {
		return false
	}
	if attempted, _, _ := unstructured.NestedString(k.Object, "status", "lastAttemptedRevision"); attempted != rev {
		return true
	}
	conds, _, _ := unstructured.NestedSlice(k.Object, "status", "conditions")
	for _, cond := range conds {
		if m, ok := cond.(map[string]any); ok && m["type"] == "Reconciling" {
			return m["status"] == "True" && m["reason"] != "ProgressingWithRetry"
		}
	}
	return false
}

// Waiting reports whether every folder held (ErrApplying) still waits: its
// Kustomization not done with the archive before, and maxHold not passed.
// It reads each held folder's Kustomization and nothing of the branch, so
// a publisher calls it between tries instead of publishing again; false
// (publish now) when one can be written, or a Kustomization cannot be read.
func (p *Publisher) Waiting(ctx context.Context) bool {
	p.mu.Lock()
	holds := slices.Collect(maps.Values(p.holding))
	p.mu.Unlock()
	if len(holds) == 0 {
		return false
	}
	res := p.o.Client.Resource(flux.Kustomizations).Namespace(p.o.Namespace)
	for _, h := range holds {
		if h.move {
			if p.now().Sub(h.since) >= maxMoveHold {
				return false
			}
			k, err := res.Get(ctx, h.name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) {
					continue // its Kustomization is made by the next publish
				}
				return false
			}
			if applied, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision"); h.rev == "" || applied == h.rev {
				return false
			}
			continue
		}
		if p.now().Sub(h.since) >= maxHold {
			return false
		}
		k, err := res.Get(ctx, h.name, metav1.GetOptions{})
		if err != nil || !applying(k, h.rev) {
			return false
		}
	}
	return true
}

// write points the object read at the folder's archive, unless it was
// written since it was read.
func (p *Publisher) write(ctx context.Context, v *view, c *change) error {
	res := p.o.Client.Resource(flux.ExternalArtifacts).Namespace(p.o.Namespace)
	if c.create {
		made, err := res.Create(ctx, c.obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // made by another replica since the listing
			return fmt.Errorf("publish %s: %w: made by another replica", c.f.Name, ErrSuperseded)
		}
		if err != nil {
			return fmt.Errorf("publish %s: %w", c.f.Name, err)
		}
		c.obj = made
	}
	now := time.Now().UTC().Format(time.RFC3339)
	status := map[string]any{
		"artifact": map[string]any{
			"digest": c.a.Digest, "revision": c.f.Revision, "lastUpdateTime": now,
			"path": c.file, "url": strings.TrimSuffix(p.o.URL, "/") + "/" + c.file,
			"size":     int64(len(c.a.Data)),
			"metadata": map[string]any{OriginRevision: c.origin},
		},
		"conditions": []any{map[string]any{
			"type": "Ready", "status": "True", "reason": "Succeeded", "lastTransitionTime": now,
			"observedGeneration": c.obj.GetGeneration(),
			"message":            "stored artifact for revision '" + c.f.Revision + "' from " + c.origin,
		}},
	}
	if err := unstructured.SetNestedMap(c.obj.Object, status, "status"); err != nil {
		return fmt.Errorf("publish %s: %w", c.f.Name, err)
	}
	_, err := res.UpdateStatus(ctx, c.obj, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("publish %s: %w: %v", c.f.Name, ErrSuperseded, err)
	}
	if err != nil {
		return fmt.Errorf("publish %s: %w", c.f.Name, err)
	}
	c.f.Changed = true
	return p.done(ctx, v, c)
}

// done makes the folder's Kustomization if missing and remembers the tree
// published.
func (p *Publisher) done(ctx context.Context, v *view, c *change) error {
	if err := p.kustomization(ctx, v, c.f.Name); err != nil {
		return fmt.Errorf("Kustomization of %s: %w", c.f.Name, err)
	}
	p.mu.Lock()
	p.trees[c.dir] = c.tree
	delete(p.pending, c.dir)
	delete(p.holding, c.dir)
	p.mu.Unlock()
	return nil
}

// builtDir is a folder's archive and the tree it was built from.
type builtDir struct {
	tree string
	a    artifact.Artifact
}

// build returns the archive of dir at tree, built again only when the
// folder's tree is not the one it was last built from.
func (p *Publisher) build(snap Source, dir, tree string) (artifact.Artifact, error) {
	p.mu.Lock()
	b, ok := p.built[dir]
	p.mu.Unlock()
	if ok && b.tree == tree {
		return b.a, nil
	}
	a, err := artifact.Build(snap, dir)
	if err != nil {
		return a, err
	}
	p.mu.Lock()
	p.built[dir] = builtDir{tree: tree, a: a}
	p.mu.Unlock()
	return a, nil
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

// object reads the object and says whether it must change to point at a
// (not when it points at a already; with force, at a from origin), and
// whether it is missing: then obj is the object to make.
func (p *Publisher) object(ctx context.Context, v *view, name string, a artifact.Artifact, force bool, origin string) (obj *unstructured.Unstructured, write, missing bool, err error) {
	obj, err = v.get(ctx, flux.ExternalArtifacts, name)
	if apierrors.IsNotFound(err) {
		// Made by write, once the head is checked.
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "ExternalArtifact",
			"metadata": map[string]any{"name": name, "namespace": p.o.Namespace,
				"labels": map[string]any{"app.kubernetes.io/managed-by": "tenant-worker"}},
			"spec": map[string]any{},
		}}, true, true, nil
	}
	if err != nil {
		return nil, false, false, err
	}
	was, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "metadata", OriginRevision)
	if d, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "digest"); d == a.Digest && (!force || was == origin) {
		// Published before (by this replica before a restart, or another,
		// at another commit): the same digest is the same bytes, served
		// here under the URL the object names too.
		if u, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "url"); strings.HasPrefix(u, strings.TrimSuffix(p.o.URL, "/")+"/") {
			p.serve(name, strings.TrimPrefix(u, strings.TrimSuffix(p.o.URL, "/")+"/"), a.Data)
		}
		return obj, false, false, nil
	}
	return obj, true, false, nil
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
func (p *Publisher) kustomization(ctx context.Context, v *view, name string) error {
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
	_, err := v.get(ctx, flux.Kustomizations, name)
	if apierrors.IsNotFound(err) {
		var tmpl *unstructured.Unstructured
		if tmpl, err = v.get(ctx, flux.Kustomizations, p.o.Template); err != nil {
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
