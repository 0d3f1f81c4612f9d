package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/progress"
	"github.com/tenant-worker/tenant-worker/internal/publish"
	"github.com/tenant-worker/tenant-worker/internal/wait"
)

// handover gives the shard folders Kustomizations of their own on a
// running platform (see layoutUsage): suspend the tenants Kustomization,
// push the commit, wait for every shard Kustomization to apply it, resume
// the tenants Kustomization and wait for it to apply it.
func handover(ctx context.Context, opts config.Options, repo *gitrepo.Repo, base gitops.Layout, into bool, timeout time.Duration,
	dryRun bool, line *progress.Line, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		line.Clear()
		fmt.Fprintf(stderr, "tenant-worker layout migrate: %v\n", err)
		return 1
	}
	ks := opts.Kustomizations()
	if len(ks) == 0 {
		return fail(errors.New("FLUX_KUSTOMIZATIONS names no Kustomization applying the tenants folder"))
	}
	tenantsK := ks[0]
	cfg, err := flux.LoadConfig(opts.Kubeconfig)
	if err != nil {
		return fail(err)
	}
	if cfg == nil {
		return fail(errors.New("--shard-kustomizations needs cluster access: KUBECONFIG, or run in a pod"))
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fail(err)
	}
	h := &handing{dyn: dyn, ns: opts.FluxNamespace, source: opts.FluxGitRepository, repo: repo, line: line}
	if _, err := h.kustomization(ctx, tenantsK); err != nil {
		return fail(fmt.Errorf("the tenants Kustomization: %w", err))
	}

	snap, err := repo.Snapshot(repo.Head())
	if err != nil {
		return fail(err)
	}
	l, err := base.Of(snap)
	if err != nil {
		return fail(err)
	}
	if !into {
		if err := h.back(ctx, repo, base, l, tenantsK, timeout, dryRun, stdout, stderr); err != nil {
			return fail(err)
		}
		return 0
	}
	commit := repo.Head()
	switch {
	case l.Shards == 0:
		return fail(errors.New("the branch keeps tenants in the tiers' folders: move them into shard folders first (--shards N)"))
	case l.ShardKustomizations:
		// Pushed by an earlier run: find the commit that made it so, the
		// one the Kustomizations must have applied.
		if commit, err = h.madeBy(base, commit); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s has shard folders with Kustomizations of their own since %s: handing over\n", repo.Branch(), commit)
		// The run that pushed it may have stopped before the tenants
		// Kustomization's apply in flight ended.
		if err := h.quiesce(ctx, []string{tenantsK}, timeout, stdout); err != nil {
			return fail(err)
		}
	case dryRun:
		msg, err := migrateOnce(ctx, repo, base, withShardKustomizations(true), true, line)
		if err != nil {
			return fail(err)
		}
		line.Clear()
		fmt.Fprintln(stdout, msg)
		return 0
	default:
		line.Show("suspending %s", tenantsK)
		err := h.quiesce(ctx, []string{tenantsK}, timeout, stdout)
		var msg string
		if err == nil {
			msg, err = migrate(ctx, repo, base, withShardKustomizations(true), false, line, stderr)
		}
		if err != nil {
			// Nothing pushed: the tenants Kustomization applies as before.
			return fail(h.resume(ctx, err, tenantsK))
		}
		line.Clear()
		fmt.Fprintln(stdout, msg)
		if commit, err = repo.Fetch(ctx); err != nil {
			return fail(err)
		}
		if commit, err = h.madeBy(base, commit); err != nil {
			return fail(err)
		}
	}

	// Every shard folder's Kustomization applies the commit: every tenant
	// object then carries its name, not the tenants Kustomization's.
	after, err := repo.Snapshot(commit)
	if err != nil {
		return fail(err)
	}
	tiers, err := l.Tiers(after)
	if err != nil {
		return fail(fmt.Errorf("list tiers: %w; %s stays suspended, which deletes nothing: run this again", err, tenantsK))
	}
	var names []string
	for _, tier := range tiers {
		for _, dir := range l.ShardDirs(after, tier) {
			names = append(names, publish.Name(tier, path.Base(dir)))
		}
	}
	slices.Sort(names)
	for i, name := range names {
		line.Show("waiting for %s to apply %s (%d of %d)", name, short(commit), i+1, len(names))
		if err := h.applied(ctx, name, commit, "lastAppliedOriginRevision", timeout); err != nil {
			return fail(fmt.Errorf("%w; %s stays suspended, which deletes nothing: is the worker running with ARTIFACT_URL? Run this again to carry on", err, tenantsK))
		}
	}
	// Resumed while its source still has an older commit, it would apply
	// that one, taking every tenant back, then prune them all at the
	// commit: the source has the commit first.
	line.Show("waiting for %s to fetch %s", h.source, short(commit))
	if err := h.fetched(ctx, commit, timeout); err != nil {
		return fail(fmt.Errorf("%w; %s stays suspended, which deletes nothing: run this again", err, tenantsK))
	}
	line.Show("resuming %s", tenantsK)
	if _, err := h.suspend(ctx, tenantsK, false); err != nil {
		return fail(err)
	}
	line.Show("waiting for %s to apply %s", tenantsK, short(commit))
	if err := h.applied(ctx, tenantsK, commit, "lastAppliedRevision", timeout); err != nil {
		return fail(err)
	}
	line.Clear()
	fmt.Fprintf(stdout, "handed over: %d shard Kustomizations apply the tenants of %s since %s; %s applies the rest\n",
		len(names), repo.Branch(), commit, tenantsK)
	return 0
}

