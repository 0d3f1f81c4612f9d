// Package flux is the worker's access to the cluster Flux runs in: it asks
// Flux to reconcile now, reads where Flux stands (the revision the
// GitRepository fetched and each Kustomization applied, each HelmRelease's
// state), and checks that the cluster serves every kind the templates
// render. It reads and patches objects as unstructured data, so it needs no
// Flux API module and works with any Flux that serves the v1 source and
// kustomize APIs and helm.toolkit.fluxcd.io/v2.
package flux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The resources the worker reads; it patches the first two.
var (
	GitRepositories = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}
	Kustomizations  = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	HelmReleases    = schema.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"}
	// ExternalArtifacts are the worker's own sources, one per shard folder
	// (internal/publish).
	ExternalArtifacts = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "externalartifacts"}
)

// OriginRevision is the artifact metadata key kustomize-controller copies
// into a Kustomization's status.lastAppliedOriginRevision: the commit the
// applied folder came from.
const OriginRevision = "org.opencontainers.image.revision"

// RequestedAtAnnotation asks a Flux object to reconcile now; its value is
// any string that differs from the last one Flux handled.
const RequestedAtAnnotation = "reconcile.fluxcd.io/requestedAt"

// Options name the Flux objects the worker follows.
type Options struct {
	// Namespace of the GitRepository and the Kustomizations.
	Namespace string
	// GitRepository is the source that reads the GitOps repository.
	GitRepository string
	// Kustomizations apply the tenants and pooled-envs folders.
	Kustomizations []string
}

// LoadConfig returns the cluster configuration: from kubeconfig when it is
// set, else the in-cluster one; nil when there is neither (the feature is
// then off).
func LoadConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load KUBECONFIG %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("load the in-cluster configuration: %w", err)
	}
	return cfg, nil
}

// Client reads and nudges Flux's objects. It reads them from watches it
// keeps until Close.
type Client struct {
	dyn  dynamic.Interface
	disc discovery.DiscoveryInterface
	o    Options

	mu        sync.Mutex
	watches   map[watchKey]*watch
	stop      chan struct{}
	closeOnce sync.Once
}

// New returns a Client for the cluster of cfg.
func New(cfg *rest.Config, o Options) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "tenant-worker"
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster discovery client: %w", err)
	}
	return newClient(dyn, disc, o), nil
}

func newClient(dyn dynamic.Interface, disc discovery.DiscoveryInterface, o Options) *Client {
	return &Client{dyn: dyn, disc: disc, o: o, watches: map[watchKey]*watch{}, stop: make(chan struct{})}
}

// RequestFetch annotates the GitRepository with
// reconcile.fluxcd.io/requestedAt, so that Flux fetches now instead of at
// its next interval. The Kustomizations that read it start on the new
// revision by themselves.
func (c *Client) RequestFetch(ctx context.Context, at time.Time) error {
	return c.annotate(ctx, GitRepositories, c.o.GitRepository, at)
}

// RequestApply annotates the named Kustomizations, so that they apply now.
func (c *Client) RequestApply(ctx context.Context, names []string, at time.Time) error {
	var errs []error
	for _, k := range names {
		errs = append(errs, c.annotate(ctx, Kustomizations, k, at))
	}
	return errors.Join(errs...)
}

func (c *Client) annotate(ctx context.Context, gvr schema.GroupVersionResource, name string, at time.Time) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		RequestedAtAnnotation: at.UTC().Format(time.RFC3339Nano)}}})
	if err != nil {
		return err
	}
	if _, err := c.dyn.Resource(gvr).Namespace(c.o.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "tenant-worker"}); err != nil {
		return fmt.Errorf("annotate %s %s/%s: %w", gvr.Resource, c.o.Namespace, name, err)
	}
	return nil
}

// Condition is a status condition of a Flux object.
type Condition struct {
	Status  string // True, False, Unknown; empty when absent
	Reason  string
	Message string
	// ObservedGeneration is the generation the condition speaks of.
	ObservedGeneration int64
}

// Kustomization is where one Kustomization stands.
type Kustomization struct {
	Name string
	// Path is the folder it applies, without a leading "./".
	Path string
	// LastApplied and LastAttempted are commit hashes.
	LastApplied, LastAttempted string
	Ready, Stalled             Condition
	Current                    bool // observedGeneration == generation
	// Reconciling is true while kustomize-controller works on it.
	Reconciling bool
}

// HelmRelease is where one HelmRelease stands.
type HelmRelease struct {
	Namespace, Name string
	Exists          bool
	Deleting        bool
	Current         bool // observedGeneration == generation
	Generation      int64
	// ChartVersion is the chart version of the last release Helm made.
	ChartVersion   string
	Ready, Stalled Condition
}

// Shard is where a shard folder applied by a Kustomization of its own,
// from the worker's ExternalArtifact (internal/publish), stands.
type Shard struct {
	// Revision is the revision of the ExternalArtifact's archive, Origin
	// the commit it was published from.
	Revision, Origin string
	// Applied and Attempted are the Kustomization's last applied and
	// attempted revisions: archive revisions, not commits.
	Applied, Attempted string
	Ready              Condition
}

