package controlplane

import (
	"context"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// TerraformGVR is the tofu-controller's Terraform resource.
var TerraformGVR = schema.GroupVersionResource{Group: "infra.contrib.fluxcd.io", Version: "v1alpha2", Resource: "terraforms"}

// StandIn writes the status a kubelet (through the deployment and
// replicaset controllers) and tofu-controller would write: every Deployment
// becomes available with all its replicas, every Terraform object is
// observed. Deployments in a namespace marked NeverAvailable are left as
// they are, like a tenant whose pods never start.
//
// It watches (informers), so a status is written as soon as an object is
// created or changed, like the recipe in TESTING.md, and costs the API
// server nothing while nothing changes: a poll listing every Deployment
// would load the API server in proportion to the tenants and distort the
// time-to-live measured at 500 of them.
type StandIn struct {
	cp  *ControlPlane
	ctx context.Context

	deployments cache.Store

	mu    sync.Mutex
	never map[string]bool
	// Writes counts the status writes, by kind.
	writes map[string]int
}

// StartStandIn runs the stand-in until ctx ends. It returns once it has
// seen every existing object.
func (cp *ControlPlane) StartStandIn(ctx context.Context) *StandIn {
	s := &StandIn{cp: cp, ctx: ctx, never: map[string]bool{}, writes: map[string]int{}}
	typed := informers.NewSharedInformerFactory(cp.Client, 0)
	deps := typed.Apps().V1().Deployments().Informer()
	_, _ = deps.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.deployment(o) },
		UpdateFunc: func(_, o any) { s.deployment(o) },
	})
	s.deployments = deps.GetStore()
	dynamic := dynamicinformer.NewDynamicSharedInformerFactory(cp.Dynamic, 0)
	tfs := dynamic.ForResource(TerraformGVR).Informer()
	_, _ = tfs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.terraform(o) },
		UpdateFunc: func(_, o any) { s.terraform(o) },
	})
	typed.Start(ctx.Done())
	dynamic.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), deps.HasSynced, tfs.HasSynced)
	return s
}

// NeverAvailable keeps the Deployments of namespace ns unavailable.
func (s *StandIn) NeverAvailable(ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.never[ns] = true
}

// Available undoes NeverAvailable: the namespace's Deployments become
// available now.
func (s *StandIn) Available(ns string) {
	s.mu.Lock()
	delete(s.never, ns)
	s.mu.Unlock()
	for _, o := range s.deployments.List() {
		if d, ok := o.(*appsv1.Deployment); ok && d.Namespace == ns {
			s.deployment(d)
		}
	}
}

// Writes returns how many status writes the stand-in made of kind
// ("Deployment" or "Terraform").
func (s *StandIn) Writes(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[kind]
}

func (s *StandIn) skip(ns string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.never[ns]
}

func (s *StandIn) count(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes[kind]++
}

// deployment makes one Deployment available, unless it already is. A
// write that conflicts with a newer version is retried by that version's
// update event.
func (s *StandIn) deployment(o any) {
	d, ok := o.(*appsv1.Deployment)
	if !ok || s.skip(d.Namespace) || d.DeletionTimestamp != nil {
		return
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	if st.ObservedGeneration == d.Generation && st.AvailableReplicas == want && st.UpdatedReplicas == want && st.Replicas == want {
		return
	}
	d = d.DeepCopy() // the informer's copy is shared
	now := metav1.Now()
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: want, UpdatedReplicas: want, ReadyReplicas: want, AvailableReplicas: want,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", LastUpdateTime: now, LastTransitionTime: now},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", LastUpdateTime: now, LastTransitionTime: now},
		},
	}
	if _, err := s.cp.Client.AppsV1().Deployments(d.Namespace).UpdateStatus(s.ctx, d, metav1.UpdateOptions{}); err == nil {
		s.count("Deployment")
	}
}

// terraform marks one Terraform object observed, unless it already is.
func (s *StandIn) terraform(obj any) {
	o, ok := obj.(*unstructured.Unstructured)
	if !ok || o.GetDeletionTimestamp() != nil {
		return
	}
	seen, _, _ := unstructured.NestedInt64(o.Object, "status", "observedGeneration")
	if seen == o.GetGeneration() {
		return
	}
	o = o.DeepCopy()
	if err := unstructured.SetNestedField(o.Object, o.GetGeneration(), "status", "observedGeneration"); err != nil {
		return
	}
	if _, err := s.cp.Dynamic.Resource(TerraformGVR).Namespace(o.GetNamespace()).UpdateStatus(s.ctx, o, metav1.UpdateOptions{}); err == nil {
		s.count("Terraform")
	}
}
