package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
func handover(ctx context.Context, opts config.Options, repo *gitrepo.Repo, base gitops.Layout, timeout time.Duration,
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
	h := &handing{dyn: dyn, ns: opts.FluxNamespace, repo: repo, line: line}
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
	case dryRun:
		msg, err := migrateOnce(ctx, repo, base, func(l gitops.Layout) gitops.Layout { l.ShardKustomizations = true; return l }, true, line)
		if err != nil {
			return fail(err)
		}
		line.Clear()
		fmt.Fprintln(stdout, msg)
		return 0
	default:
		line.Show("suspending %s", tenantsK)
		if err := h.suspend(ctx, tenantsK, true); err != nil {
			return fail(err)
		}
		for attempt := 1; ; attempt++ {
			msg, err := migrateOnce(ctx, repo, base, func(l gitops.Layout) gitops.Layout { l.ShardKustomizations = true; return l }, false, line)
			if errors.Is(err, gitrepo.ErrConflict) && attempt < migrateAttempts {
				if _, err := repo.Fetch(ctx); err != nil {
					return fail(err)
				}
				continue
			}
			if err != nil {
				// Nothing pushed: the tenants Kustomization applies as before.
				if rerr := h.suspend(context.WithoutCancel(ctx), tenantsK, false); rerr != nil {
					err = fmt.Errorf("%w (and resuming %s failed: %v; resume it by hand)", err, tenantsK, rerr)
				}
				return fail(err)
			}
			line.Clear()
			fmt.Fprintln(stdout, msg)
			break
		}
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
	var names []string
	for _, tier := range mustTiers(l, after) {
		for _, dir := range l.ShardDirs(after, tier) {
			names = append(names, publish.Name(tier, dir[strings.LastIndex(dir, "/")+1:]))
		}
	}
	slices.Sort(names)
	for i, name := range names {
		line.Show("waiting for %s to apply %s (%d of %d)", name, short(commit), i+1, len(names))
		if err := h.applied(ctx, name, commit, "lastAppliedOriginRevision", timeout); err != nil {
			return fail(fmt.Errorf("%w; %s stays suspended, which deletes nothing: is the worker running with ARTIFACT_URL? Run this again to carry on", err, tenantsK))
		}
	}
	line.Show("resuming %s", tenantsK)
	if err := h.suspend(ctx, tenantsK, false); err != nil {
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

func mustTiers(l gitops.Layout, r gitops.Reader) []string {
	tiers, _ := l.Tiers(r)
	return tiers
}

// handing is the cluster side of a handover.
type handing struct {
	dyn  dynamic.Interface
	ns   string
	repo *gitrepo.Repo
	line *progress.Line
}

func (h *handing) kustomization(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	return h.dyn.Resource(flux.Kustomizations).Namespace(h.ns).Get(ctx, name, metav1.GetOptions{})
}

// suspend sets a Kustomization's spec.suspend, and asks it to reconcile
// when it resumes.
func (h *handing) suspend(ctx context.Context, name string, on bool) error {
	patch := map[string]any{"spec": map[string]any{"suspend": on}}
	if !on {
		patch["metadata"] = map[string]any{"annotations": map[string]string{flux.RequestedAtAnnotation: time.Now().UTC().Format(time.RFC3339Nano)}}
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if _, err := h.dyn.Resource(flux.Kustomizations).Namespace(h.ns).Patch(ctx, name, types.MergePatchType, b,
		metav1.PatchOptions{FieldManager: "tenant-worker-layout"}); err != nil {
		return fmt.Errorf("set %s's suspend to %v: %w", name, on, err)
	}
	return nil
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
// layout did not give shard folders Kustomizations of their own.
func (h *handing) madeBy(base gitops.Layout, head plumbing.Hash) (plumbing.Hash, error) {
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
		if l, err := base.Of(snap); err != nil || !l.ShardKustomizations {
			return c, nil
		}
		c = parents[0]
	}
	return c, nil
}