func short(h plumbing.Hash) string { return h.String()[:12] }

// withShardKustomizations is the layout target that gives shard folders
// Kustomizations of their own (own) or takes them away.
func withShardKustomizations(own bool) func(gitops.Layout) gitops.Layout {
	return func(l gitops.Layout) gitops.Layout { l.ShardKustomizations = own; return l }
}

// handing is the cluster side of a handover.
type handing struct {
	dyn    dynamic.Interface
	ns     string
	source string // the GitRepository, asked to fetch after a push
	repo   *gitrepo.Repo
	line   *progress.Line
}

func (h *handing) kustomization(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	return h.dyn.Resource(flux.Kustomizations).Namespace(h.ns).Get(ctx, name, metav1.GetOptions{})
}

// suspend sets a Kustomization's spec.suspend and asks it to reconcile:
// resumed, it applies at once; suspended, the reconcile does nothing but
// record the request. It returns the request's token.
func (h *handing) suspend(ctx context.Context, name string, on bool) (string, error) {
	token := time.Now().UTC().Format(time.RFC3339Nano)
	patch := map[string]any{
		"spec":     map[string]any{"suspend": on},
		"metadata": map[string]any{"annotations": map[string]string{flux.RequestedAtAnnotation: token}},
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return "", err
	}
	if _, err := h.dyn.Resource(flux.Kustomizations).Namespace(h.ns).Patch(ctx, name, types.MergePatchType, b,
		metav1.PatchOptions{FieldManager: "tenant-worker-layout"}); err != nil {
		return "", fmt.Errorf("set %s's suspend to %v: %w", name, on, err)
	}
	return token, nil
}

// resume takes the suspend off names after a step that pushed nothing
// failed with err, even when ctx has ended, and returns err with any
// resume that failed too.
func (h *handing) resume(ctx context.Context, err error, names ...string) error {
	for _, name := range names {
		if _, rerr := h.suspend(context.WithoutCancel(ctx), name, false); rerr != nil {
			err = fmt.Errorf("%w (and resuming %s failed: %v; resume it by hand)", err, name, rerr)
		}
	}
	return err
}

// quiesce suspends the Kustomizations names and waits until none has an
// apply in flight. Suspending stops no apply that has begun: one of the
// tenants folder at 2,000 tenants takes minutes, and objects it applies
// after a shard's Kustomization took them are its own again, pruned when
// it resumes. kustomize-controller reconciles one object at a time, and a
// suspended one's reconcile records the request it saw
// (status.lastHandledReconcileAt) and applies nothing: once that is the
// token of the suspend, the apply in flight, if any, has ended.
func (h *handing) quiesce(ctx context.Context, names []string, timeout time.Duration, stdout io.Writer) error {
	tokens := make(map[string]string, len(names))
	for _, name := range names {
		token, err := h.suspend(ctx, name, true)
		if err != nil {
			return err
		}
		tokens[name] = token
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	busy := names
	for polls := 0; ; polls++ {
		list, err := h.dyn.Resource(flux.Kustomizations).Namespace(h.ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			handled := make(map[string]string, len(list.Items))
			for _, k := range list.Items {
				handled[k.GetName()], _, _ = unstructured.NestedString(k.Object, "status", "lastHandledReconcileAt")
			}
			busy = slices.DeleteFunc(slices.Clone(names), func(name string) bool { return handled[name] == tokens[name] })
			if len(busy) == 0 {
				return nil
			}
		}
		if polls == 1 { // not the usual moment a suspend takes to be seen
			fmt.Fprintf(stdout, "waiting for %s to end the apply in flight before anything moves\n", strings.Join(busy, ", "))
		}
		h.line.Show("waiting for %d suspended Kustomizations to end their applies in flight", len(busy))
		if wait.Sleep(ctx, time.Second) != nil {
			if err != nil {
				return fmt.Errorf("list Kustomizations: %w", err)
			}
			return fmt.Errorf("%s suspended but did not end the apply in flight within %s: is kustomize-controller running?", strings.Join(busy, ", "), timeout)
		}
	}
}

// fetch asks the GitRepository to fetch now, not at its interval.
func (h *handing) fetch(ctx context.Context) {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		flux.RequestedAtAnnotation: time.Now().UTC().Format(time.RFC3339Nano)}}})
	// At worst the GitRepository fetches at its interval.
	h.dyn.Resource(flux.GitRepositories).Namespace(h.ns).Patch(ctx, h.source, types.MergePatchType, b, metav1.PatchOptions{FieldManager: "tenant-worker-layout"})
}

