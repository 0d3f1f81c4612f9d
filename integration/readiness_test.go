package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/results"
	"github.com/tenant-worker/tenant-worker/internal/testenv/controlplane"
	"github.com/tenant-worker/tenant-worker/templates"
)

// cluster is a control plane with Flux, the platform's Flux objects
// pointed at the harness's repository, and the stand-ins for what it lacks.
type cluster struct {
	*controlplane.ControlPlane
	standIn  *controlplane.StandIn
	platform *controlplane.Platform
}

// startCluster runs a control plane for h's repository until the test ends.
// kustomizeFlags are added to kustomize-controller's.
func startCluster(t *testing.T, h *harness, kustomizeFlags ...string) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cp := startControlPlane(t, controlplane.Options{ControllerManager: true, Flux: true, KustomizeFlags: kustomizeFlags})
	c := &cluster{ControlPlane: cp, standIn: cp.StartStandIn(ctx)}
	t.Cleanup(func() { // before the controllers' tails (startControlPlane's)
		if t.Failed() {
			t.Logf("in short:\n%s", c.digest(h))
		}
	})
	var err error
	if c.platform, err = cp.InstallPlatform(ctx, t.TempDir(), controlplane.PlatformOptions{
		RepoURL: h.git.RepoURL(repoName), Username: "git", Password: h.token,
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// startControlPlane runs a control plane until the test ends; Flux's
// controllers' logs are shown when the test fails.
func startControlPlane(t *testing.T, o controlplane.Options) *controlplane.ControlPlane {
	t.Helper()
	cp, err := controlplane.Start(context.Background(), t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	t.Cleanup(func() {
		if t.Failed() && o.Flux {
			for _, name := range []string{"source-controller", "kustomize-controller", "helm-controller"} {
				t.Logf("%s log:\n%s", name, cp.Logs(name, 3000))
			}
		}
	})
	return cp
}

// digest is what a failed cluster test prints first, in a few KB (a CI
// log keeps the start and the end of a long output): the Flux objects at
// the end, then, shortened, the worker's lines about publishing and
// readiness and kustomize-controller's lines about the Kustomizations the
// worker makes (one per shard folder, named tenants-…).
func (c *cluster) digest(h *harness) string {
	var b strings.Builder
	b.WriteString("Flux objects at the end:\n")
	b.WriteString(fluxObjects(c.ControlPlane))
	b.WriteString("the worker, on publishing and readiness:\n")
	b.WriteString(brief(h.logs.String(), 3000, func(m map[string]any) bool {
		msg := fmt.Sprint(m["message"])
		return m["external_artifact"] != nil || strings.Contains(msg, "publish") || strings.Contains(msg, "ready") ||
			m["level"] == "warn" || m["level"] == "error"
	}))
	b.WriteString("kustomize-controller, on the worker's Kustomizations:\n")
	b.WriteString(brief(c.Logs("kustomize-controller", 1<<22), 4000, func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["name"]), "tenants-")
	}))
	return b.String()
}

