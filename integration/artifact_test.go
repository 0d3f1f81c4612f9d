package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/tenant-worker/tenant-worker/deploy"
	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/publish"
	"github.com/tenant-worker/tenant-worker/internal/testenv/controlplane"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/internal/testenv/loopback"
	"github.com/tenant-worker/tenant-worker/templates"
)

// TestShardArtifactsOnARealControlPlane: with the tenants in shard folders,
// one ExternalArtifact per folder published by the worker and one
// Kustomization reading each, kustomize-controller (v1.9.6, feature gate
// ExternalArtifact) applies a folder from the worker's archive; a change
// of one folder is applied by that folder's Kustomization alone, with the
// commit as its origin revision, and an offboarding is pruned.
func TestShardArtifactsOnARealControlPlane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cp := startControlPlane(t, controlplane.Options{Flux: true,
		KustomizeFlags: shardFlags(t)})

	// The branch: premium tenants in 2 shard folders.
	srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	m, err := templates.MapFS()
	if err != nil {
		t.Fatal(err)
	}
	m[(gitops.Layout{Root: templates.Root}).LayoutFile()] = &fstest.MapFile{Data: gitops.Layout{Shards: 2, ShardKustomizations: true}.LayoutContent()}
	url, err := srv.CreateRepo("gitops.git", "main", m)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := gitrepo.Open(ctx, gitrepo.Options{URL: url, Branch: "main", LedgerBranch: "tenant-worker/ledger", Token: "tok",
		AuthorName: "admin", AuthorEmail: "admin@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(repo, pipeline.Options{Layout: gitops.Layout{Root: templates.Root}})
	apply := func(kind message.Kind, body string) applied {
		t.Helper()
		req, err := message.Decode(kind, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		res := p.ApplyOne(ctx, req)
		if res.Err != nil || !res.Applied {
			t.Fatalf("%s: %+v", body, res)
		}
		return applied{commit: res.Commit.String()}
	}
	var last applied
	for i := range 4 {
		last = apply(message.Onboarding, fmt.Sprintf(`{"tenant_id":"art-%d","tenant_tier":"premium","release_version":"0.0"}`, i))
	}

	// The worker's artifact server, on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pub := publish.New(publish.Options{Layout: gitops.Layout{Root: templates.Root}, Namespace: controlplane.Namespace,
		URL: "http://" + ln.Addr().String(), Client: cp.Dynamic, Branch: "main"})
	hs := &http.Server{Handler: pub}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	publishHead := func() []publish.Folder {
		t.Helper()
		var folders []publish.Folder
		// What the branch went through since the last publish, as the
		// worker reads it.
		err := p.ReadSince(ctx, pub.Last(), 64, func(chain []*gitrepo.Snapshot, complete bool) error {
			head := chain[len(chain)-1]
			var err error
			folders, err = pub.Publish(ctx, head, head.Commit.String(), publish.NewHistory(chain, complete))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return folders
	}
	folders := publishHead()
	if len(folders) != 2 {
		t.Fatalf("published %d folders, want the 2 shards of premium: %+v", len(folders), folders)
	}
	var docs []string
	for _, f := range folders {
		docs = append(docs, fmt.Sprintf(`apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: %s, namespace: %s}
spec:
  interval: 10m
  prune: true
  path: ./
  sourceRef: {kind: ExternalArtifact, name: %s}
`, f.Name, controlplane.Namespace, f.Name))
	}
	if err := cp.Apply(ctx, []byte(strings.Join(docs, "---\n"))); err != nil {
		t.Fatal(err)
	}
	origin := func(name string) string {
		k, err := cp.Dynamic.Resource(flux.Kustomizations).Namespace(controlplane.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		v, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedOriginRevision")
		return v
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not within 3 minutes", what)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	release := func(id string) error {
		_, err := cp.Dynamic.Resource(flux.HelmReleases).Namespace(controlplane.Namespace).Get(ctx, id+"-premium", metav1.GetOptions{})
		return err
	}
	for _, f := range folders {
		waitFor(f.Name+" applied at "+last.commit, func() bool { return origin(f.Name) == "main@sha1:"+last.commit })
	}
	for i := range 4 {
		if err := release(fmt.Sprintf("art-%d", i)); err != nil {
			t.Fatalf("art-%d: %v", i, err)
		}
	}

	// One more tenant: its folder alone changes and is applied.
	l := gitops.Layout{Root: templates.Root, Shards: 2, ShardKustomizations: true}
	changed := apply(message.Onboarding, `{"tenant_id":"art-new","tenant_tier":"premium","release_version":"0.0"}`)
	var moved, still string
	for _, f := range publishHead() {
		if f.Changed {
			moved = f.Name
		} else {
			still = f.Name
		}
	}
	if want := publish.Name("premium", l.Shard("art-new")); moved != want || still == "" {
		t.Fatalf("published %q as changed, %q as not; want %s alone changed", moved, still, want)
	}
	waitFor(moved+" applied at the onboarding's commit", func() bool { return origin(moved) == "main@sha1:"+changed.commit })
	waitFor("art-new's HelmRelease", func() bool { return release("art-new") == nil })
	if got := origin(still); got != "main@sha1:"+last.commit {
		t.Errorf("%s, whose folder did not change, applied %s", still, got)
	}

	// An offboarding is pruned by its folder's Kustomization.
	off := apply(message.Offboarding, `{"tenant_id":"art-new","tenant_tier":"premium"}`)
	publishHead()
	waitFor(moved+" applied at the offboarding's commit", func() bool { return origin(moved) == "main@sha1:"+off.commit })
	waitFor("art-new's HelmRelease pruned", func() bool { return apierrors.IsNotFound(release("art-new")) })
}

type applied struct{ commit string }

// TestWorkerPublishesShardArtifacts: a worker with ARTIFACT_URL, on a
// branch whose shard folders have Kustomizations of their own, publishes
// the folder an onboarding wrote and makes its Kustomization from the
// platform's tenants Kustomization (its prune and substitutions); Flux
// applies the tenant from the worker's archive, and prunes it after the
// offboarding.
func TestWorkerPublishesShardArtifacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, false)
	l := gitops.Layout{Root: templates.Root, Shards: 4, ShardKustomizations: true}
	if err := h.httpBackend().WriteFile(repoName, "main", l.LayoutFile(), string(l.LayoutContent()), "shard folders with Kustomizations of their own"); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, h, shardFlags(t)...)
	cp := c.ControlPlane
	// The worker runs as the chart's ServiceAccount with the artifacts
	// rules alone (readiness off): what they do not grant fails this test.
	kubeconfig := c.chartIdentity(t, map[string]any{
		"readiness": map[string]any{"enabled": false}, "artifacts": map[string]any{"enabled": true}})
	h.tune = chain(publishing(t), func(o *config.Options) {
		o.Kubeconfig, o.Readiness = kubeconfig, "off"
	})
	h.start()

	name := publish.Name("premium", l.Shard("pub-1"))
	kustomization := func() *unstructured.Unstructured {
		k, err := cp.Dynamic.Resource(flux.Kustomizations).Namespace(controlplane.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return k
	}
	release := func() error {
		_, err := cp.Dynamic.Resource(flux.HelmReleases).Namespace(controlplane.Namespace).Get(ctx, "pub-1-premium", metav1.GetOptions{})
		return err
	}
	head := func() string {
		out, _ := h.httpBackend().Output(repoName, "rev-parse", "main")
		return strings.TrimSpace(out)
	}
	applied := func() string {
		k := kustomization()
		if k == nil {
			return ""
		}
		v, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedOriginRevision")
		return v
	}

	start := head()
	h.send(h.q.onboarding, `{"tenant_id":"pub-1","tenant_tier":"premium","release_version":"0.0"}`)
	h.waitFor("the onboarding pushed", time.Minute, func() bool { return head() != start })
	onboarded := head()
	h.waitFor(name+" applied at the onboarding's commit", 3*time.Minute, func() bool { return applied() == "main@sha1:"+onboarded })
	if err := release(); err != nil {
		t.Fatalf("pub-1's HelmRelease after its folder was applied: %v", err)
	}
	k := kustomization()
	prune, _, _ := unstructured.NestedBool(k.Object, "spec", "prune")
	subst, _, _ := unstructured.NestedSlice(k.Object, "spec", "postBuild", "substituteFrom")
	if kind, _, _ := unstructured.NestedString(k.Object, "spec", "sourceRef", "kind"); kind != "ExternalArtifact" || !prune || len(subst) == 0 {
		t.Errorf("%s: source %s, prune %v, substitutions %v: want the ExternalArtifact and the tenants Kustomization's settings", name, kind, prune, subst)
	}
	// ARTIFACT_INTERVAL's default, not the tenants Kustomization's 1m0s.
	if iv, _, _ := unstructured.NestedString(k.Object, "spec", "interval"); iv != "10m0s" {
		t.Errorf("%s: interval %q, want ARTIFACT_INTERVAL's 10m0s", name, iv)
	}
	if tier, _ := h.httpBackend().Output(repoName, "show", "main:"+l.TierKustomization("premium")); strings.Contains(tier, "shard-") {
		t.Errorf("the tier lists a shard folder, so dataplane-tenants applies it too:\n%s", tier)
	}

	h.send(h.q.offboarding, `{"tenant_id":"pub-1","tenant_tier":"premium"}`)
	h.waitFor("the offboarding pushed", time.Minute, func() bool { return head() != onboarded })
	offboarded := head()
	h.waitFor(name+" applied at the offboarding's commit", 3*time.Minute, func() bool { return applied() == "main@sha1:"+offboarded })
	h.waitFor("pub-1's HelmRelease pruned", time.Minute, func() bool { return apierrors.IsNotFound(release()) })
}

// TestReadinessWithShardKustomizations: with each shard folder applied by a
// Kustomization of its own from the worker's ExternalArtifact, the
// readiness event of an onboarding still says ready once its HelmRelease
// is, and that of its offboarding once it is gone; every other outcome
// (superseded, failed, ready after a restart, timeout) comes as it does
// with one tenants Kustomization. The worker runs with the chart's
// readiness and artifacts rules.
func TestReadinessWithShardKustomizations(t *testing.T) {
	t.Parallel()
	h, _, resultsURL, c, kubeconfig := shardCluster(t)
	h.tune = chain(chain(h.tune, publishing(t)), func(o *config.Options) {
		o.Kubeconfig, o.ReadyTimeout = kubeconfig, 2*time.Minute
	})
	h.start()
	id := h.send(h.q.onboarding, `{"tenant_id":"rs-1","tenant_tier":"premium","release_version":"0.0"}`)
	if ev := waitReadiness(t, h, resultsURL, id, 3*time.Minute); ev.Outcome != "ready" {
		t.Fatalf("onboarding's readiness event: %+v", ev)
	}
	if hr := c.release(t, "rs-1-premium"); hr == nil || !controlplane.ConditionTrue(hr, "Ready") {
		t.Fatalf("the event says ready, the HelmRelease is %v", hr)
	}
	id = h.send(h.q.offboarding, `{"tenant_id":"rs-1","tenant_tier":"premium"}`)
	if ev := waitReadiness(t, h, resultsURL, id, 3*time.Minute); ev.Outcome != "ready" {
		t.Fatalf("offboarding's readiness event: %+v", ev)
	}
	if hr := c.release(t, "rs-1-premium"); hr != nil && hr.GetDeletionTimestamp() == nil {
		t.Fatalf("the event says the offboarding is done, the HelmRelease is still there")
	}
	followEveryOutcome(t, h, c, resultsURL, "rs")
}

// shardCluster is a harness whose branch has 4 shard folders per tier with
// Kustomizations of their own, a results queue, and a control plane with
// the platform; kubeconfig is the chart's identity with the readiness and
// artifacts rules. The worker is not started.
func shardCluster(t *testing.T) (h *harness, l gitops.Layout, resultsURL string, c *cluster, kubeconfig string) {
	t.Helper()
	h = newHarness(t, false)
	l = gitops.Layout{Root: templates.Root, Shards: 4, ShardKustomizations: true}
	if err := h.httpBackend().WriteFile(repoName, "main", l.LayoutFile(), string(l.LayoutContent()), "shard folders with Kustomizations of their own"); err != nil {
		t.Fatal(err)
	}
	resultsURL = h.withResults()
	c = startCluster(t, h, shardFlags(t)...)
	kubeconfig = c.chartIdentity(t, map[string]any{"artifacts": map[string]any{"enabled": true}})
	return h, l, resultsURL, c, kubeconfig
}

// publishing sets a worker to publish shard folders (ARTIFACT_URL) on a
// free loopback port.
func publishing(t *testing.T) func(*config.Options) {
	t.Helper()
	port, err := loopback.FreePort() // never a port another test's listener gets
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return func(o *config.Options) { o.ArtifactAddr, o.ArtifactURL = addr, "http://"+addr }
}

// shardFlags are the kustomize-controller flags deploy/flux ships for
// shard folders with Kustomizations of their own.
func shardFlags(t *testing.T) []string {
	t.Helper()
	flags, err := deploy.KustomizeControllerFlags()
	if err != nil {
		t.Fatal(err)
	}
	return flags
}

// TestAFolderBackToItsContentDuringAnApplyIsApplied: a shard folder that
// goes back to what it held (a second tenant's onboarding, then its
// offboarding) while kustomize-controller applies the onboarding's archive.
// The worker holds the offboarding's archive until that apply is done
// (kustomize-controller, starting the next revision at once from a cache
// without its own last status, may neither prune the onboarding's objects
// nor keep them in its inventory), then publishes it under a revision of
// its own; the offboarding is ready only once the folder's Kustomization
// applied it, not when the tenants Kustomization, which does not apply
// shard folders, applied the commit. The fault is held at protocol
// points: the onboarding's archive download is held until the worker held
// the offboarding's archive and the tenants Kustomization applied the
// offboarding's commit. The tenant that stays is not touched.
func TestAFolderBackToItsContentDuringAnApplyIsApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, l, resultsURL, c, kubeconfig := shardCluster(t)
	cp := c.ControlPlane
	hold := newHoldingProxy(t)
	h.tune = chain(h.tune, func(o *config.Options) {
		o.ArtifactAddr, o.ArtifactURL = hold.backend, hold.url
		o.Kubeconfig, o.ReadyTimeout = kubeconfig, 2*time.Minute
	})
	h.start()

	// Two tenants of one shard folder: the first stays, the second comes
	// and goes while the folder's Kustomization applies its coming.
	const stays = "back-0"
	shard := l.Shard(stays)
	tenant := ""
	for i := 1; tenant == ""; i++ {
		if id := fmt.Sprintf("back-%d", i); l.Shard(id) == shard {
			tenant = id
		}
	}
	name := publish.Name("premium", shard)
	get := func(gvr schema.GroupVersionResource) *unstructured.Unstructured {
		o, err := cp.Dynamic.Resource(gvr).Namespace(controlplane.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return o
	}
	field := func(o *unstructured.Unstructured, f ...string) string {
		if o == nil {
			return ""
		}
		v, _, _ := unstructured.NestedString(o.Object, f...)
		return v
	}
	head := func() string {
		out, _ := h.httpBackend().Output(repoName, "rev-parse", "main")
		return strings.TrimSpace(out)
	}
	if ev := waitReadiness(t, h, resultsURL, h.send(h.q.onboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":"premium","release_version":"0.0"}`, stays)), 3*time.Minute); ev.Outcome != "ready" {
		t.Fatalf("the first tenant's onboarding: %+v", ev)
	}
	h.waitFor(name+" applied as the folder is", 3*time.Minute, func() bool {
		a := field(get(flux.ExternalArtifacts), "status", "artifact", "revision")
		return a != "" && field(get(flux.Kustomizations), "status", "lastAppliedRevision") == a
	})

	hold.arm("/premium/" + shard + "/")
	start := head()
	on := h.send(h.q.onboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":"premium","release_version":"0.0"}`, tenant))
	hold.waitHeld(t, 2*time.Minute) // kustomize-controller is fetching the onboarding's folder
	if head() == start {
		t.Fatal("an archive was fetched before the onboarding was pushed")
	}
	off := h.send(h.q.offboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":"premium"}`, tenant))
	h.waitFor("the offboarding pushed", time.Minute, func() bool { return h.finished(off) })
	offCommit := head()
	// The worker holds the folder's new archive while its Kustomization
	// applies the one before.
	h.waitFor("the offboarding's archive held", time.Minute, func() bool {
		return len(h.logs.lines("message", "a shard folder waits for its Kustomization's apply")) > 0
	})
	if o := field(get(flux.ExternalArtifacts), "status", "artifact", "metadata", publish.OriginRevision); o == "main@sha1:"+offCommit {
		t.Fatalf("%s was published while its Kustomization applied the archive before", name)
	}
	// And the tenants Kustomization applied the offboarding's commit, which
	// holds no shard folder: a follower trusting it would call the
	// offboarding ready now, the onboarding's HelmRelease not made yet.
	h.waitFor("dataplane-tenants applied the offboarding's commit", 2*time.Minute, func() bool {
		k, err := cp.Dynamic.Resource(flux.Kustomizations).Namespace(controlplane.Namespace).Get(ctx, "dataplane-tenants", metav1.GetOptions{})
		return err == nil && field(k, "status", "lastAppliedRevision") == "main@sha1:"+offCommit
	})
	hold.release()

	ev := waitReadiness(t, h, resultsURL, off, 3*time.Minute)
	if ev.Outcome != "ready" {
		t.Errorf("the offboarding of a folder back to what it held: %+v", ev)
	}
	offRevision := field(get(flux.ExternalArtifacts), "status", "artifact", "revision")
	if o := field(get(flux.ExternalArtifacts), "status", "artifact", "metadata", publish.OriginRevision); o != "main@sha1:"+offCommit {
		t.Errorf("%s is from %s, want the offboarding's %s", name, o, offCommit)
	}
	// Applied once the folder's Kustomization applied the offboarding's
	// archive, which it started after the onboarding's.
	applied, ok := logTime(cp.Logs("kustomize-controller", 1<<22), name, "server-side apply completed", offRevision)
	if !ok {
		t.Errorf("%s never applied the offboarding's archive %s", name, offRevision)
	} else if ev.Stages == nil || ev.Stages.PushedAt.Add(time.Duration(ev.Stages.AppliedMS)*time.Millisecond).Before(applied) {
		t.Errorf("the offboarding was applied (stages %+v) before %s applied its archive at %s", ev.Stages, name, applied.Format(time.RFC3339Nano))
	}
	if ev := waitReadiness(t, h, resultsURL, on, time.Minute); ev.Outcome != "superseded" {
		t.Errorf("the onboarding: %+v", ev)
	}
	// The fault happened: the held download was the onboarding's folder,
	// applied (its HelmRelease made) after the offboarding was published.
	if !strings.Contains(cp.Logs("kustomize-controller", 1<<22), `"HelmRelease/flux-system/`+tenant+`-premium":"created"`) {
		t.Errorf("kustomize-controller never applied the onboarding's folder: the held download did not complete")
	}
	if hr := c.release(t, tenant+"-premium"); hr != nil && hr.GetDeletionTimestamp() == nil {
		t.Errorf("%s-premium is still there", tenant)
	}
	if hr := c.release(t, stays+"-premium"); hr == nil || hr.GetDeletionTimestamp() != nil {
		t.Errorf("%s-premium, which no message removed, is gone", stays)
	}
}

// logTime is the time of the last JSON line of a controller's log about
// object name with message msg and revision rev.
func logTime(log, name, msg, rev string) (time.Time, bool) {
	var at time.Time
	found := false
	for _, line := range strings.Split(log, "\n") {
		var m struct {
			TS       time.Time `json:"ts"`
			Msg      string    `json:"msg"`
			Name     string    `json:"name"`
			Revision string    `json:"revision"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Name == name && m.Msg == msg && m.Revision == rev {
			at, found = m.TS, true
		}
	}
	return at, found
}

// holdingProxy stands between kustomize-controller and the worker's
// archives: once armed, it holds the first download whose path contains
// the armed text until released.
type holdingProxy struct {
	url, backend string
	mu           sync.Mutex
	match        string
	held         chan struct{}
	released     chan struct{}
}

func newHoldingProxy(t *testing.T) *holdingProxy {
	t.Helper()
	port, err := loopback.FreePort() // the worker's, once it starts: no other listener gets it
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{backend: fmt.Sprintf("127.0.0.1:%d", port), held: make(chan struct{}), released: make(chan struct{})}
	target := &url.URL{Scheme: "http", Host: p.backend}
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		hold := p.match != "" && strings.Contains(r.URL.Path, p.match)
		if hold {
			p.match = ""
			close(p.held)
		}
		p.mu.Unlock()
		if hold {
			t.Logf("holding GET %s", r.URL.Path)
			select {
			case <-p.released:
			case <-r.Context().Done():
				t.Logf("GET %s: %v", r.URL.Path, r.Context().Err())
				return
			}
			t.Logf("released GET %s", r.URL.Path)
		}
		rec := &statusRecorder{ResponseWriter: w}
		rp.ServeHTTP(rec, r)
		t.Logf("GET %s: %d", r.URL.Path, rec.status)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(p.release)
	p.url = srv.URL
	return p
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (p *holdingProxy) arm(match string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match = match
}

// waitHeld fails the test unless a download is held within timeout.
func (p *holdingProxy) waitHeld(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.held:
	case <-time.After(timeout):
		t.Fatalf("no download was held within %s", timeout)
	}
}

func (p *holdingProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.released:
	default:
		close(p.released)
	}
}

// TestATierMoveKeepsTheNamespace: under shard Kustomizations, a tenant
// moved from premium to advanced, and back, each in one commit (the
// onboarding to the new tier arrives first and is held, the offboarding
// sent before it carries out the move). Both tiers declare the tenant's
// Namespace; its file leaves one shard folder for another, applied by two
// Kustomizations. The worker publishes the folder taking the Namespace
// first and the one giving it up once the taker applied it, so the
// Namespace is never deleted nor terminating: its uid and an object made
// in it by hand stay. Each move is pushed as one commit that the intent
// check passes (no pause), and its readiness event says ready.
func TestATierMoveKeepsTheNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, _, resultsURL, c, kubeconfig := shardCluster(t)
	h.tune = chain(chain(h.tune, publishing(t)), func(o *config.Options) {
		o.Kubeconfig, o.ReadyTimeout = kubeconfig, 3*time.Minute
	})
	h.start()
	const id = "mv-1"
	if ev := waitReadiness(t, h, resultsURL, h.send(h.q.onboarding, `{"tenant_id":"`+id+`","tenant_tier":"premium","release_version":"0.0"}`), 3*time.Minute); ev.Outcome != "ready" {
		t.Fatalf("onboarding: %+v", ev)
	}
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	marker := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker", Namespace: id}, Data: map[string]string{"made": "by hand"}}
	if _, err := c.Client.CoreV1().ConfigMaps(id).Create(ctx, marker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := c.Client.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + id, ResourceVersion: ns.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var deleting atomic.Value
	go func() {
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Namespace); ok && (ev.Type == watch.Deleted || n.DeletionTimestamp != nil) {
				deleting.CompareAndSwap(nil, fmt.Sprintf("%s at %s", ev.Type, time.Now().Format(time.RFC3339Nano)))
			}
		}
	}()
	for _, move := range [][2]string{{"premium", "advanced"}, {"advanced", "premium"}} {
		from, to := move[0], move[1]
		// The offboarding is sent first and arrives last: the onboarding
		// is held until it comes, and both go in one commit.
		off, err := h.api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(h.q.offboarding), DelaySeconds: 3,
			MessageBody: aws.String(`{"tenant_id":"` + id + `","tenant_tier":"` + from + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // a send time of its own
		on := h.send(h.q.onboarding, `{"tenant_id":"`+id+`","tenant_tier":"`+to+`","release_version":"0.0"}`)
		if line := h.outcome(on); line["message"] != heldLine {
			t.Fatalf("the onboarding to %s: %v, want held", to, line)
		}
		if ev := waitReadiness(t, h, resultsURL, aws.ToString(off.MessageId), 4*time.Minute); ev.Outcome != "ready" {
			t.Fatalf("the move to %s: %+v\n%s", to, ev, c.digest(h))
		}
		if hr := c.release(t, id+"-"+to); hr == nil || !controlplane.ConditionTrue(hr, "Ready") {
			t.Fatalf("after the move to %s its HelmRelease is %v", to, hr)
		}
		now, err := c.Client.CoreV1().Namespaces().Get(ctx, id, metav1.GetOptions{})
		if err != nil || now.UID != ns.UID || now.DeletionTimestamp != nil {
			t.Fatalf("after the move to %s the Namespace is %v (%v), uid %s, was %s", to, now, err, now.GetUID(), ns.UID)
		}
		if _, err := c.Client.CoreV1().ConfigMaps(id).Get(ctx, "marker", metav1.GetOptions{}); err != nil {
			t.Fatalf("after the move to %s the object made in the Namespace is gone: %v", to, err)
		}
		if d := deleting.Load(); d != nil {
			t.Fatalf("the Namespace was being deleted during the move to %s: %v", to, d)
		}
	}
	if n := len(h.logs.naming(`"pause"`)); n > 0 {
		t.Fatalf("the worker paused: %v", h.logs.naming(`"pause"`))
	}
}