// fetched asks the GitRepository to fetch and waits until its artifact is
// at commit or after it.
func (h *handing) fetched(ctx context.Context, commit plumbing.Hash, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var asked time.Time
	for {
		if time.Since(asked) > 10*time.Second {
			h.fetch(ctx)
			asked = time.Now()
		}
		src, err := h.dyn.Resource(flux.GitRepositories).Namespace(h.ns).Get(ctx, h.source, metav1.GetOptions{})
		if err == nil {
			rev, _, _ := unstructured.NestedString(src.Object, "status", "artifact", "revision")
			if i := strings.LastIndex(rev, ":"); i >= 0 && h.atOrAfter(ctx, plumbing.NewHash(rev[i+1:]), commit) {
				return nil
			}
		}
		if err := wait.Sleep(ctx, time.Second); err != nil {
			return fmt.Errorf("GitRepository %s has not fetched %s within %s", h.source, commit, timeout)
		}
	}
}

// applied waits until Kustomization name has applied commit or a commit
// after it (its status field holds "<branch>@sha1:<hash>").
func (h *handing) applied(ctx context.Context, name string, commit plumbing.Hash, field string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		k, err := h.kustomization(ctx, name)
		if err == nil {
			rev, _, _ := unstructured.NestedString(k.Object, "status", field)
			if i := strings.LastIndex(rev, ":"); i >= 0 && h.atOrAfter(ctx, plumbing.NewHash(rev[i+1:]), commit) {
				return nil
			}
		}
		if err := wait.Sleep(ctx, time.Second); err != nil {
			return fmt.Errorf("%s has not applied %s within %s", name, commit, timeout)
		}
	}
}

// atOrAfter reports whether rev is commit or a commit after it on the
// branch (fetched as needed).
func (h *handing) atOrAfter(ctx context.Context, rev, commit plumbing.Hash) bool {
	if rev == commit {
		return true
	}
	if _, _, err := h.repo.CommitInfo(rev); err != nil {
		if _, err := h.repo.Fetch(ctx); err != nil {
			return false
		}
	}
	seen := map[plumbing.Hash]bool{}
	queue := []plumbing.Hash{rev}
	for len(queue) > 0 && len(seen) < 100_000 {
		c := queue[0]
		queue = queue[1:]
		if c == commit {
			return true
		}
		if seen[c] {
			continue
		}
		seen[c] = true
		parents, _, err := h.repo.CommitInfo(c)
		if err != nil {
			continue // before the clone's history: not after commit
		}
		queue = append(queue, parents...)
	}
	return false
}

// madeBy returns the first commit, walking back from head, whose parent's
// layout did not give shard folders Kustomizations of their own (with own
// false: did).
func (h *handing) madeBy(base gitops.Layout, head plumbing.Hash, own ...bool) (plumbing.Hash, error) {
	want := len(own) == 0 || own[0]
	c := head
	for range 100_000 {
		parents, _, err := h.repo.CommitInfo(c)
		if err != nil || len(parents) == 0 {
			return c, nil // the history the clone holds starts there
		}
		snap, err := h.repo.Snapshot(parents[0])
		if err != nil {
			return c, nil
		}
		if l, err := base.Of(snap); err != nil || l.ShardKustomizations != want {
			return c, nil
		}
		c = parents[0]
	}
	return c, nil
}

