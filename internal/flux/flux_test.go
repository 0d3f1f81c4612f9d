package flux

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

func obj(gvr, kind, ns, name string, spec, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gvr, "kind": kind,
		"metadata": map[string]any{"namespace": ns, "name": name, "generation": int64(1)}, "spec": spec, "status": status}}
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kustomize-controller"}})
	return u
}

func ready(status, reason string) []any {
	return []any{map[string]any{"type": "Ready", "status": status, "reason": reason, "observedGeneration": int64(1)}}
}

func fakeClient(t *testing.T, objs ...runtime.Object) (*Client, *dynfake.FakeDynamicClient) {
	t.Helper()
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		GitRepositories: "GitRepositoryList", Kustomizations: "KustomizationList", HelmReleases: "HelmReleaseList",
		ExternalArtifacts: "ExternalArtifactList",
	}, objs...)
	c := newClient(dyn, nil, Options{Namespace: "flux-system", GitRepository: "flux-system", Kustomizations: []string{"dataplane-tenants"}})
	t.Cleanup(c.Close)
	return c, dyn
}

func platform() []runtime.Object {
	return []runtime.Object{
		obj("source.toolkit.fluxcd.io/v1", "GitRepository", "flux-system", "flux-system", nil,
			map[string]any{"artifact": map[string]any{"revision": "main@sha1:c1"}, "conditions": ready("True", "Succeeded")}),
		obj("kustomize.toolkit.fluxcd.io/v1", "Kustomization", "flux-system", "dataplane-tenants",
			map[string]any{"path": "./application-plane/production/tenants"},
			map[string]any{"lastAppliedRevision": "main@sha1:c0", "lastAttemptedRevision": "main@sha1:c1", "observedGeneration": int64(1),
				"inventory":  map[string]any{"entries": []any{map[string]any{"id": "flux-system_t1-premium_helm.toolkit.fluxcd.io_HelmRelease", "v": "v2"}}},
				"conditions": append(ready("Unknown", "Progressing"), map[string]any{"type": "Reconciling", "status": "True", "reason": "Progressing"})}),
		obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", "flux-system", "t1-premium", nil,
			map[string]any{"observedGeneration": int64(1), "conditions": ready("True", "InstallSucceeded"),
				"history": []any{map[string]any{"chartVersion": "0.0.1"}}}),
	}
}

func TestRead(t *testing.T) {
	c, dyn := fakeClient(t, platform()...)
	ctx := context.Background()
	st, err := c.Read(ctx, []string{"flux-system"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := st.Kustomizations[0]
	if st.Fetched != "c1" || k.Path != "application-plane/production/tenants" || k.LastApplied != "c0" || k.LastAttempted != "c1" || !k.Reconciling || !k.Current {
		t.Fatalf("state %+v", st)
	}
	hr := st.Releases["flux-system/t1-premium"]
	if !hr.Exists || hr.ChartVersion != "0.0.1" || hr.Ready.Status != "True" || !hr.Current {
		t.Fatalf("release %+v", hr)
	}
	// The copies hold neither managed fields nor the inventory.
	kept, err := c.object(ctx, Kustomizations, "flux-system", "dataplane-tenants")
	if err != nil {
		t.Fatal(err)
	}
	if _, has, _ := unstructured.NestedMap(kept.Object, "status", "inventory"); has || kept.GetManagedFields() != nil {
		t.Errorf("the watched copy keeps what is never read: %v", kept.Object)
	}

	// A change reaches the next readings through the watch.
	hrs := dyn.Resource(HelmReleases).Namespace("flux-system")
	if err := hrs.Delete(ctx, "t1-premium", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Read(ctx, []string{"flux-system"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := st.Releases["flux-system/t1-premium"]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deleted release is still read")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReadShards: a shard folder asked for is read from its Kustomization
// and the ExternalArtifact of the same name it reads; one applied
// otherwise (another source) or not published yet is left out.
func TestReadShards(t *testing.T) {
	shardK := func(name, source string) runtime.Object {
		return obj("kustomize.toolkit.fluxcd.io/v1", "Kustomization", "flux-system", name,
			map[string]any{"path": "./", "sourceRef": map[string]any{"kind": source, "name": name}},
			map[string]any{"lastAppliedRevision": "main@sha1:c0", "lastAttemptedRevision": "main@sha1:c2", "conditions": ready("False", "BuildFailed")})
	}
	objs := append(platform(),
		shardK("tenants-premium-shard-00", "ExternalArtifact"),
		obj("source.toolkit.fluxcd.io/v1", "ExternalArtifact", "flux-system", "tenants-premium-shard-00", nil,
			map[string]any{"artifact": map[string]any{"revision": "main@sha1:c2", "metadata": map[string]any{OriginRevision: "main@sha1:c3"}}}),
		shardK("tenants-premium-shard-01", "GitRepository"),
		shardK("tenants-premium-shard-02", "ExternalArtifact"))
	c, _ := fakeClient(t, objs...)
	st, err := c.Read(context.Background(), nil, []string{"tenants-premium-shard-00", "tenants-premium-shard-01", "tenants-premium-shard-02", "tenants-basic-shard-00"})
	if err != nil {
		t.Fatal(err)
	}
	want := Shard{Revision: "main@sha1:c2", Origin: "c3", Applied: "main@sha1:c0", Attempted: "main@sha1:c2",
		Ready: Condition{Status: "False", Reason: "BuildFailed", ObservedGeneration: 1}}
	if len(st.Shards) != 1 || st.Shards["tenants-premium-shard-00"] != want {
		t.Errorf("shards %+v, want only shard-00 as %+v", st.Shards, want)
	}
}

func TestReadErrors(t *testing.T) {
	c, dyn := fakeClient(t, platform()[:2]...)
	dyn.PrependReactor("list", "helmreleases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "elsewhere" {
			return true, nil, apierrors.NewForbidden(HelmReleases.GroupResource(), "", nil)
		}
		return false, nil, nil
	})
	// A namespace the worker may not read fails with the API's refusal,
	// without waiting for a list that will not come.
	start := time.Now()
	_, err := c.Read(context.Background(), []string{"elsewhere"}, nil)
	if err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), "elsewhere") {
		t.Fatalf("read of a forbidden namespace: %v", err)
	}
	if time.Since(start) >= syncWait {
		t.Errorf("waited %s for a refused list", time.Since(start))
	}
	c.o.Kustomizations = []string{"dataplane-pooled-envs"}
	if _, err := c.Read(context.Background(), nil, nil); err == nil || !strings.Contains(err.Error(), "dataplane-pooled-envs") {
		t.Fatalf("read of a missing Kustomization: %v", err)
	}
}

func TestRequests(t *testing.T) {
	c, dyn := fakeClient(t, platform()...)
	ctx := context.Background()
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	if err := c.RequestFetch(ctx, at); err != nil {
		t.Fatal(err)
	}
	if err := c.RequestApply(ctx, []string{"dataplane-tenants"}, at); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{GitRepositories, "flux-system"}, {Kustomizations, "dataplane-tenants"}} {
		u, err := dyn.Resource(o.gvr).Namespace("flux-system").Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := u.GetAnnotations()[RequestedAtAnnotation]; got != "2026-12-03T12:00:00Z" {
			t.Errorf("%s %s: %s=%q", o.gvr.Resource, o.name, RequestedAtAnnotation, got)
		}
	}
	if err := c.RequestApply(ctx, []string{"missing"}, at); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("annotating a missing Kustomization: %v", err)
	}
}
