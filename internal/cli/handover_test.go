package cli

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/progress"
)

// TestBackResumesShardKustomizationsWhenNothingWasPushed: layout migrate
// --no-shard-kustomizations quiesces every shard Kustomization before it
// pushes. When that wait times out (a shard Kustomization's apply is still
// in flight, or kustomize-controller is slow), nothing is pushed: the
// branch still gives shard folders Kustomizations of their own, so those
// are the only ones applying tenants. The into direction resumes the
// tenants Kustomization in the same case ("Nothing pushed: ... applies as
// before"); back leaves every shard Kustomization suspended, so no tenant
// change is applied until someone runs it again, and a later
// --shard-kustomizations (re-run path) never resumes them either.
func TestBackResumesShardKustomizationsWhenNothingWasPushed(t *testing.T) {
	ctx := context.Background()
	shard := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
			"metadata": map[string]any{"name": name, "namespace": "flux-system",
				"labels": map[string]any{"app.kubernetes.io/managed-by": "tenant-worker"}},
			"spec": map[string]any{"path": "./", "sourceRef": map[string]any{"kind": "ExternalArtifact", "name": name}},
		}}
	}
	// No controller records the requests here: as if an apply in flight
	// outlasted the timeout.
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{flux.Kustomizations: "KustomizationList", flux.ExternalArtifacts: "ExternalArtifactList"},
		shard("tenants-premium-shard-00"), shard("tenants-premium-shard-01"))
	h := &handing{dyn: dyn, ns: "flux-system", source: "flux-system", line: progress.New(io.Discard)}
	l := gitops.Layout{Root: "root", Shards: 2, ShardKustomizations: true}
	var stdout, stderr bytes.Buffer
	err := h.back(ctx, nil, gitops.Layout{Root: "root"}, l, "dataplane-tenants", 1500*time.Millisecond, false, &stdout, &stderr)
	if err == nil {
		t.Fatal("setup: the wait should have timed out")
	}
	t.Logf("back: %v", err)
	for _, name := range []string{"tenants-premium-shard-00", "tenants-premium-shard-01"} {
		k, gerr := dyn.Resource(flux.Kustomizations).Namespace("flux-system").Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			t.Fatal(gerr)
		}
		if suspended, _, _ := unstructured.NestedBool(k.Object, "spec", "suspend"); suspended {
			t.Errorf("nothing was pushed, yet %s is left suspended: the branch's tenants are applied by no Kustomization", name)
		}
	}
}