// back hands the tenants back from the shard folders' Kustomizations to
// the tenants Kustomization tenantsK (see layoutUsage).
func (h *handing) back(ctx context.Context, repo *gitrepo.Repo, base, l gitops.Layout, tenantsK string, timeout time.Duration, dryRun bool, stdout, stderr io.Writer) error {
	shardKs, err := h.shardKustomizations(ctx)
	if err != nil {
		return err
	}
	if !l.ShardKustomizations && len(shardKs) == 0 {
		fmt.Fprintf(stdout, "%s has no shard folders with Kustomizations of their own: nothing to hand back\n", repo.Branch())
		return nil
	}
	outOf := withShardKustomizations(false)
	if dryRun {
		if !l.ShardKustomizations {
			fmt.Fprintf(stdout, "would delete %d shard Kustomizations; nothing was changed\n", len(shardKs))
			return nil
		}
		msg, err := migrateOnce(ctx, repo, base, outOf, true, h.line)
		if err == nil {
			h.line.Clear()
			fmt.Fprintln(stdout, msg)
		}
		return err
	}
	// Suspended, a shard Kustomization applies nothing more and, deleted,
	// deletes nothing of what it applied.
	h.line.Show("suspending %d shard Kustomizations", len(shardKs))
	if err := h.quiesce(ctx, shardKs, timeout, stdout); err != nil {
		if !l.ShardKustomizations {
			return fmt.Errorf("%w (the branch was handed back already; the shard Kustomizations stay suspended, which deletes nothing: run this again)", err)
		}
		// Nothing pushed: the shard Kustomizations still apply the tenants.
		return fmt.Errorf("%w (nothing was pushed and the shard Kustomizations were resumed: run this again)", h.resume(ctx, err, shardKs...))
	}
	commit := repo.Head()
	if l.ShardKustomizations {
		msg, err := migrate(ctx, repo, base, outOf, false, h.line, stderr)
		if err != nil {
			return fmt.Errorf("%w (the shard Kustomizations stay suspended, which deletes nothing: run this again)", err)
		}
		h.line.Clear()
		fmt.Fprintln(stdout, msg)
		if commit, err = repo.Fetch(ctx); err != nil {
			return err
		}
	} else if commit, err = h.madeBy(gitops.Layout{Root: base.Root}, commit, false); err != nil {
		return err
	}
	h.line.Show("waiting for %s to fetch %s", h.source, short(commit))
	if err := h.fetched(ctx, commit, timeout); err != nil {
		return fmt.Errorf("%w; the shard Kustomizations stay suspended, which deletes nothing: run this again", err)
	}
	h.line.Show("waiting for %s to apply %s", tenantsK, short(commit))
	if _, err := h.suspend(ctx, tenantsK, false); err != nil { // asks it to apply now
		return err
	}
	if err := h.applied(ctx, tenantsK, commit, "lastAppliedRevision", timeout); err != nil {
		return fmt.Errorf("%w; the shard Kustomizations stay suspended, which deletes nothing: run this again", err)
	}
	// One made since the first listing (a new tier's first tenant) is
	// suspended too before anything is deleted.
	if shardKs, err = h.shardKustomizations(ctx); err != nil {
		return err
	}
	if err := h.quiesce(ctx, shardKs, timeout, stdout); err != nil {
		return err
	}
	for _, name := range shardKs {
		h.line.Show("deleting %s", name)
		for _, gvr := range []schema.GroupVersionResource{flux.Kustomizations, flux.ExternalArtifacts} {
			if err := h.dyn.Resource(gvr).Namespace(h.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete %s %s: %w", gvr.Resource, name, err)
			}
		}
	}
	h.line.Clear()
	fmt.Fprintf(stdout, "handed back: %s applies the tenants of %s since %s; %d shard Kustomizations deleted\n", tenantsK, repo.Branch(), commit, len(shardKs))
	return nil
}

// shardKustomizations lists the Kustomizations the worker made for shard
// folders.
func (h *handing) shardKustomizations(ctx context.Context) ([]string, error) {
	list, err := h.dyn.Resource(flux.Kustomizations).Namespace(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=tenant-worker"})
	if err != nil {
		return nil, fmt.Errorf("list the shard folders' Kustomizations: %w", err)
	}
	var out []string
	for _, k := range list.Items {
		if kind, _, _ := unstructured.NestedString(k.Object, "spec", "sourceRef", "kind"); kind == "ExternalArtifact" && strings.HasPrefix(k.GetName(), "tenants-") {
			out = append(out, k.GetName())
		}
	}
	slices.Sort(out)
	return out, nil
}
