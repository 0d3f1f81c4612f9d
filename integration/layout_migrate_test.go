package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/tenant-worker/tenant-worker/internal/cli"
	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/publish"
	"github.com/tenant-worker/tenant-worker/internal/testenv/controlplane"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// deletions watches a resource from before the tenants are applied, and
// records every object deleted or marked for deletion, and the names it
// saw added (which proves the watch was live).
type deletions struct {
	mu      sync.Mutex
	added   map[string]bool
	deleted []string
}

func (d *deletions) watch(t *testing.T, cp *controlplane.ControlPlane, gvr schema.GroupVersionResource, ns string) {
	t.Helper()
	w, err := cp.Dynamic.Resource(gvr).Namespace(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			o, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			d.mu.Lock()
			switch {
			case ev.Type == watch.Deleted || o.GetDeletionTimestamp() != nil:
				d.deleted = append(d.deleted, gvr.Resource+"/"+o.GetName())
			case ev.Type == watch.Added:
				d.added[o.GetName()] = true
			}
			d.mu.Unlock()
		}
	}()
}

// TestLayoutMigrationKeepsEveryTenant: 100 tenants applied by the
// platform's dataplane-tenants Kustomization; `tenant-worker layout
// migrate` moves them into shard folders and back, each time applied by
// Flux. Not one HelmRelease or tenant Namespace is deleted or marked for
// deletion at any moment (watched from before the first apply), and every
// HelmRelease keeps its uid.
func TestLayoutMigrationKeepsEveryTenant(t *testing.T) {
	t.Parallel()
	const tenants = 100
	ctx := context.Background()
	srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	seed, err := templates.WithTenants("premium", migIDs(tenants)...)
	if err != nil {
		t.Fatal(err)
	}
	url, err := srv.CreateRepo("gitops.git", "main", seed)
	if err != nil {
		t.Fatal(err)
	}

	cp := startControlPlane(t, controlplane.Options{ControllerManager: true, Flux: true})
	var releases, spaces deletions
	releases.added, spaces.added = map[string]bool{}, map[string]bool{}
	releases.watch(t, cp, flux.HelmReleases, controlplane.Namespace)
	spaces.watch(t, cp, namespaces, "")
	if _, err := cp.InstallPlatform(ctx, t.TempDir(), controlplane.PlatformOptions{RepoURL: url, Username: "git", Password: "tok"}); err != nil {
		t.Fatal(err)
	}

	head := func() string { out, _ := srv.Output("gitops.git", "rev-parse", "main"); return strings.TrimSpace(out) }
	fc, err := flux.New(cp.Config, flux.Options{Namespace: controlplane.Namespace, GitRepository: "flux-system"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	applied := func(what string) {
		t.Helper()
		want := "main@sha1:" + head()
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		for {
			fc.RequestFetch(ctx, time.Now())
			k, err := cp.Dynamic.Resource(flux.Kustomizations).Namespace(controlplane.Namespace).Get(ctx, "dataplane-tenants", metav1.GetOptions{})
			if err == nil {
				if rev, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision"); rev == want {
					return
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: dataplane-tenants did not apply %s within 5 minutes", what, want)
			case <-time.After(time.Second):
			}
		}
	}
	uids := func() map[string]string {
		t.Helper()
		list, err := cp.Dynamic.Resource(flux.HelmReleases).Namespace(controlplane.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, o := range list.Items {
			if strings.HasPrefix(o.GetName(), "mig-") {
				out[o.GetName()] = string(o.GetUID())
			}
		}
		return out
	}
	check := func(what string, before map[string]string) {
		t.Helper()
		after := uids()
		for name, uid := range before {
			if after[name] != uid {
				t.Errorf("%s: HelmRelease %s has uid %q, not %q", what, name, after[name], uid)
			}
		}
		for _, d := range []*deletions{&releases, &spaces} {
			d.mu.Lock()
			if len(d.deleted) > 0 {
				t.Errorf("%s: deleted or marked for deletion: %v", what, d.deleted)
			}
			d.mu.Unlock()
		}
	}

	applied("the platform's first apply")
	before := uids()
	if len(before) != tenants {
		t.Fatalf("%d HelmReleases applied, want %d", len(before), tenants)
	}
	releases.mu.Lock()
	seen := 0
	for name := range releases.added {
		if strings.HasPrefix(name, "mig-") {
			seen++
		}
	}
	releases.mu.Unlock()
	if seen < tenants {
		t.Fatalf("the watch saw %d HelmReleases added of %d: it is not live", seen, tenants)
	}

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GIT_REPO_URL": url, "GIT_TOKEN_FILE": tokenFile}
	for _, shards := range []string{"8", "0"} {
		start := head()
		var out, errOut bytes.Buffer
		if code := cli.Main([]string{"layout", "migrate", "--shards", shards}, &out, &errOut, func(k string) string { return env[k] }); code != 0 || head() == start {
			t.Fatalf("layout migrate --shards %s: exit %d\n%s%s", shards, code, out.String(), errOut.String())
		}
		applied("after migrating to " + shards + " shards")
		check("after migrating to "+shards+" shards", before)
	}
	if ls, _ := srv.Output("gitops.git", "ls-tree", "-r", "--name-only", "main"); strings.Contains(ls, "shard-") {
		t.Errorf("shard folders left after migrating back")
	}
}

// TestHandoverToShardKustomizationsKeepsEveryTenant: 100 tenants in shard
// folders, applied by the platform's dataplane-tenants Kustomization;
// `tenant-worker layout migrate --shard-kustomizations`, with a worker
// publishing (ARTIFACT_URL), hands them over to one Kustomization per shard
// folder. Not one HelmRelease or Namespace is deleted or marked for
// deletion at any moment, every HelmRelease keeps its uid, dataplane-tenants
// ends resumed with no tenant left in its inventory, and an onboarding
// after it is applied by its shard's Kustomization.
func TestHandoverToShardKustomizationsKeepsEveryTenant(t *testing.T) {
	// Not side by side with others: its migration must run within the
	// hold of an apply, which the API server bounds (holdWindow).
	const tenants = 100
	ctx := context.Background()
	h := newHarness(t, false)
	srv := h.httpBackend()

	// The branch: the tenants already in 4 shard folders per tier.
	seed, err := templates.WithTenants("premium", migIDs(tenants)...)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := gitops.Layout{Root: templates.Root}.Migrate(gitops.FS{FS: seed}, 4)
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range moved {
		if b == nil {
			delete(seed, p)
		} else {
			seed[p] = &fstest.MapFile{Data: b}
		}
	}
	if err := os.RemoveAll(srv.RepoPath(repoName)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.CreateRepo(repoName, "main", seed); err != nil {
		t.Fatal(err)
	}

	cp := startControlPlane(t, controlplane.Options{ControllerManager: true, Flux: true,
		KustomizeFlags: shardFlags(t)})
	var releases, spaces deletions
	releases.added, spaces.added = map[string]bool{}, map[string]bool{}
	releases.watch(t, cp, flux.HelmReleases, controlplane.Namespace)
	spaces.watch(t, cp, namespaces, "")
	if _, err := cp.InstallPlatform(ctx, t.TempDir(), controlplane.PlatformOptions{RepoURL: h.git.RepoURL(repoName), Username: "git", Password: h.token}); err != nil {
		t.Fatal(err)
	}
	// The GitRepository fetches only when asked: a handover that resumed
	// the tenants Kustomization before its source had the commit would
	// take the tenants back at the old commit, then prune them all.
	if _, err := cp.Dynamic.Resource(flux.GitRepositories).Namespace(controlplane.Namespace).Patch(ctx, "flux-system",
		types.MergePatchType, []byte(`{"spec":{"interval":"10h"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	fc, err := flux.New(cp.Config, flux.Options{Namespace: controlplane.Namespace, GitRepository: "flux-system"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	head := func() string { out, _ := srv.Output(repoName, "rev-parse", "main"); return strings.TrimSpace(out) }
	tenantsK := func() *unstructured.Unstructured {
		k, _ := cp.Dynamic.Resource(flux.Kustomizations).Namespace(controlplane.Namespace).Get(ctx, "dataplane-tenants", metav1.GetOptions{})
		return k
	}
	h.waitFor("dataplane-tenants applied the 100 tenants", 5*time.Minute, func() bool {
		fc.RequestFetch(ctx, time.Now())
		k := tenantsK()
		rev, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
		return rev == "main@sha1:"+head()
	})
	before := map[string]string{}
	list2, err := cp.Dynamic.Resource(flux.HelmReleases).Namespace(controlplane.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list2.Items {
		if strings.HasPrefix(o.GetName(), "mig-") {
			before[o.GetName()] = string(o.GetUID())
		}
	}
	if len(before) != tenants {
		t.Fatalf("%d tenants' HelmReleases applied, want %d", len(before), tenants)
	}

	h.tune = chain(publishing(t), func(o *config.Options) {
		o.Kubeconfig, o.Readiness = cp.Kubeconfig, "off"
	})
	h.start()

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(h.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GIT_REPO_URL": h.git.RepoURL(repoName), "GIT_TOKEN_FILE": tokenFile, "KUBECONFIG": cp.Kubeconfig}
	// Migrated while dataplane-tenants applies every tenant: suspending
	// it does not stop that apply.
	out := migrateDuringApply(t, h, cp, "dataplane-tenants", env, "--shard-kustomizations")
	if !strings.Contains(out, "handed over: 4 shard Kustomizations") {
		t.Errorf("the handover says:\n%s", out)
	}

	after := map[string]string{}
	list3, err := cp.Dynamic.Resource(flux.HelmReleases).Namespace(controlplane.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list3.Items {
		after[o.GetName()] = string(o.GetUID())
	}
	for name, uid := range before {
		if after[name] != uid {
			t.Errorf("HelmRelease %s has uid %q, not %q", name, after[name], uid)
		}
	}
	for _, d := range []*deletions{&releases, &spaces} {
		d.mu.Lock()
		if len(d.deleted) > 0 {
			t.Errorf("deleted or marked for deletion: %v", d.deleted)
		}
		d.mu.Unlock()
	}
	k2 := tenantsK()
	if suspended, _, _ := unstructured.NestedBool(k2.Object, "spec", "suspend"); suspended {
		t.Error("dataplane-tenants is left suspended")
	}
	entries, _, _ := unstructured.NestedSlice(k2.Object, "status", "inventory", "entries")
	for _, e := range entries {
		if m, ok := e.(map[string]any); ok && strings.Contains(fmt.Sprint(m["id"]), "mig-") {
			t.Errorf("dataplane-tenants still holds %v", m["id"])
			break
		}
	}

	// After it: an onboarding is applied by its shard's Kustomization.
	h.send(h.q.onboarding, `{"tenant_id":"mig-new","tenant_tier":"premium","release_version":"0.0"}`)
	h.waitFor("mig-new's HelmRelease", 3*time.Minute, func() bool {
		_, err := cp.Dynamic.Resource(flux.HelmReleases).Namespace(controlplane.Namespace).Get(ctx, "mig-new-premium", metav1.GetOptions{})
		return err == nil
	})
	newUID := uids(t, cp, "mig-new")["mig-new-premium"]

	// And back: the tenants Kustomization takes them over again, the shard
	// Kustomizations go, and still nothing is deleted.
	// Handed back while a shard's Kustomization applies its tenants.
	migrateDuringApply(t, h, cp, publish.Name("premium", "shard-00"), env, "--no-shard-kustomizations")
	back := uids(t, cp, "mig-")
	for name, uid := range before {
		if back[name] != uid {
			t.Errorf("after handing back, HelmRelease %s has uid %q, not %q", name, back[name], uid)
		}
	}
	if back["mig-new-premium"] != newUID {
		t.Errorf("after handing back, mig-new's HelmRelease has uid %q, not %q", back["mig-new-premium"], newUID)
	}
	for _, d := range []*deletions{&releases, &spaces} {
		d.mu.Lock()
		if len(d.deleted) > 0 {
			t.Errorf("handing back deleted or marked for deletion: %v", d.deleted)
		}
		d.mu.Unlock()
	}
	// The worker publishes all along: nothing it makes is left, nor made
	// again from a commit before the handover's.
	for _, gvr := range []schema.GroupVersionResource{flux.Kustomizations, flux.ExternalArtifacts} {
		ks, err := cp.Dynamic.Resource(gvr).Namespace(controlplane.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=tenant-worker"})
		if err != nil || len(ks.Items) != 0 {
			t.Errorf("shard %s left: %d (%v)", gvr.Resource, len(ks.Items), err)
		}
	}
	held := 0
	entries, _, _ = unstructured.NestedSlice(tenantsK().Object, "status", "inventory", "entries")
	for _, e := range entries {
		if m, ok := e.(map[string]any); ok && strings.Contains(fmt.Sprint(m["id"]), "_mig-") && strings.Contains(fmt.Sprint(m["id"]), "HelmRelease") {
			held++
		}
	}
	if held != tenants+1 {
		t.Errorf("dataplane-tenants holds %d tenants' HelmReleases after handing back, want %d", held, tenants+1)
	}
}

// migrateDuringApply runs layout migrate with args while Kustomization k
// has an apply in flight: a reconcile of k is requested and held at its
// first write of a tenant's HelmRelease (a hook of the API server), the
// migration starts, and the hold ends once the migration says it waits for
// that apply, or once it pushes anyway, which fails the test: an apply
// that goes on after the push can take back tenants the migration gave
// away, and prune them later. It returns what the migration printed.
func migrateDuringApply(t *testing.T, h *harness, cp *controlplane.ControlPlane, k string, env map[string]string, args ...string) string {
	t.Helper()
	ctx := context.Background()
	hold := holdApply(t, cp, k)
	if _, err := cp.Dynamic.Resource(flux.Kustomizations).Namespace(controlplane.Namespace).Patch(ctx, k, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+flux.RequestedAtAnnotation+`":"`+time.Now().UTC().Format(time.RFC3339Nano)+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.held:
	case <-time.After(3 * time.Minute):
		t.Fatalf("planned fault did not happen: %s applied no HelmRelease within 3 minutes of a reconcile request", k)
	}
	var pushedWhileHeld atomic.Bool
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			select {
			case <-hold.release:
			default:
				pushedWhileHeld.Store(true)
				hold.free()
			}
		}
		return true
	})
	defer h.git.SetHook(nil)
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(append([]string{"layout", "migrate"}, args...), &out, &errOut, func(name string) string { return env[name] })
	}()
	var code int
	for waiting := true; waiting; {
		select {
		case code = <-done:
			waiting = false
		case <-hold.expired:
			hold.free()
			t.Errorf("planned fault did not last: the hold of %s's apply ended after %s, before the migration said it waits for it or pushed", k, holdWindow)
		case <-time.After(100 * time.Millisecond):
			if strings.Contains(out.String(), "to end the apply in flight") {
				hold.free()
			}
		}
	}
	hold.free()
	if code != 0 {
		t.Fatalf("layout migrate %s: exit %d\n%s%s\nworker log:\n%s", strings.Join(args, " "), code, out.String(), errOut.String(), tail(h.logs.String(), 3000))
	}
	if pushedWhileHeld.Load() {
		t.Errorf("layout migrate %s pushed while %s had an apply in flight:\n%s", strings.Join(args, " "), k, out.String())
	}
	return out.String()
}

// uids maps the names of the HelmReleases starting with prefix to their uids.
func uids(t *testing.T, cp *controlplane.ControlPlane, prefix string) map[string]string {
	t.Helper()
	list, err := cp.Dynamic.Resource(flux.HelmReleases).Namespace(controlplane.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range list.Items {
		if strings.HasPrefix(o.GetName(), prefix) {
			out[o.GetName()] = string(o.GetUID())
		}
	}
	return out
}

// migIDs are the ids mig-0 to mig-(n-1).
func migIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("mig-%d", i)
	}
	return ids
}
