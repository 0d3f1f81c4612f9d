package publish

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// view is what one Publish reads of the cluster: the first objects of a
// kind one request each (a publish after a push reads the one or two
// folders it changed), then the whole kind listed once, so that a publish
// costs a fixed number of requests however many shard folders there are.
// A periodic publish reads every folder's object again; one request each,
// at client-go's default rate limit (5/s), held the repository lock, and
// with it the worker's next push, for seconds at 16 shard folders per
// tier.
type view struct {
	client dynamic.Interface
	ns     string
	lists  map[schema.GroupVersionResource]map[string]*unstructured.Unstructured
	gets   map[schema.GroupVersionResource]int
}

// getsBeforeList is how many objects of a kind are read one by one
// before the kind is listed.
const getsBeforeList = 2

func newView(client dynamic.Interface, ns string) *view {
	return &view{client: client, ns: ns, lists: map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{},
		gets: map[schema.GroupVersionResource]int{}}
}

// get returns a copy of the object as read, or a NotFound error.
func (v *view) get(ctx context.Context, gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
	m, ok := v.lists[gvr]
	if !ok && v.gets[gvr] < getsBeforeList {
		v.gets[gvr]++
		return v.client.Resource(gvr).Namespace(v.ns).Get(ctx, name, metav1.GetOptions{})
	}
	if !ok {
		list, err := v.client.Resource(gvr).Namespace(v.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		m = make(map[string]*unstructured.Unstructured, len(list.Items))
		for i := range list.Items {
			m[list.Items[i].GetName()] = &list.Items[i]
		}
		v.lists[gvr] = m
	}
	obj, ok := m[name]
	if !ok {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	return obj.DeepCopy(), nil
}
