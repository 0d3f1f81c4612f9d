package flux

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// The follower reads Flux's objects four times a second while it follows
// changes. Getting them from the API server each time cost the API server
// in proportion to the tenants: at 500 tenants a list of every HelmRelease
// (500 objects with their history) and the tenants Kustomization with its
// inventory (1,000 entries), four times a second, took half of a core from
// the API server and most of one in the worker, on the machine where Flux
// had to apply the change. So the client watches them instead (informers,
// one per kind and namespace, started when first read) and reads its
// copies: the API server sends only what changes.

// syncWait bounds how long a first reading waits for a watch's first list.
const syncWait = 10 * time.Second

type watchKey struct {
	gvr schema.GroupVersionResource
	ns  string
}

// watch holds one kind's objects of one namespace, kept current by a watch.
type watch struct {
	inf cache.SharedIndexInformer

	mu  sync.Mutex
	err error // the last error of a list or watch
}

func (w *watch) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
}

func (w *watch) lastErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close stops the client's watches.
func (c *Client) Close() {
	c.closeOnce.Do(func() { close(c.stop) })
}

// watchOf returns the watch of gvr in ns, started on first use.
func (c *Client) watchOf(gvr schema.GroupVersionResource, ns string) *watch {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := watchKey{gvr, ns}
	if w, ok := c.watches[key]; ok {
		return w
	}
	w := &watch{inf: dynamicinformer.NewFilteredDynamicInformer(c.dyn, gvr, ns, 0, cache.Indexers{}, nil).Informer()}
	// The default handler logs through klog; the error is the reading's.
	_ = w.inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) { w.failed(err) })
	_ = w.inf.SetTransform(slim)
	go w.inf.Run(c.stop)
	c.watches[key] = w
	return w
}

// slim drops what the client never reads and would only hold in memory:
// managed fields, and a Kustomization's inventory (an entry per object it
// applied).
func slim(o any) (any, error) {
	if u, ok := o.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
		unstructured.RemoveNestedField(u.Object, "status", "inventory")
	}
	return o, nil
}

// synced waits for w's first list, for at most syncWait; it fails at once
// with the list's error when there is one (a namespace the worker may not
// read).
func (c *Client) synced(ctx context.Context, w *watch, what string) error {
	if w.inf.HasSynced() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, syncWait)
	defer cancel()
	for !w.inf.HasSynced() {
		if err := w.lastErr(); err != nil {
			return fmt.Errorf("watch %s: %w", what, err)
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("watch %s: not listed yet: %w", what, ctx.Err())
		case <-c.stop:
			t.Stop()
			return fmt.Errorf("watch %s: the client is closed", what)
		case <-t.C:
		}
	}
	return nil
}

// objects returns the watched objects of gvr in ns.
func (c *Client) objects(ctx context.Context, gvr schema.GroupVersionResource, ns string) ([]*unstructured.Unstructured, error) {
	w := c.watchOf(gvr, ns)
	if err := c.synced(ctx, w, gvr.Resource+" in "+ns); err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, o := range w.inf.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out, nil
}

// lookup returns the watched object ns/name of gvr, and false when it
// does not exist.
func (c *Client) lookup(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, bool, error) {
	w := c.watchOf(gvr, ns)
	if err := c.synced(ctx, w, gvr.Resource+" in "+ns); err != nil {
		return nil, false, err
	}
	o, ok, err := w.inf.GetStore().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil, false, err
	}
	u, isU := o.(*unstructured.Unstructured)
	return u, isU, nil
}

// object returns the watched object ns/name of gvr, or an error naming it
// when it does not exist.
func (c *Client) object(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	u, ok, err := c.lookup(ctx, gvr, ns, name)
	if err == nil && !ok {
		err = fmt.Errorf("%s %s/%s not found", gvr.Resource, ns, name)
	}
	return u, err
}