// brief is the last n bytes of the JSON lines of log that keep accepts,
// each cut to its time of day, message, and the fields that tell what
// happened to which object.
func brief(log string, n int, keep func(map[string]any) bool) string {
	var b strings.Builder
	for _, line := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || !keep(m) {
			continue
		}
		at := fmt.Sprint(m["ts"], m["time"])
		if i := strings.IndexByte(at, 'T'); i >= 0 {
			at = at[i+1:]
		}
		msg := m["msg"]
		if msg == nil {
			msg = m["message"]
		}
		fmt.Fprintf(&b, "%s %q", strings.TrimSuffix(at, "<nil>"), msg)
		for _, k := range []string{"name", "external_artifact", "revision", "commit", "message_id", "outcome", "error", "output"} {
			if v, ok := m[k]; ok {
				s := fmt.Sprint(v)
				if j, err := json.Marshal(v); err == nil && k == "output" {
					s = string(j)
				}
				if len(s) > 160 {
					s = s[:160] + "…"
				}
				fmt.Fprintf(&b, " %s=%s", k, s)
			}
		}
		b.WriteByte('\n')
	}
	out := b.String()
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// fluxObjects lists the Kustomizations, ExternalArtifacts and HelmReleases
// of Flux's namespace with their revisions and Ready condition, for a
// failed test's log.
func fluxObjects(cp *controlplane.ControlPlane) string {
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, gvr := range []schema.GroupVersionResource{flux.Kustomizations, flux.ExternalArtifacts, flux.HelmReleases} {
		list, err := cp.Dynamic.Resource(gvr).Namespace(controlplane.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", gvr.Resource, err)
			continue
		}
		for _, o := range list.Items {
			applied, _, _ := unstructured.NestedString(o.Object, "status", "lastAppliedRevision")
			artifact, _, _ := unstructured.NestedString(o.Object, "status", "artifact", "revision")
			ready := ""
			if m := controlplane.Condition(&o, "Ready"); m != nil {
				ready = fmt.Sprintf("%v %v: %v (%v)", m["status"], m["reason"], m["message"], m["lastTransitionTime"])
			}
			fmt.Fprintf(&b, "%s %s deleting=%v applied=%q artifact=%q ready=%s\n", o.GetKind(), o.GetName(),
				o.GetDeletionTimestamp() != nil, applied, artifact, ready)
		}
	}
	return b.String()
}

