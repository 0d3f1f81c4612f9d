package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side apply manager of what tests apply.
const FieldManager = "controlplane-test"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// TerraformCRD is the tofu-controller CRD the tenant chart's Terraform
// object needs (a copy of the shared fixture, embedded).
const TerraformCRD = "infra.contrib.fluxcd.io_terraforms.yaml"

// installCRDs applies the Flux controllers' CRDs (the HelmRelease CRD also
// serving v2beta1) and the Terraform CRD the tenant chart needs, and
// waits until each is established.
func (cp *ControlPlane) installCRDs(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(cp.crds, "*.yaml"))
	if err != nil {
		return err
	}
	files = append(files, "platform/"+TerraformCRD)
	var names []string
	for _, f := range files {
		var b []byte
		if strings.HasPrefix(f, "platform/") {
			b, err = platformFS.ReadFile(f)
		} else {
			b, err = os.ReadFile(f)
		}
		if err != nil {
			return err
		}
		objs, err := Decode(b)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for _, o := range objs {
			if o.GetName() == "helmreleases.helm.toolkit.fluxcd.io" {
				if err := ServeV2beta1(o); err != nil {
					return err
				}
			}
			data, err := json.Marshal(o)
			if err != nil {
				return err
			}
			if _, err := cp.Dynamic.Resource(crdGVR).Patch(ctx, o.GetName(), types.ApplyPatchType, data,
				metav1.PatchOptions{FieldManager: FieldManager, Force: new(true)}); err != nil {
				return fmt.Errorf("apply CRD %s: %w", o.GetName(), err)
			}
			names = append(names, o.GetName())
		}
	}
	for _, name := range names {
		if err := cp.waitFor(ctx, "CRD "+name+" established", func() (bool, error) {
			o, err := cp.Dynamic.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return ConditionTrue(o, "Established"), nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// ServeV2beta1 makes a HelmRelease CRD serve helm.toolkit.fluxcd.io/v2beta1
// as well, with the schema of its storage version and no conversion: the
// stand-in for a cluster whose Flux still serves what the platform's
// templates say. The fields the templates use are the same in both.
func ServeV2beta1(crd *unstructured.Unstructured) error {
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if err != nil {
		return err
	}
	var storage map[string]any
	for i, v := range versions {
		m, _ := v.(map[string]any)
		if m["name"] == "v2beta1" {
			m["served"] = true
			versions[i] = m
			return unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions")
		}
		if m["storage"] == true {
			storage = m
		}
	}
	if storage == nil {
		return errors.New("the HelmRelease CRD has no storage version")
	}
	v := runtimeDeepCopy(storage)
	v["name"], v["served"], v["storage"] = "v2beta1", true, false
	delete(v, "deprecated")
	delete(v, "deprecationWarning")
	versions = append(versions, v)
	return unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions")
}

func runtimeDeepCopy(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}

// ConditionTrue reports whether o has condition typ with status True.
func ConditionTrue(o *unstructured.Unstructured, typ string) bool {
	return Condition(o, typ)["status"] == "True"
}

// Condition returns o's condition typ (status, reason, message, ...), nil
// when o has none.
func Condition(o *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == typ {
			return m
		}
	}
	return nil
}

// Decode reads every object of a multi-document YAML or JSON stream.
func Decode(b []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// Apply server-side applies every object of a YAML stream, as the admin.
func (cp *ControlPlane) Apply(ctx context.Context, yamlDocs []byte) error {
	objs, err := Decode(yamlDocs)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.Client.Discovery()))
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset()
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				return fmt.Errorf("%s %s: %w", gvk, o.GetName(), err)
			}
		}
		data, err := json.Marshal(o)
		if err != nil {
			return err
		}
		res := cp.Dynamic.Resource(m.Resource)
		opts := metav1.PatchOptions{FieldManager: FieldManager, Force: new(true)}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := o.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			_, err = res.Namespace(ns).Patch(ctx, o.GetName(), types.ApplyPatchType, data, opts)
		} else {
			_, err = res.Patch(ctx, o.GetName(), types.ApplyPatchType, data, opts)
		}
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, o.GetName(), err)
		}
	}
	return nil
}

func (cp *ControlPlane) ensureNamespace(ctx context.Context, name string) error {
	_, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// waitFor polls cond until it holds, fails, or a minute passes.
func (cp *ControlPlane) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