// State is one reading of Flux's objects.
type State struct {
	// Fetched is the commit of the GitRepository's artifact.
	Fetched        string
	Source         Condition
	Kustomizations []Kustomization
	// Releases by namespace/name; only of the namespaces asked for.
	Releases map[string]HelmRelease
	// Shards by name; only of the names asked for whose Kustomization
	// exists and reads the ExternalArtifact of that name.
	Shards map[string]Shard
}

// Read reads the GitRepository, the Kustomizations, the HelmReleases of
// the namespaces given and the shard folders named (see Shard), as the
// client's watches last saw them.
func (c *Client) Read(ctx context.Context, namespaces, shards []string) (State, error) {
	var st State
	src, err := c.object(ctx, GitRepositories, c.o.Namespace, c.o.GitRepository)
	if err != nil {
		return st, fmt.Errorf("read GitRepository %s/%s: %w", c.o.Namespace, c.o.GitRepository, err)
	}
	rev, _, _ := unstructured.NestedString(src.Object, "status", "artifact", "revision")
	st.Fetched, st.Source = commitOf(rev), condition(src, "Ready")
	for _, name := range c.o.Kustomizations {
		k, err := c.object(ctx, Kustomizations, c.o.Namespace, name)
		if err != nil {
			return st, fmt.Errorf("read Kustomization %s/%s: %w", c.o.Namespace, name, err)
		}
		p, _, _ := unstructured.NestedString(k.Object, "spec", "path")
		applied, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
		attempted, _, _ := unstructured.NestedString(k.Object, "status", "lastAttemptedRevision")
		st.Kustomizations = append(st.Kustomizations, Kustomization{
			Name: name, Path: strings.Trim(strings.TrimPrefix(p, "./"), "/"),
			LastApplied: commitOf(applied), LastAttempted: commitOf(attempted),
			Ready: condition(k, "Ready"), Stalled: condition(k, "Stalled"), Current: current(k),
			Reconciling: condition(k, "Reconciling").Status == "True",
		})
	}
	st.Releases = map[string]HelmRelease{}
	for _, ns := range namespaces {
		list, err := c.objects(ctx, HelmReleases, ns)
		if err != nil {
			return st, fmt.Errorf("read HelmReleases in %s: %w", ns, err)
		}
		for _, hr := range list {
			version := ""
			if hist, _, _ := unstructured.NestedSlice(hr.Object, "status", "history"); len(hist) > 0 {
				if m, ok := hist[0].(map[string]any); ok {
					version, _ = m["chartVersion"].(string)
				}
			}
			st.Releases[ns+"/"+hr.GetName()] = HelmRelease{
				Namespace: ns, Name: hr.GetName(), Exists: true, Deleting: hr.GetDeletionTimestamp() != nil,
				Current: current(hr), Generation: hr.GetGeneration(), ChartVersion: version,
				Ready: condition(hr, "Ready"), Stalled: condition(hr, "Stalled"),
			}
		}
	}
	st.Shards = map[string]Shard{}
	for _, name := range shards {
		sh, ok, err := c.shard(ctx, name)
		if err != nil {
			return st, err
		}
		if ok {
			st.Shards[name] = sh
		}
	}
	return st, nil
}

// shard reads the Kustomization name and the ExternalArtifact of the same
// name it reads; false when either is missing (the folder is applied
// otherwise, or not yet published). The ExternalArtifacts are watched only
// once such a Kustomization is seen.
func (c *Client) shard(ctx context.Context, name string) (Shard, bool, error) {
	k, ok, err := c.lookup(ctx, Kustomizations, c.o.Namespace, name)
	if err != nil || !ok {
		return Shard{}, false, err
	}
	src, _, _ := unstructured.NestedStringMap(k.Object, "spec", "sourceRef")
	if src["kind"] != "ExternalArtifact" || src["name"] != name || src["namespace"] != "" && src["namespace"] != c.o.Namespace {
		return Shard{}, false, nil
	}
	a, ok, err := c.lookup(ctx, ExternalArtifacts, c.o.Namespace, name)
	if err != nil || !ok {
		return Shard{}, false, err
	}
	var sh Shard
	sh.Revision, _, _ = unstructured.NestedString(a.Object, "status", "artifact", "revision")
	origin, _, _ := unstructured.NestedString(a.Object, "status", "artifact", "metadata", OriginRevision)
	sh.Origin = commitOf(origin)
	sh.Applied, _, _ = unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
	sh.Attempted, _, _ = unstructured.NestedString(k.Object, "status", "lastAttemptedRevision")
	sh.Ready = condition(k, "Ready")
	return sh, true, nil
}

// commitOf takes the commit hash out of a Flux revision
// ("main@sha1:<hash>", or a bare hash from older Flux).
func commitOf(rev string) string {
	if i := strings.LastIndex(rev, ":"); i >= 0 {
		return rev[i+1:]
	}
	if i := strings.LastIndex(rev, "/"); i >= 0 {
		return rev[i+1:]
	}
	return rev
}

func condition(o *unstructured.Unstructured, typ string) Condition {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			gen, _, _ := unstructured.NestedInt64(m, "observedGeneration")
			return Condition{Status: s, Reason: r, Message: msg, ObservedGeneration: gen}
		}
	}
	return Condition{}
}

func current(o *unstructured.Unstructured) bool {
	seen, ok, _ := unstructured.NestedInt64(o.Object, "status", "observedGeneration")
	return ok && seen == o.GetGeneration()
}
