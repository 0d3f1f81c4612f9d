package controlplane

import (
	"context"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TerraformGVR is the tofu-controller's Terraform resource.
var TerraformGVR = schema.GroupVersionResource{Group: "infra.contrib.fluxcd.io", Version: "v1alpha2", Resource: "terraforms"}

// StandIn writes the status a kubelet (through the deployment and
// replicaset controllers) and tofu-controller would write: every Deployment
// becomes available with all its replicas, every Terraform object is
// observed. Deployments in a namespace marked NeverAvailable are left as
// they are, like a tenant whose pods never start.
type StandIn struct {
	cp *ControlPlane

	mu    sync.Mutex
	never map[string]bool
	// Writes counts the status writes, by kind.
	writes map[string]int
}

// StartStandIn runs the stand-in until ctx ends.
func (cp *ControlPlane) StartStandIn(ctx context.Context) *StandIn {
	s := &StandIn{cp: cp, never: map[string]bool{}, writes: map[string]int{}}
	go s.run(ctx)
	return s
}

// NeverAvailable keeps the Deployments of namespace ns unavailable.
func (s *StandIn) NeverAvailable(ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.never[ns] = true
}

// Available undoes NeverAvailable.
func (s *StandIn) Available(ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.never, ns)
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

func (s *StandIn) run(ctx context.Context) {
	for {
		s.deployments(ctx)
		s.terraforms(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *StandIn) deployments(ctx context.Context) {
	list, err := s.cp.Client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		d := &list.Items[i]
		if s.skip(d.Namespace) || d.DeletionTimestamp != nil {
			continue
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		st := d.Status
		if st.ObservedGeneration == d.Generation && st.AvailableReplicas == want && st.UpdatedReplicas == want && st.Replicas == want {
			continue
		}
		now := metav1.Now()
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: want, UpdatedReplicas: want, ReadyReplicas: want, AvailableReplicas: want,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", LastUpdateTime: now, LastTransitionTime: now},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", LastUpdateTime: now, LastTransitionTime: now},
			},
		}
		if _, err := s.cp.Client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err == nil {
			s.count("Deployment")
		}
	}
}

func (s *StandIn) terraforms(ctx context.Context) {
	res := s.cp.Dynamic.Resource(TerraformGVR)
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.GetDeletionTimestamp() != nil {
			continue
		}
		seen, _, _ := unstructured.NestedInt64(o.Object, "status", "observedGeneration")
		if seen == o.GetGeneration() {
			continue
		}
		if err := unstructured.SetNestedField(o.Object, o.GetGeneration(), "status", "observedGeneration"); err != nil {
			continue
		}
		if _, err := res.Namespace(o.GetNamespace()).UpdateStatus(ctx, o, metav1.UpdateOptions{}); err == nil {
			s.count("Terraform")
		}
	}
}