// chartIdentity applies the ServiceAccount and the readiness RBAC the
// worker's Helm chart renders (release tenant-worker in namespace
// tenant-worker, default values) and returns a kubeconfig with a token of
// that ServiceAccount.
func (c *cluster) chartIdentity(t *testing.T, values ...map[string]any) string {
	t.Helper()
	ctx := context.Background()
	ch, err := loader.Load(filepath.Join("..", "deploy", "helm", "tenant-worker"))
	if err != nil {
		t.Fatal(err)
	}
	const ns = "tenant-worker"
	given := map[string]any{"git": map[string]any{"repoUrl": "https://git.example.com/x.git"},
		"queues": map[string]any{"onboarding": "a", "offboarding": "b", "deployment": "c"}}
	for _, v := range values {
		maps.Copy(given, v)
	}
	vals, err := chartutil.ToRenderValues(ch, given,
		chartutil.ReleaseOptions{Name: "tenant-worker", Namespace: ns, Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var sa string
	for _, name := range []string{"tenant-worker/templates/serviceaccount.yaml", "tenant-worker/templates/rbac.yaml"} {
		objs, err := controlplane.Decode([]byte(files[name]))
		if err != nil || len(objs) == 0 {
			t.Fatalf("%s: %v (%d objects)", name, err, len(objs))
		}
		for _, o := range objs {
			if o.GetKind() == "ServiceAccount" {
				o.SetNamespace(ns)
				sa = o.GetName()
			}
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Apply(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	tok, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "worker.kubeconfig")
	if err := c.TokenKubeconfig(path, tok.Status.Token); err != nil {
		t.Fatal(err)
	}
	return path
}

// release reads a HelmRelease; nil when it does not exist.
func (c *cluster) release(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	hr, err := c.Dynamic.Resource(flux.HelmReleases).Namespace(controlplane.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return hr
}

// waitReadiness waits for the readiness event of message id.
func waitReadiness(t *testing.T, h *harness, resultsURL, id string, timeout time.Duration) results.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ev, err := results.Wait(ctx, h.api, resultsURL, id, func(e results.Event) bool {
		return e.Stages != nil
	}, nil)
	if err != nil {
		t.Fatalf("no readiness event for %s: %v\nworker log:\n%s", id, err, tail(h.logs.String(), 4000))
	}
	return ev
}

// TestReadinessOnARealControlPlane follows tenant changes from the push to
// the HelmRelease, against kube-apiserver with Flux's own controllers
// reading the platform's own objects: three tiers onboarded, a deployment,
// an offboarding, a release with no chart, and a tenant that never becomes
// available.
func TestReadinessOnARealControlPlane(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	resultsURL := h.withResults()
	c := startCluster(t, h)
	// The worker runs as the chart's ServiceAccount, with exactly the
	// chart's RBAC: what it may not do fails this test.
	kubeconfig := c.chartIdentity(t)
	h.tune = chain(h.tune, func(o *config.Options) {
		o.Kubeconfig = kubeconfig
		o.ReadyTimeout = 2 * time.Minute
	})
	h.start()
	if got := h.httpGet("/readyz"); got != "ready\n" {
		t.Fatalf("readyz = %q", got)
	}

	// Three tiers, each to ready, with the tenant's values in the cluster.
	tenants := map[string]string{"premium": "rd-prem", "advanced": "rd-adv", "basic": "rd-bas"}
	ids := map[string]string{}
	for tier, tenant := range tenants {
		ids[tier] = h.send(h.q.onboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q,"release_version":"0.0"}`, tenant, tier))
	}
	for tier, tenant := range tenants {
		ev := waitReadiness(t, h, resultsURL, ids[tier], 3*time.Minute)
		if ev.Outcome != "ready" || ev.TenantID != tenant || ev.Tier != tier || ev.Kind != "onboarding" {
			t.Fatalf("%s: readiness event %+v", tier, ev)
		}
		t.Logf("%s: fetched %d ms, applied %d ms, ready %d ms after the push", tier, ev.Stages.FetchedMS, ev.Stages.AppliedMS, ev.Stages.DoneMS)
		if ev.Stages.FetchedMS <= 0 || ev.Stages.AppliedMS < ev.Stages.FetchedMS || ev.Stages.DoneMS < ev.Stages.AppliedMS {
			t.Errorf("%s: stages out of order: %+v", tier, *ev.Stages)
		}
		hr := c.release(t, tenant+"-"+tier)
		if hr == nil || !controlplane.ConditionTrue(hr, "Ready") {
			t.Fatalf("%s: HelmRelease %s-%s not ready: %v", tier, tenant, tier, hr)
		}
		if v, _, _ := unstructured.NestedString(hr.Object, "spec", "values", "tenantId"); v != tenant {
			t.Errorf("%s: HelmRelease values.tenantId = %q", tier, v)
		}
		// The chart's workloads are in the release's target namespace (the
		// tenant's own, or the pool's for basic).
		ns, _, _ := unstructured.NestedString(hr.Object, "spec", "targetNamespace")
		deps, err := c.Client.AppsV1().Deployments(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil || len(deps.Items) == 0 {
			t.Errorf("%s: no Deployments of the release in namespace %q: %v", tier, ns, err)
		}
	}
	if c.standIn.Writes("Deployment") == 0 {
		t.Error("the stand-in wrote no Deployment status: the readiness test proved nothing of Helm's wait")
	}
	runs := h.apiRuns("?id=" + ids["premium"])
	if len(runs.Runs) != 1 || runs.Runs[0].Live != "ready" || runs.Runs[0].LiveMS["applied"] <= 0 {
		t.Errorf("/api/runs does not show the run ready in the cluster: %+v", runs.Runs)
	}
	if page := h.httpGet("/?id=" + ids["premium"]); !strings.Contains(page, `data-live="ready"`) {
		t.Errorf("the status page does not show the run ready in the cluster:\n%s", page)
	}

	// A person onboards a tenant and waits until it is live.
	out, errOut, code := h.cli(queueName(resultsURL), "send", "onboarding", "--tenant-id", "rd-cli", "--tier", "advanced",
		"--release", "0.0", "--wait", "--until", "ready")
	if code != 0 || !strings.Contains(out, "applied: onboarding rd-cli advanced") || !strings.Contains(out, "ready: onboarding rd-cli advanced is live in the cluster") {
		t.Fatalf("send --wait --until ready: exit %d\n%s\n%s", code, out, errOut)
	}

	// A deployment moves every HelmRelease of the tier to chart 1.0.x.
	dep := h.send(h.q.deployment, `{"tenant_tier":"premium","release_version":"1.0"}`)
	if ev := waitReadiness(t, h, resultsURL, dep, 3*time.Minute); ev.Outcome != "ready" {
		t.Fatalf("deployment: %+v", ev)
	}
	hr := c.release(t, "rd-prem-premium")
	hist, _, _ := unstructured.NestedSlice(hr.Object, "status", "history")
	if len(hist) == 0 || !strings.HasPrefix(fmt.Sprint(hist[0].(map[string]any)["chartVersion"]), "1.0.") {
		t.Errorf("after the deployment the release is at %v, not 1.0.x", hist)
	}

	// Offboardings: the release and then the tenant's namespace are gone
	// (advanced has a namespace of its own; basic lives in the pool's).
	for _, tn := range []struct{ tenant, tier, namespace string }{{"rd-adv", "advanced", "rd-adv"}, {"rd-bas", "basic", ""}} {
		if tn.namespace != "" {
			if _, err := c.Client.CoreV1().Namespaces().Get(context.Background(), tn.namespace, metav1.GetOptions{}); err != nil {
				t.Fatalf("%s: no namespace before the offboarding: %v", tn.tenant, err)
			}
		}
		off := h.send(h.q.offboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q}`, tn.tenant, tn.tier))
		if ev := waitReadiness(t, h, resultsURL, off, 3*time.Minute); ev.Outcome != "ready" || ev.Kind != "offboarding" {
			t.Fatalf("offboarding %s: %+v", tn.tenant, ev)
		}
		if c.release(t, tn.tenant+"-"+tn.tier) != nil {
			t.Errorf("the offboarded tenant %s's HelmRelease still exists", tn.tenant)
		}
		if tn.namespace != "" {
			h.waitFor("the offboarded tenant's namespace to be deleted", 2*time.Minute, func() bool {
				_, err := c.Client.CoreV1().Namespaces().Get(context.Background(), tn.namespace, metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			})
		}
	}

	followEveryOutcome(t, h, c, resultsURL, "rd")

	// A cluster whose Flux no longer serves helm.toolkit.fluxcd.io/v2beta1,
	// which the platform's templates say: reported at start, with the fix.
	c.unserve(t, "helmreleases.helm.toolkit.fluxcd.io", "v2beta1")
	h.stop()
	h.launchInProcess()
	h.waitFor("the unserved kind on /readyz", 30*time.Second, func() bool {
		return strings.Contains(h.httpGet("/readyz"), "helm.toolkit.fluxcd.io/v2beta1 HelmRelease")
	})
	readyz := h.httpGet("/readyz")
	if !strings.Contains(readyz, "write apiVersion: helm.toolkit.fluxcd.io/v2") {
		t.Errorf("/readyz names no fix: %q", readyz)
	}
	if !strings.Contains(h.httpGet("/metrics"), "tenant_worker_unserved_kinds 1") {
		t.Error("the metric does not count the unserved kind")
	}
	if !strings.Contains(h.httpGet("/"), "v2beta1") {
		t.Error("the status page does not show the unserved kind")
	}

	// Someone adds a kind no cluster serves to a template: reported once
	// the worker has seen the commit (a message makes it fetch).
	tmpl := "tier-templates/basic_tenant_template.yaml"
	body := h.file(tmpl) + "\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {TENANT_ID}-widget\n  namespace: flux-system\n"
	if err := h.git.WriteFile(repoName, "main", templates.Root+"/"+tmpl, body, "Add a widget to the basic tier"); err != nil {
		t.Fatal(err)
	}
	// A message makes the worker fetch.
	widget := h.send(h.q.onboarding, `{"tenant_id":"rd-widget","tenant_tier":"basic","release_version":"0.0"}`)
	h.waitFor("the onboarding after the template change", time.Minute, func() bool { return h.finished(widget) })
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(h.httpGet("/metrics"), "tenant_worker_unserved_kinds 2") || !strings.Contains(h.httpGet("/"), "example.com/v1 Widget") {
		if time.Now().After(deadline) {
			var lines []string
			for _, l := range strings.Split(h.logs.String(), "\n") {
				if strings.Contains(l, "serve") || strings.Contains(l, "kinds") {
					lines = append(lines, l)
				}
			}
			t.Fatalf("the new unserved kind is not reported; the worker said:\n%s", strings.Join(lines, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unserve stops the CRD name from serving version.
func (c *cluster) unserve(t *testing.T, name, version string) {
	t.Helper()
	ctx := context.Background()
	res := c.Dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	crd, err := res.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		if m := v.(map[string]any); m["name"] == version {
			m["served"] = false
		}
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// chain runs a, then b.
func chain(a, b func(*config.Options)) func(*config.Options) {
	return func(o *config.Options) {
		if a != nil {
			a(o)
		}
		b(o)
	}
}

// followEveryOutcome drives a readiness event to each outcome besides a
// plain ready: superseded (an offboarding replaces an onboarding that is
// not ready yet), failed (a chart version the Helm repository lacks), ready
// after the worker restarts while it follows a change, and timeout. The
// tenants are named prefix-…; it leaves the worker running with a short
// ReadyTimeout.
func followEveryOutcome(t *testing.T, h *harness, c *cluster, resultsURL, prefix string) {
	t.Helper()
	// An onboarding whose Deployment is held unavailable, then its
	// offboarding: the onboarding is superseded, the offboarding ready.
	sup := prefix + "-sup"
	c.standIn.NeverAvailable(sup)
	on := h.send(h.q.onboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":"premium","release_version":"0.0"}`, sup))
	h.waitFor(sup+" pushed", time.Minute, func() bool { return h.finished(on) })
	off := h.send(h.q.offboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":"premium"}`, sup))
	if ev := waitReadiness(t, h, resultsURL, on, 3*time.Minute); ev.Outcome != "superseded" || ev.SupersededBy != off {
		t.Fatalf("an onboarding replaced by its offboarding: %+v", ev)
	}
	c.standIn.Available(sup)
	if ev := waitReadiness(t, h, resultsURL, off, 3*time.Minute); ev.Outcome != "ready" || ev.Kind != "offboarding" {
		t.Fatalf("the offboarding that replaced it: %+v", ev)
	}
	if hr := c.release(t, sup+"-premium"); hr != nil && hr.GetDeletionTimestamp() == nil {
		t.Fatalf("the offboarding is ready, the HelmRelease %s-premium is still there", sup)
	}

	// A release version the Helm repository does not have: failed, with
	// Flux's own words.
	out, errOut, code := h.cli(queueName(resultsURL), "send", "onboarding", "--tenant-id", prefix+"-miss", "--tier", "advanced",
		"--release", "9.9", "--wait", "--until", "ready", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var ev results.Event
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ev); err != nil || code != 1 {
		t.Fatalf("send --until ready of a missing chart: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	if ev.Outcome != "failed" || ev.Reason == "" || !strings.Contains(ev.Error, "9.9") || ev.Stages == nil {
		t.Fatalf("missing chart: %+v", ev)
	}

	// The worker stops while it follows a change (the tenant's Deployment
	// is held unavailable until then): after a restart the event comes.
	late := prefix + "-late"
	c.standIn.NeverAvailable(late)
	id := h.send(h.q.onboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":"premium","release_version":"0.0"}`, late))
	h.waitFor(late+" pushed", time.Minute, func() bool { return h.finished(id) })
	if r := h.apiRuns("?id=" + id).Runs; len(r) != 1 || r[0].Live == "ready" {
		t.Fatalf("%s is not pending before the stop: %+v", late, r)
	}
	h.stop()
	c.standIn.Available(late)
	h.start()
	if ev := waitReadiness(t, h, resultsURL, id, 3*time.Minute); ev.Outcome != "ready" || ev.TenantID != late || ev.Tier != "premium" || ev.Kind != "onboarding" {
		t.Fatalf("after a restart: %+v", ev)
	}

	// A tenant whose Deployment never becomes available: timeout.
	never := prefix + "-never"
	c.standIn.NeverAvailable(never)
	h.stop()
	h.tune = chain(h.tune, func(o *config.Options) { o.ReadyTimeout = 15 * time.Second })
	h.start()
	id = h.send(h.q.onboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":"advanced","release_version":"0.0"}`, never))
	ev = waitReadiness(t, h, resultsURL, id, 2*time.Minute)
	if ev.Outcome != "timeout" || !strings.Contains(ev.Error, never) {
		t.Fatalf("never available: %+v", ev)
	}
}
