package publish

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tenant-worker/tenant-worker/internal/artifact"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/testenv/memtree"
)

// TestServeKeepsWhatAnObjectMayPointAt: each folder's current archive and
// the one before are served; a folder back to content it had serves that
// archive again; an archive two folders share stays while either needs it.
func TestServeKeepsWhatAnObjectMayPointAt(t *testing.T) {
	p := New(Options{})
	get := func(file string) int {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+file, nil))
		return rec.Code
	}
	p.serve("a", "1.tar.gz", []byte("one"))
	p.serve("a", "2.tar.gz", []byte("two"))
	p.serve("a", "1.tar.gz", []byte("one")) // back to where it was
	if get("1.tar.gz") != 200 || get("2.tar.gz") != 200 {
		t.Fatalf("after 1, 2, 1: %d %d, want both served", get("1.tar.gz"), get("2.tar.gz"))
	}
	p.serve("a", "3.tar.gz", []byte("three"))
	if get("2.tar.gz") != 404 || get("1.tar.gz") != 200 || get("3.tar.gz") != 200 {
		t.Fatalf("after 1, 2, 1, 3: 1 %d, 2 %d, 3 %d; want 2 dropped", get("1.tar.gz"), get("2.tar.gz"), get("3.tar.gz"))
	}
	p.serve("b", "3.tar.gz", []byte("three"))
	p.serve("a", "4.tar.gz", []byte("four"))
	p.serve("a", "5.tar.gz", []byte("five"))
	if get("3.tar.gz") != 200 {
		t.Fatal("an archive folder b points at was dropped with folder a's old ones")
	}
	if get("1.tar.gz") != 404 {
		t.Fatal("an archive nobody points at is still served")
	}
}

// TestServeBuildsWhatAnotherReplicaPublished: a URL this replica did not
// publish is built again from the commit's folder it names, and served
// only when its digest is the one named.
func TestServeBuildsWhatAnotherReplicaPublished(t *testing.T) {
	src := memtree.Tree{
		"root/tenants/premium/shard-01/kustomization.yaml": "resources:\n  - a.yaml\n",
		"root/tenants/premium/shard-01/a.yaml":             "kind: ConfigMap\n",
	}
	a, err := artifact.Build(src, "root/tenants/premium/shard-01")
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Layout: gitops.Layout{Root: "root"}})
	var asked []string
	p.BuildWith(func(_ context.Context, commit string, fn func(Source) error) error {
		asked = append(asked, commit)
		return fn(src)
	})
	get := func(path string) (int, []byte) {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.Bytes()
	}
	hex := strings.TrimPrefix(a.Digest, "sha256:")
	if code, body := get("/c1/premium/shard-01/" + hex + ".tar.gz"); code != 200 || !bytes.Equal(body, a.Data) {
		t.Fatalf("rebuilt: %d, %d bytes, want the %d of the archive", code, len(body), len(a.Data))
	}
	if code, _ := get("/c1/premium/shard-01/" + strings.Repeat("0", 64) + ".tar.gz"); code != 404 {
		t.Errorf("another digest: %d, want 404", code)
	}
	if code, _ := get("/c1/premium/../../etc/" + hex + ".tar.gz"); code != 404 {
		t.Errorf("a path out of the tenants folder: %d, want 404", code)
	}
	if len(asked) != 2 || asked[0] != "c1" {
		t.Errorf("commits built from: %v", asked)
	}
}

// TestKustomizationInterval: a Kustomization made for a shard folder takes
// the template's settings, with Interval in place of the template's
// interval when set, and the template's own when not; one that exists is
// left as it is.
func TestKustomizationInterval(t *testing.T) {
	template := tenantsKustomization()
	tuned := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": Name("basic", "shard-01"), "namespace": "flux-system"},
		"spec":     map[string]any{"interval": "3h"},
	}}
	for _, tc := range []struct {
		interval time.Duration
		want     string
	}{{10 * time.Minute, "10m0s"}, {0, "1m0s"}} {
		dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{flux.Kustomizations: "KustomizationList"}, template.DeepCopy(), tuned.DeepCopy())
		p := New(Options{Namespace: "flux-system", Client: dyn, Template: "dataplane-tenants", Interval: tc.interval})
		for _, name := range []string{Name("premium", "shard-00"), Name("basic", "shard-01")} {
			if err := p.kustomization(context.Background(), newView(dyn, "flux-system"), name); err != nil {
				t.Fatal(err)
			}
		}
		res := dyn.Resource(flux.Kustomizations).Namespace("flux-system")
		made, err := res.Get(context.Background(), Name("premium", "shard-00"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		iv, _, _ := unstructured.NestedString(made.Object, "spec", "interval")
		prune, _, _ := unstructured.NestedBool(made.Object, "spec", "prune")
		kind, _, _ := unstructured.NestedString(made.Object, "spec", "sourceRef", "kind")
		if iv != tc.want || !prune || kind != "ExternalArtifact" {
			t.Errorf("Interval %s: made interval %q, prune %v, source %s; want %s, the template's prune, the ExternalArtifact", tc.interval, iv, prune, kind, tc.want)
		}
		// The template sets no timeout and no retry interval: Flux derives
		// both from the interval (timeout interval-30s, at least 30s; retry
		// the interval), so the made one keeps the template's.
		timeout, hasTimeout, _ := unstructured.NestedString(made.Object, "spec", "timeout")
		retry, hasRetry, _ := unstructured.NestedString(made.Object, "spec", "retryInterval")
		if tc.interval > 0 && (timeout != "30s" || retry != "1m0s") || tc.interval == 0 && (hasTimeout || hasRetry) {
			t.Errorf("Interval %s: made timeout %q, retryInterval %q; want the template's effective 30s and 1m0s when the interval changes, nothing written when it does not", tc.interval, timeout, retry)
		}
		kept, err := res.Get(context.Background(), Name("basic", "shard-01"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if iv, _, _ := unstructured.NestedString(kept.Object, "spec", "interval"); iv != "3h" {
			t.Errorf("Interval %s: an operator's Kustomization was changed to interval %q", tc.interval, iv)
		}
	}
}

// TestFromTemplateKeepsWhatTheTemplateSets: a template's own timeout and
// retry interval are kept as they are when the interval changes, and every
// interval written matches the pattern of Flux's CRD.
func TestFromTemplateKeepsWhatTheTemplateSets(t *testing.T) {
	tmpl := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "dataplane-tenants", "namespace": "flux-system"},
		"spec":     map[string]any{"interval": "5m", "timeout": "2m", "retryInterval": "20s", "suspend": true},
	}}
	k := FromTemplate(tmpl, "x", map[string]any{"kind": "GitRepository", "name": "flux-system"}, "./tenants/basic/shard-00", 90*time.Minute)
	spec, _, _ := unstructured.NestedMap(k.Object, "spec")
	if spec["timeout"] != "2m" || spec["retryInterval"] != "20s" || spec["interval"] != "1h30m0s" || spec["suspend"] != nil ||
		spec["path"] != "./tenants/basic/shard-00" || k.GetNamespace() != "flux-system" {
		t.Errorf("made spec %v in namespace %q", spec, k.GetNamespace())
	}
	if tmpl.Object["spec"].(map[string]any)["interval"] != "5m" {
		t.Error("the template itself was changed")
	}
	fluxDuration := regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`)
	for _, d := range []time.Duration{time.Second, 10 * time.Minute, 90 * time.Minute, 1500 * time.Millisecond} {
		iv, _, _ := unstructured.NestedString(FromTemplate(tmpl, "x", nil, "./", d).Object, "spec", "interval")
		if !fluxDuration.MatchString(iv) {
			t.Errorf("interval %s written as %q, which Flux's CRD refuses", d, iv)
		}
	}
}

// TestPublishMakesAgainWhatWasDeleted: an ExternalArtifact or
// Kustomization deleted in the cluster (by hand, or by a migration back
// and in again) is made again by the next Publish after Forget (the
// worker's periodic publish), and by the first Publish after the layout
// came back to shard Kustomizations, without Forget.
func TestPublishMakesAgainWhatWasDeleted(t *testing.T) {
	ctx := context.Background()
	in := shardTree("a")
	back := maps.Clone(in)
	back[gitops.Layout{Root: "root"}.LayoutFile()] = string(gitops.Layout{Root: "root", Shards: 1}.LayoutContent())
	template := tenantsKustomization()
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{flux.Kustomizations: "KustomizationList", flux.ExternalArtifacts: "ExternalArtifactList"}, template)
	p := New(Options{Layout: gitops.Layout{Root: "root"}, Namespace: "flux-system", Client: dyn, Template: "dataplane-tenants",
		URL: "http://worker:8081", Branch: "main"})
	name := Name("premium", "shard-00")
	exist := func() (artifact, kustomization bool) {
		_, errA := dyn.Resource(flux.ExternalArtifacts).Namespace("flux-system").Get(ctx, name, metav1.GetOptions{})
		_, errK := dyn.Resource(flux.Kustomizations).Namespace("flux-system").Get(ctx, name, metav1.GetOptions{})
		return errA == nil, errK == nil
	}
	remove := func() {
		for _, r := range []schema.GroupVersionResource{flux.ExternalArtifacts, flux.Kustomizations} {
			if err := dyn.Resource(r).Namespace("flux-system").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish := func(src memtree.Tree) {
		t.Helper()
		if _, err := p.Publish(ctx, src, "c1", History{Complete: p.Last() != ""}); err != nil { // no commit since the last
			t.Fatal(err)
		}
	}
	publish(in)
	if a, k := exist(); !a || !k {
		t.Fatalf("first publish: ExternalArtifact %v, Kustomization %v", a, k)
	}

	remove()
	publish(in)
	if a, k := exist(); a || k {
		t.Fatal("setup: without Forget the tree published before is trusted, or this test shows nothing")
	}
	p.Forget()
	publish(in)
	if a, k := exist(); !a || !k {
		t.Errorf("deleted, then Forget and publish: ExternalArtifact %v, Kustomization %v; want both made again", a, k)
	}

	remove() // a migration back deletes them
	publish(back)
	publish(in) // and in again
	if a, k := exist(); !a || !k {
		t.Errorf("migrated back and in again: ExternalArtifact %v, Kustomization %v; want both made again", a, k)
	}
}

// TestReplicasPublishInTheOrderOfTheirPushes: two replicas, A pushing C4
// (a second tenant in the shard) on top of B's C3. Whatever order their
// publishes come in, the ExternalArtifact ends at C4's folder: B's publish
// of C3 after A's is refused (the branch is at C4), and one that read the
// object before A wrote it, and found C3 still the head, is refused by the
// object's resourceVersion. Either way B is told ErrSuperseded.
func TestReplicasPublishInTheOrderOfTheirPushes(t *testing.T) {
	ctx := context.Background()
	c3, c4 := shardTree("a"), shardTree("a", "b")
	want, err := artifact.Build(c4, "root/tenants/premium/shard-00")
	if err != nil {
		t.Fatal(err)
	}
	name := Name("premium", "shard-00")

	for _, order := range []string{"B after A", "B read before A wrote"} {
		t.Run(order, func(t *testing.T) {
			dyn, conflicts := optimisticClient()
			head := "c3"
			a, b := replica(dyn, &head), replica(dyn, &head)
			if _, err := b.Publish(ctx, c3, "c3", History{}); err != nil { // B pushed C3 and published it
				t.Fatal(err)
			}
			// Then A pushes C4, a second tenant in the shard, and publishes
			// it; B publishes C3 again (its periodic publish, after Forget).
			pushA := func() {
				head = "c4"
				if _, err := a.Publish(ctx, c4, "c4", History{}); err != nil {
					t.Errorf("A publishes C4: %v", err)
				}
			}
			interleaved := false
			if order == "B after A" {
				pushA()
			} else {
				// B reads the object (at C3's folder, so B must write: set
				// it back to empty first), finds C3 still the head, and A
				// pushes and publishes before B writes.
				setDigest(t, dyn, name, "")
				b.CheckHeadWith(func(context.Context) (string, error) {
					was := head
					if !interleaved {
						interleaved = true
						pushA()
					}
					return was, nil
				})
			}
			b.Forget()
			_, err := b.Publish(ctx, c3, "c3", History{Complete: true})
			if !errors.Is(err, ErrSuperseded) {
				t.Errorf("B's publish of C3 after A's push of C4: %v, want ErrSuperseded", err)
			}
			if order != "B after A" && (!interleaved || *conflicts != 1) {
				t.Fatalf("planned fault did not happen: A pushed between B's read and write %v, conflicts %d, want 1", interleaved, *conflicts)
			}
			obj, err := dyn.Resource(flux.ExternalArtifacts).Namespace("flux-system").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if d, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "digest"); d != want.Digest {
				t.Errorf("the ExternalArtifact is at %s, want C4's folder %s", d, want.Digest)
			}
		})
	}
}

// links is the complete history from the first of trees to the last.
func links(trees ...memtree.Tree) History { return NewHistory(trees, true) }

// replica is a worker replica's Publisher on dyn, whose ls-remote of the
// branch reads *head.
func replica(dyn *dynfake.FakeDynamicClient, head *string) *Publisher {
	p := New(Options{Layout: gitops.Layout{Root: "root"}, Namespace: "flux-system", Client: dyn, URL: "http://worker:8081", Branch: "main"})
	p.CheckHeadWith(func(context.Context) (string, error) { return *head, nil })
	return p
}

// optimisticClient is a fake client whose writes to ExternalArtifacts
// keep resourceVersions as the API server does: a write of an object read
// before another write is refused with a conflict, counted.
func optimisticClient() (*dynfake.FakeDynamicClient, *int) {
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{flux.Kustomizations: "KustomizationList", flux.ExternalArtifacts: "ExternalArtifactList"})
	version, conflicts := 0, 0
	dyn.PrependReactor("*", "externalartifacts", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a, ok := action.(k8stesting.UpdateAction) // a create too: the same methods
		if !ok || action.GetVerb() != "create" && action.GetVerb() != "update" {
			return false, nil, nil
		}
		obj := a.GetObject().(*unstructured.Unstructured)
		if action.GetVerb() == "update" {
			now, err := dyn.Tracker().Get(flux.ExternalArtifacts, obj.GetNamespace(), obj.GetName())
			if err != nil {
				return true, nil, err
			}
			if now.(*unstructured.Unstructured).GetResourceVersion() != obj.GetResourceVersion() {
				conflicts++
				return true, nil, apierrors.NewConflict(flux.ExternalArtifacts.GroupResource(), obj.GetName(), errors.New("the object has been modified"))
			}
		}
		version++
		obj.SetResourceVersion(strconv.Itoa(version))
		return false, nil, nil
	})
	return dyn, &conflicts
}

// setDigest sets the digest of an ExternalArtifact's archive, as a write
// of another replica would.
func setDigest(t *testing.T, dyn *dynfake.FakeDynamicClient, name, digest string) {
	t.Helper()
	res := dyn.Resource(flux.ExternalArtifacts).Namespace("flux-system")
	obj, err := res.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(obj.Object, digest, "status", "artifact", "digest"); err != nil {
		t.Fatal(err)
	}
	if _, err := res.UpdateStatus(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// shardTree is a branch in one shard folder per tier, premium's holding
// a ConfigMap per tenant named.
func shardTree(tenants ...string) memtree.Tree {
	l := gitops.Layout{Root: "root", Shards: 1, ShardKustomizations: true}
	t := memtree.Tree{
		l.LayoutFile(): string(l.LayoutContent()),
		"root/tier-templates/premium_tenant_template.yaml": "kind: HelmRelease\n",
		"root/tenants/premium/kustomization.yaml":          "resources:\n  - shard-00\n",
	}
	list := "resources:\n"
	for _, n := range tenants {
		list += "  - " + n + ".yaml\n"
		t["root/tenants/premium/shard-00/"+n+".yaml"] = "kind: ConfigMap\nmetadata:\n  name: " + n + "\n"
	}
	t["root/tenants/premium/shard-00/kustomization.yaml"] = list
	return t
}

// tenantsKustomization is the platform's tenants Kustomization, the
// template of the shard folders' own.
func tenantsKustomization() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": "dataplane-tenants", "namespace": "flux-system"},
		"spec": map[string]any{"interval": "1m0s", "prune": true, "path": "./tenants",
			"sourceRef": map[string]any{"kind": "GitRepository", "name": "flux-system"}},
	}}
}

// abaCommits: C0 has tenants a and b in shard-00; C1 (pushed by one
// replica) offboards b; C2 (pushed by another on top of C1) onboards b
// again with the same files, so C2's shard folder is C0's tree again.
func abaCommits(t *testing.T) (c0, c1, c2 memtree.Tree, want artifact.Artifact) {
	t.Helper()
	c0, c1, c2 = shardTree("a", "b"), shardTree("a"), shardTree("a", "b")
	want, err := artifact.Build(c2, "root/tenants/premium/shard-00")
	if err != nil {
		t.Fatal(err)
	}
	return c0, c1, c2, want
}

// abaReplica is abaCommits, the folder's object name and a replica on an
// optimistic client whose branch is at *head ("c0").
func abaReplica(t *testing.T) (c0, c1, c2 memtree.Tree, name string, dyn *dynfake.FakeDynamicClient, head *string, p *Publisher) {
	t.Helper()
	c0, c1, c2, _ = abaCommits(t)
	dyn, _ = optimisticClient()
	at := "c0"
	return c0, c1, c2, Name("premium", "shard-00"), dyn, &at, replica(dyn, &at)
}

func digestOf(t *testing.T, p *Publisher, name string) string {
	t.Helper()
	d, err := artifactField(p.o.Client, name, "digest")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// artifactField reads field of the status.artifact of ExternalArtifact name.
func artifactField(c dynamic.Interface, name, field string) (string, error) {
	obj, err := c.Resource(flux.ExternalArtifacts).Namespace("flux-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	v, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", field)
	return v, nil
}

// TestPublishAfterOwnPushTrustsTreesOverAnotherReplicasWrite: B published
// C0; A pushes C1 (b offboarded) and publishes it; B pushes C2 (b again:
// C0's folder) and publishes after its push, which does not Forget: B's
// trees say shard-00 is at C0's tree, but its push changed the folder, so
// B reads and writes it (before, it trusted its trees and left A's C1
// folder until a tick). No race is needed.
func TestPublishAfterOwnPushTrustsTreesOverAnotherReplicasWrite(t *testing.T) {
	ctx := context.Background()
	c0, c1, c2, want := abaCommits(t)
	name := Name("premium", "shard-00")
	dyn, _ := optimisticClient()
	head := "c0"
	a, b := replica(dyn, &head), replica(dyn, &head)
	if _, err := b.Publish(ctx, c0, "c0", History{}); err != nil {
		t.Fatal(err)
	}
	head = "c1"
	if _, err := a.Publish(ctx, c1, "c1", History{}); err != nil {
		t.Fatal(err)
	}
	head = "c2"
	if _, err := b.Publish(ctx, c2, "c2", links(c0, c1, c2)); err != nil { // on B's push signal: no Forget
		t.Fatal(err)
	}
	if d := digestOf(t, b, name); d != want.Digest {
		t.Errorf("head is C2, the ExternalArtifact is at %s (C1's folder), want C2's %s", d, want.Digest)
	}
}

// TestAFolderOfASupersededPushIsWrittenByTheNextPublish: B pushes C2 (a
// folder back to C0's content) but the branch moves on to C3, which does
// not touch the folder, before B publishes: B's publish of C2 is refused.
// Its next publish, of C3 and not its own push, still writes the folder
// (the object is at C0's archive, from C0): a replica holding C1 may be
// about to write. A folder no push of B changed is not written again.
func TestAFolderOfASupersededPushIsWrittenByTheNextPublish(t *testing.T) {
	ctx := context.Background()
	c0, c1, c2, want := abaCommits(t)
	c3 := maps.Clone(c2)
	c3["root/tenants/premium/kustomization.yaml"] = "resources:\n  - shard-00\n# another writer\n"
	name := Name("premium", "shard-00")
	dyn, _ := optimisticClient()
	head := "c0"
	b := replica(dyn, &head)
	if _, err := b.Publish(ctx, c0, "c0", History{}); err != nil {
		t.Fatal(err)
	}
	head = "c3" // B pushed C2 from C1; C3 came before B published
	if _, err := b.Publish(ctx, c2, "c2", links(c0, c1, c2)); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("B's publish of C2 with the branch at C3: %v, want ErrSuperseded", err)
	}
	writes := func() int {
		n := 0
		for _, a := range dyn.Actions() {
			if a.GetVerb() == "update" && a.GetSubresource() == "status" {
				n++
			}
		}
		return n
	}
	before := writes()
	b.Forget()
	if _, err := b.Publish(ctx, c3, "c3", links(c0, c1, c2, c3)); err != nil { // still since C0
		t.Fatal(err)
	}
	if writes() != before+1 {
		t.Errorf("publishing C3 after the refused C2 wrote %d objects, want shard-00 written once", writes()-before)
	}
	obj, err := dyn.Resource(flux.ExternalArtifacts).Namespace("flux-system").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	origin, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "metadata", OriginRevision)
	if d, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "digest"); d != want.Digest || origin != "main@sha1:c3" {
		t.Errorf("the ExternalArtifact is at %s from %s, want %s written from C3", d, origin, want.Digest)
	}
	// C4 from C3 changes no shard folder: nothing is written.
	c4 := maps.Clone(c3)
	c4["root/tier-templates/premium_tenant_template.yaml"] = "kind: HelmRelease\n# changed\n"
	head = "c4"
	before = writes()
	if _, err := b.Publish(ctx, c4, "c4", links(c3, c4)); err != nil {
		t.Fatal(err)
	}
	if writes() != before {
		t.Errorf("a push that changed no shard folder wrote %d objects", writes()-before)
	}
}

// TestAPeriodicPublishReadsEachKindOnce: the periodic publish (after
// Forget) of a branch with 12 shard folders, none changed, lists the
// ExternalArtifacts and the Kustomizations once each (after reading the
// first two of each one by one) and reads or writes nothing else, and builds no archive again: it holds the repository lock,
// and with it the worker's next push, for a fixed number of requests.
func TestAPeriodicPublishReadsEachKindOnce(t *testing.T) {
	ctx := context.Background()
	l := gitops.Layout{Root: "root", Shards: 6, ShardKustomizations: true}
	tree := memtree.Tree{
		l.LayoutFile(): string(l.LayoutContent()),
		"root/tier-templates/premium_tenant_template.yaml": "kind: HelmRelease\n",
		"root/tier-templates/basic_tenant_template.yaml":   "kind: HelmRelease\n",
	}
	for _, tier := range []string{"premium", "basic"} {
		tree["root/tenants/"+tier+"/kustomization.yaml"] = "resources: []\n"
		for i := range 6 {
			dir := fmt.Sprintf("root/tenants/%s/shard-%02d/", tier, i)
			tree[dir+"kustomization.yaml"] = "resources:\n  - a.yaml\n"
			tree[dir+"a.yaml"] = fmt.Sprintf("kind: ConfigMap\nmetadata:\n  name: %s-%d\n", tier, i)
		}
	}
	template := tenantsKustomization()
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{flux.Kustomizations: "KustomizationList", flux.ExternalArtifacts: "ExternalArtifactList"}, template)
	p := New(Options{Layout: gitops.Layout{Root: "root"}, Namespace: "flux-system", Client: dyn, Template: "dataplane-tenants",
		URL: "http://worker:8081", Branch: "main"})
	folders, err := p.Publish(ctx, tree, "c1", History{})
	if err != nil || len(folders) != 12 {
		t.Fatalf("first publish: %d folders, %v", len(folders), err)
	}
	built := p.built[path.Join("root/tenants/premium", "shard-00")].a.Data
	dyn.ClearActions()
	p.Forget()
	if _, err := p.Publish(ctx, tree, "c1", History{Complete: true}); err != nil {
		t.Fatal(err)
	}
	verbs := func() map[string]int {
		v := map[string]int{}
		for _, a := range dyn.Actions() {
			v[a.GetVerb()+" "+a.GetResource().Resource]++
		}
		dyn.ClearActions()
		return v
	}
	// The first two of each kind are read one by one, then the kind is listed.
	if got, want := verbs(), map[string]int{"get externalartifacts": getsBeforeList, "list externalartifacts": 1,
		"get kustomizations": getsBeforeList, "list kustomizations": 1}; !maps.Equal(got, want) {
		t.Errorf("the periodic publish of 12 unchanged folders made %v, want %v", got, want)
	}
	if again := p.built[path.Join("root/tenants/premium", "shard-00")].a.Data; &again[0] != &built[0] {
		t.Error("an unchanged folder's archive was built again")
	}
	// A push that changes one folder: a read of its object and of its
	// Kustomization (done with the archive before?), one write, no listing.
	name := Name("basic", "shard-03")
	rev, err := artifactField(dyn, name, "revision")
	if err != nil {
		t.Fatal(err)
	}
	k, err := dyn.Resource(flux.Kustomizations).Namespace("flux-system").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k.Object["status"] = map[string]any{"lastAttemptedRevision": rev}
	if _, err := dyn.Resource(flux.Kustomizations).Namespace("flux-system").UpdateStatus(ctx, k, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn.ClearActions()
	next := maps.Clone(tree)
	next["root/tenants/basic/shard-03/a.yaml"] = "kind: ConfigMap\nmetadata:\n  name: basic-3-changed\n"
	if _, err := p.Publish(ctx, next, "c2", links(tree, next)); err != nil {
		t.Fatal(err)
	}
	if got, want := verbs(), map[string]int{"get externalartifacts": 1, "get kustomizations": 1, "update externalartifacts": 1}; !maps.Equal(got, want) {
		t.Errorf("the publish of a push changing one folder made %v, want %v", got, want)
	}
}

// TestANewerPublishFencesAnOlderWriteReadBefore: A publishes C1 (b
// offboarded): it reads the object (at C0's folder) and its ls-remote sees
// C1. Then, before A writes, B's newer commit is on the branch and B
// publishes it: C2 (b onboarded again: C0's folder again), C2 and then C3
// (outside the shard folders) before B's publisher ran, or C2 by a B that
// restarted between its push and its publish. Each time the object
// already points at B's folder, and B writes it anyway (the folder changed
// since B's last publish, or B does not know what changed), so its
// resourceVersion moves and A's write, read before, is refused. Before,
// B wrote nothing and A's write left C1's folder: the shard Kustomization
// pruned b. (The reviews' TestNewerReplicaFindingItsFolderPublished-
// StillFencesAnOlderWrite, TestTwoOwnPushesBeforeAPublishStillFenceAn-
// OlderWrite, TestAPushWhoseBaseIsUnknownStillFencesAnOlderWrite.)
func TestANewerPublishFencesAnOlderWriteReadBefore(t *testing.T) {
	ctx := context.Background()
	c0, c1, c2, want := abaCommits(t)
	c3 := maps.Clone(c2)
	c3["root/tier-templates/premium_tenant_template.yaml"] = "kind: HelmRelease\n# C3\n"
	for _, tc := range []struct {
		name string
		// newer pushes B's commits (moves head) and publishes them.
		newer func(b *Publisher, head *string, dyn *dynfake.FakeDynamicClient) error
	}{
		{"B pushed C2", func(b *Publisher, head *string, _ *dynfake.FakeDynamicClient) error {
			*head = "c2"
			_, err := b.Publish(ctx, c2, "c2", links(c0, c1, c2))
			return err
		}},
		{"B pushed C2 and C3 before publishing", func(b *Publisher, head *string, _ *dynfake.FakeDynamicClient) error {
			*head = "c3"
			_, err := b.Publish(ctx, c3, "c3", links(c0, c1, c2, c3))
			return err
		}},
		{"B pushed C2 and restarted before publishing", func(_ *Publisher, head *string, dyn *dynfake.FakeDynamicClient) error {
			*head = "c2"
			_, err := replica(dyn, head).Publish(ctx, c2, "c2", History{}) // a first publish: what changed is not known
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dyn, conflicts := optimisticClient()
			head := "c0"
			a, b := replica(dyn, &head), replica(dyn, &head)
			for _, r := range []*Publisher{a, b} {
				if _, err := r.Publish(ctx, c0, "c0", History{}); err != nil {
					t.Fatal(err)
				}
			}
			head = "c1" // A pushed C1
			var errB error
			interleaved := false
			a.CheckHeadWith(func(context.Context) (string, error) {
				was := head // A's ls-remote sees C1; then B, before A writes
				if !interleaved {
					interleaved = true
					errB = tc.newer(b, &head, dyn)
				}
				return was, nil
			})
			_, errA := a.Publish(ctx, c1, "c1", links(c0, c1))
			if !interleaved || *conflicts != 1 || !errors.Is(errA, ErrSuperseded) {
				t.Errorf("planned interleaving: B published between A's read and write %v, conflicts %d (want 1), A's publish %v (want ErrSuperseded)", interleaved, *conflicts, errA)
			}
			if d := digestOf(t, a, Name("premium", "shard-00")); d != want.Digest || errB != nil {
				t.Errorf("the head is B's, the ExternalArtifact is at %s (C1's folder), want B's %s; B's publish: %v", d, want.Digest, errB)
			}
		})
	}
}

// TestARevisionIsNeverOneTheObjectHeldBefore: a folder back to what it held
// (C0, C1, then C2 with C0's content) gets a revision of its own, not C0's
// again: a Kustomization that last applied C0's would look as if it had
// applied C2's while it applies C1's. A write that changes nothing (a
// restart publishing the same folder from a later commit) keeps the
// revision, so nothing is applied for it.
func TestARevisionIsNeverOneTheObjectHeldBefore(t *testing.T) {
	ctx := context.Background()
	c0, c1, c2, name, dyn, head, p := abaReplica(t)
	status := func() (rev, digest, origin string) {
		obj, err := dyn.Resource(flux.ExternalArtifacts).Namespace("flux-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rev, _, _ = unstructured.NestedString(obj.Object, "status", "artifact", "revision")
		digest, _, _ = unstructured.NestedString(obj.Object, "status", "artifact", "digest")
		origin, _, _ = unstructured.NestedString(obj.Object, "status", "artifact", "metadata", OriginRevision)
		return rev, digest, origin
	}
	var revs, digests []string
	chain := []memtree.Tree{c0}
	for i, c := range []memtree.Tree{c0, c1, c2} {
		*head = fmt.Sprintf("c%d", i)
		if i > 0 {
			chain = append(chain, c)
		}
		folders, err := p.Publish(ctx, c, *head, links(chain[max(0, i-1):]...))
		if err != nil {
			t.Fatal(err)
		}
		rev, digest, origin := status()
		if origin != "main@sha1:"+*head || len(folders) != 1 || folders[0].Revision != rev {
			t.Fatalf("%s published from %s, folders %+v, want from %s with revision %s", name, origin, folders, *head, rev)
		}
		revs, digests = append(revs, rev), append(digests, digest)
	}
	if digests[2] != digests[0] || digests[1] == digests[0] {
		t.Fatalf("setup: digests %v, want C2's folder to be C0's", digests)
	}
	if revs[0] == revs[1] || revs[1] == revs[2] || revs[2] == revs[0] {
		t.Errorf("revisions %v: want three different ones, the third not C0's again", revs)
	}
	if revs[2] != "main@sha1:c2" {
		t.Errorf("C2's revision %s, want the commit it was first published from", revs[2])
	}

	// A restart: every folder counts as changed and is written from the
	// head, C3, which did not touch it; its revision stays.
	*head = "c3"
	q := replica(dyn, head)
	if _, err := q.Publish(ctx, c2, "c3", History{}); err != nil {
		t.Fatal(err)
	}
	if rev, digest, origin := status(); rev != revs[2] || digest != digests[2] || origin != "main@sha1:c3" {
		t.Errorf("after a restart at C3: revision %s, digest %s, origin %s; want %s kept, written from C3", rev, digest, origin, revs[2])
	}
}

// TestANewArchiveWaitsForItsKustomizationsApply: a folder's new archive is
// not written while its Kustomization is reconciling (ErrApplying; the
// folder stays pending), is written once it is not, and after maxHold at
// the latest; a write that keeps the archive (only the origin moves) does
// not wait.
func TestANewArchiveWaitsForItsKustomizationsApply(t *testing.T) {
	ctx := context.Background()
	p, head, clock, k := holdRig(t)
	c0, c1, c2, _ := abaCommits(t)
	name := Name("premium", "shard-00")
	dyn := p.o.Client
	publish := func(tree memtree.Tree, commit string, h History) error {
		*head = commit
		_, err := p.Publish(ctx, tree, commit, h)
		return err
	}
	if err := publish(c0, "c0", History{}); err != nil {
		t.Fatal(err)
	}
	d0 := digestOf(t, p, name)
	reconciling := func(on bool) {
		if on {
			k(reconcilingTrue)
		} else {
			k(reconcilingFalse)
		}
	}

	reconciling(true)
	if err := publish(c1, "c1", links(c0, c1)); !errors.Is(err, ErrApplying) {
		t.Fatalf("a new archive while its Kustomization reconciles: %v, want ErrApplying", err)
	}
	if d := digestOf(t, p, name); d != d0 {
		t.Fatalf("written while its Kustomization reconciles: %s", d)
	}
	*clock = clock.Add(maxHold / 2)
	if err := publish(c1, "c1", links(c1)); !errors.Is(err, ErrApplying) {
		t.Fatalf("still reconciling, half of maxHold later: %v, want ErrApplying", err)
	}
	reconciling(false)
	if err := publish(c1, "c1", links(c1)); err != nil {
		t.Fatalf("the apply done: %v", err)
	}
	d1 := digestOf(t, p, name)
	if d1 == d0 {
		t.Fatal("the folder held is not written once its Kustomization is done")
	}

	reconciling(true)
	if err := publish(c2, "c2", links(c1, c2)); !errors.Is(err, ErrApplying) {
		t.Fatalf("C2 while its Kustomization reconciles: %v", err)
	}
	*clock = clock.Add(maxHold)
	if err := publish(c2, "c2", links(c2)); err != nil {
		t.Fatalf("after maxHold: %v", err)
	}
	if d := digestOf(t, p, name); d != d0 {
		t.Fatalf("after maxHold the folder is at %s, want C2's (C0's content) %s", d, d0)
	}

	// A restart at C3, which did not touch the folder: written from C3
	// (its origin) at once, the archive the same.
	q := replica(dyn.(*dynfake.FakeDynamicClient), head)
	*head = "c3"
	if _, err := q.Publish(ctx, c2, "c3", History{}); err != nil {
		t.Fatalf("a write keeping the archive while the Kustomization reconciles: %v", err)
	}
}

func holdRig(t *testing.T) (*Publisher, *string, *time.Time, func(conds ...map[string]any)) {
	t.Helper()
	_, _, _, name, dyn, head, p := abaReplica(t)
	clock := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	p.now = func() time.Time { return clock }
	ks := dyn.Resource(flux.Kustomizations).Namespace("flux-system")
	k := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": name, "namespace": "flux-system"}}}
	made := false
	set := func(conds ...map[string]any) {
		t.Helper()
		cs := make([]any, len(conds))
		for i, c := range conds {
			cs[i] = c
		}
		// kustomize-controller attempted the archive the object holds.
		attempted, _ := artifactField(dyn, name, "revision") // "" before the first publish
		k.Object["status"] = map[string]any{"conditions": cs, "lastAttemptedRevision": attempted}
		var err error
		if !made {
			k, err = ks.Create(context.Background(), k, metav1.CreateOptions{})
			made = true
		} else {
			k, err = ks.UpdateStatus(context.Background(), k, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return p, head, &clock, set
}

var (
	reconcilingTrue  = map[string]any{"type": "Reconciling", "status": "True", "reason": "Progressing"}
	reconcilingFalse = map[string]any{"type": "Reconciling", "status": "False"}
)

// TestAHoldEndedUnseenStillHoldsALaterArchive: a hold that ends without
// the Kustomization seen idle (the folder went back to the archive its
// object holds, so nothing new is written) is forgotten: a later new
// archive during a later apply is held again (the review of 70febc7).
func TestAHoldEndedUnseenStillHoldsALaterArchive(t *testing.T) {
	ctx := context.Background()
	p, head, clock, k := holdRig(t)
	a, b, c := shardTree("a", "b"), shardTree("a"), shardTree("a", "c")
	pub := func(tree memtree.Tree, commit string, h History) error {
		*head = commit
		_, err := p.Publish(ctx, tree, commit, h)
		return err
	}
	if err := pub(a, "c0", History{}); err != nil {
		t.Fatal(err)
	}
	k(reconcilingTrue)
	if err := pub(b, "c1", links(a, b)); !errors.Is(err, ErrApplying) {
		t.Fatalf("c1 during an apply: %v, want ErrApplying", err)
	}
	// c2 takes the folder back to what its object holds: written (origin
	// only), no new archive, no settled.
	if err := pub(a, "c2", links(a, b, a)); err != nil {
		t.Fatalf("c2: %v", err)
	}
	k(reconcilingFalse)
	// An hour later, the Kustomization applies again (its interval, or a
	// change of another folder's archive... any apply), and c3 brings a new
	// archive.
	*clock = clock.Add(time.Hour)
	k(reconcilingTrue)
	if err := pub(c, "c3", links(a, c)); !errors.Is(err, ErrApplying) {
		t.Errorf("a new archive while the Kustomization applies, an hour after a hold that ended unseen: %v, want ErrApplying (held), got written at once", err)
	}
}

// TestAHoldRunOutIsNotStartedAgainByARefusedWrite: a hold that runs out
// while the replica's commit is no longer the head (another replica
// pushed) is kept until the folder is written: the publish of the new head
// writes it at once, not after another maxHold.
func TestAHoldRunOutIsNotStartedAgainByARefusedWrite(t *testing.T) {
	ctx := context.Background()
	p, head, clock, k := holdRig(t)
	a, b := shardTree("a", "b"), shardTree("a")
	if _, err := p.Publish(ctx, a, "c0", History{}); err != nil {
		t.Fatal(err)
	}
	k(reconcilingTrue)
	*head = "c1"
	if _, err := p.Publish(ctx, b, "c1", links(a, b)); !errors.Is(err, ErrApplying) {
		t.Fatalf("c1 during an apply: %v, want ErrApplying", err)
	}
	// A minute later the retry (fetch=false: still c1) runs the hold out,
	// but another replica pushed c2 (touching another folder) meanwhile.
	*clock = clock.Add(maxHold)
	*head = "c2"
	if _, err := p.Publish(ctx, b, "c1", links(a, b)); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("the retry of c1 once c2 is the head: %v, want ErrSuperseded", err)
	}
	// The publisher loop (internal/publisher) fetches and publishes c2 at once.
	*clock = clock.Add(time.Millisecond)
	_, err := p.Publish(ctx, b, "c2", links(a, b, b))
	if errors.Is(err, ErrApplying) {
		t.Errorf("the folder's archive has waited %s > maxHold, and is held again (a new minute): %v", maxHold+time.Millisecond, err)
	}
}

// TestAFailedKustomizationWaitingForItsRetryHoldsNothing: a Kustomization
// whose last apply failed keeps Reconciling=True (reason
// ProgressingWithRetry, kustomize-controller's finalizeStatus) while it
// waits for its retry: nothing is being applied, and the archive that
// may fix the folder is written at once.
func TestAFailedKustomizationWaitingForItsRetryHoldsNothing(t *testing.T) {
	ctx := context.Background()
	p, head, _, k := holdRig(t)
	a, b := shardTree("a", "b"), shardTree("a")
	if _, err := p.Publish(ctx, a, "c0", History{}); err != nil {
		t.Fatal(err)
	}
	k(map[string]any{"type": "Ready", "status": "False", "reason": "HealthCheckFailed"},
		map[string]any{"type": "Reconciling", "status": "True", "reason": "ProgressingWithRetry"})
	*head = "c1"
	if _, err := p.Publish(ctx, b, "c1", links(a, b)); errors.Is(err, ErrApplying) {
		t.Errorf("a failed Kustomization waiting for its retry holds the next archive: %v", err)
	}
}

// holdReplicas is holdRig with a second replica y on the same cluster,
// branch and clock, both having published c0 (the branch at "c0").
func holdReplicas(t *testing.T, c0 memtree.Tree) (x, y *Publisher, head *string, clock *time.Time, k func(conds ...map[string]any)) {
	t.Helper()
	x, head, clock, k = holdRig(t)
	y = replica(x.o.Client.(*dynfake.FakeDynamicClient), head)
	y.now = x.now
	for _, p := range []*Publisher{x, y} {
		if _, err := p.Publish(context.Background(), c0, *head, History{}); err != nil {
			t.Fatal(err)
		}
	}
	return x, y, head, clock, k
}

// TestAHoldAnotherReplicaEndedIsForgotten: two replicas hold the same
// folder; the apply ends and one of them writes the archive. The other's
// next publish finds it written and forgets its hold, so its next new
// archive for the folder, a while later during an apply, is held.
func TestAHoldAnotherReplicaEndedIsForgotten(t *testing.T) {
	ctx := context.Background()
	a, b, c := shardTree("a", "b"), shardTree("a"), shardTree("a", "c")
	x, y, head, clock, k := holdReplicas(t, a)
	k(reconcilingTrue)
	*head = "c1"
	for _, p := range []*Publisher{x, y} {
		if _, err := p.Publish(ctx, b, "c1", links(a, b)); !errors.Is(err, ErrApplying) {
			t.Fatalf("c1 during an apply: %v, want ErrApplying", err)
		}
	}
	k(reconcilingFalse)
	if _, err := y.Publish(ctx, b, "c1", links(a, b)); err != nil { // y's retry comes first
		t.Fatal(err)
	}
	if _, err := x.Publish(ctx, b, "c1", links(a, b)); err != nil { // x's: nothing left to write
		t.Fatal(err)
	}
	*clock = clock.Add(10 * time.Minute)
	k(reconcilingTrue) // applying c1's archive, or its interval's apply
	*head = "c2"
	stale := maps.Clone(x.holding)
	if _, err := x.Publish(ctx, c, "c2", links(b, c)); !errors.Is(err, ErrApplying) {
		t.Errorf("x's new archive during an apply (now %s): %v, want ErrApplying; x's holding before it: %v", x.now().Format(time.TimeOnly), err, stale)
	}
}

// TestWaitingReadsTheHeldFoldersKustomizations: between tries a publisher
// asks Waiting, which reads only the held folders' Kustomizations: true
// while one applies, false once it is done or maxHold passed, and false
// with nothing held.
func TestWaitingReadsTheHeldFoldersKustomizations(t *testing.T) {
	ctx := context.Background()
	p, head, clock, k := holdRig(t)
	c0, c1, _, _ := abaCommits(t)
	if p.Waiting(ctx) {
		t.Fatal("waiting with nothing held")
	}
	if _, err := p.Publish(ctx, c0, "c0", History{}); err != nil {
		t.Fatal(err)
	}
	k(reconcilingTrue)
	*head = "c1"
	if _, err := p.Publish(ctx, c1, "c1", links(c0, c1)); !errors.Is(err, ErrApplying) {
		t.Fatalf("c1 during an apply: %v", err)
	}
	dyn := p.o.Client.(*dynfake.FakeDynamicClient)
	dyn.ClearActions()
	if !p.Waiting(ctx) {
		t.Error("not waiting while the Kustomization applies")
	}
	for _, a := range dyn.Actions() {
		if a.GetVerb() != "get" || a.GetResource() != flux.Kustomizations {
			t.Errorf("Waiting made %s %s, want only a get of the Kustomization", a.GetVerb(), a.GetResource().Resource)
		}
	}
	*clock = clock.Add(maxHold)
	if p.Waiting(ctx) {
		t.Error("waiting past maxHold")
	}
	*clock = clock.Add(-maxHold)
	k(reconcilingFalse)
	if p.Waiting(ctx) {
		t.Error("waiting once the apply is done")
	}
	if _, err := p.Publish(ctx, c1, "c1", links(c1)); err != nil || p.Waiting(ctx) {
		t.Errorf("written: %v; waiting %v, want nothing held", err, p.Waiting(ctx))
	}
}

// TestANewArchiveWaitsUntilTheOneBeforeIsAttempted: a Kustomization not
// reconciling, but that has not attempted the archive its object holds
// yet (just made, or queued), holds the next archive too: it may start on
// the one before at any moment and take the next right after it. A
// suspended one holds nothing.
func TestANewArchiveWaitsUntilTheOneBeforeIsAttempted(t *testing.T) {
	ctx := context.Background()
	_, _, _, name, dyn, head, p := abaReplica(t)
	c0, c1, _, _ := abaCommits(t)
	if _, err := p.Publish(ctx, c0, "c0", History{}); err != nil {
		t.Fatal(err)
	}
	k := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": name, "namespace": "flux-system"}, "spec": map[string]any{},
		"status": map[string]any{"lastAttemptedRevision": "main@sha1:older"}}}
	ks := dyn.Resource(flux.Kustomizations).Namespace("flux-system")
	k, err := ks.Create(ctx, k, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	*head = "c1"
	if _, err := p.Publish(ctx, c1, "c1", links(c0, c1)); !errors.Is(err, ErrApplying) {
		t.Fatalf("a new archive before the one before was attempted: %v, want ErrApplying", err)
	}
	k.Object["spec"] = map[string]any{"suspend": true}
	if _, err := ks.Update(ctx, k, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, c1, "c1", links(c1)); err != nil {
		t.Errorf("a suspended Kustomization: %v, want the archive written", err)
	}
}

// TestAHoldIsNotCarriedOverToAnArchiveAnotherReplicaWrote: another
// replica may write a held folder with an archive newer than the one this
// replica's hold waited on, and its Kustomization then starts a new apply.
// That apply gets a minute of its own, not what is left of the old hold
// (found by review: it got nothing).
//
// Order of events (two replicas x and y, one shard folder, its
// Kustomization K):
//
//	T0     K applies c0's archive; x pushes c1 (onboards b): held.
//	T0+5s  K is done with c0's. y pushes c2 (onboards c) and writes it
//	       (K idle): K starts applying c2's archive.
//	T0+1m  y pushes c3 (offboards c) and holds it: K still applies c2's.
//	       x publishes c3 (its retry once Waiting sees maxHold passed, or
//	       its tick): x's hold of T0 has run out, so x writes c3's archive
//	       while K applies c2's, the very case the hold is for (c's
//	       HelmRelease left in the cluster for good).
func TestAHoldIsNotCarriedOverToAnArchiveAnotherReplicaWrote(t *testing.T) {
	ctx := context.Background()
	name := Name("premium", "shard-00")
	c0, c1, c2, c3 := shardTree("a"), shardTree("a", "b"), shardTree("a", "c"), shardTree("a")
	x, y, head, clock, k := holdReplicas(t, c0)
	k(reconcilingTrue) // K applies c0's archive
	*head = "c1"
	if _, err := x.Publish(ctx, c1, "c1", links(c0, c1)); !errors.Is(err, ErrApplying) {
		t.Fatalf("x's c1 during K's apply of c0's archive: %v, want ErrApplying", err)
	}
	t0 := *clock

	*clock = t0.Add(5 * time.Second)
	k(reconcilingFalse) // K done with c0's archive
	*head = "c2"
	if _, err := y.Publish(ctx, c2, "c2", links(c0, c1, c2)); err != nil {
		t.Fatalf("y's c2 with K idle: %v", err)
	}
	d2 := digestOf(t, y, name)
	k(reconcilingTrue) // K applies c2's archive, which y just wrote

	*clock = t0.Add(maxHold)
	*head = "c3"
	if _, err := y.Publish(ctx, c3, "c3", links(c2, c3)); !errors.Is(err, ErrApplying) {
		t.Fatalf("setup: y's c3 while K applies c2's archive: %v, want ErrApplying", err)
	}
	_, err := x.Publish(ctx, c3, "c3", links(c0, c1, c2, c3))
	if !errors.Is(err, ErrApplying) || digestOf(t, x, name) != d2 {
		t.Errorf("x's c3 while K applies c2's archive (written by y %s ago, never waited for by x): err %v, "+
			"the folder's object at %s (c2's %s); want it held (ErrApplying): x counted the minute from its hold of c0's apply, at %s",
			maxHold-5*time.Second, err, digestOf(t, x, name), d2, t0.Format(time.TimeOnly))
	}
}

// TestNothingIsMadeFromACommitNoLongerTheHead: a publish of a commit that
// is no longer the branch's head (its fetch failed, or another replica, or
// layout migrate --no-shard-kustomizations, pushed since) makes nothing:
// neither a missing ExternalArtifact nor a missing Kustomization, which a
// migration back deleted and would find made again. Published on the
// head, both are made.
func TestNothingIsMadeFromACommitNoLongerTheHead(t *testing.T) {
	ctx := context.Background()
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{flux.Kustomizations: "KustomizationList", flux.ExternalArtifacts: "ExternalArtifactList"},
		tenantsKustomization())
	head := "c2" // migrated back: no shard Kustomizations on the branch
	p := replica(dyn, &head)
	p.o.Template = "dataplane-tenants"
	name := Name("premium", "shard-00")
	count := func() (artifacts, kustomizations int) {
		for _, gvr := range []schema.GroupVersionResource{flux.ExternalArtifacts, flux.Kustomizations} {
			list, err := dyn.Resource(gvr).Namespace("flux-system").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range list.Items {
				if o.GetName() == name {
					if gvr == flux.ExternalArtifacts {
						artifacts++
					} else {
						kustomizations++
					}
				}
			}
		}
		return artifacts, kustomizations
	}
	if _, err := p.Publish(ctx, shardTree("a"), "c1", History{}); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("publish of c1 with the branch at c2: %v, want ErrSuperseded", err)
	}
	if a, k := count(); a+k > 0 {
		t.Fatalf("a publish of a superseded commit made %d ExternalArtifacts and %d Kustomizations", a, k)
	}
	// Its ExternalArtifact there already, its Kustomization not: still
	// nothing made.
	head = "c1"
	if _, err := p.Publish(ctx, shardTree("a"), "c1", History{}); err != nil {
		t.Fatal(err)
	}
	if a, k := count(); a != 1 || k != 1 {
		t.Fatalf("published on the head: %d ExternalArtifacts, %d Kustomizations, want 1 and 1", a, k)
	}
	if err := dyn.Resource(flux.Kustomizations).Namespace("flux-system").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Forget()
	head = "c2"
	if _, err := p.Publish(ctx, shardTree("a"), "c1", History{}); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("publish of c1 with the branch at c2, its object in place: %v, want ErrSuperseded", err)
	}
	if _, k := count(); k != 0 {
		t.Fatal("a publish of a superseded commit made the Kustomization a migration back deleted")
	}
}

// TestTwoReplicasServeOneArchive: two replicas publish the same branch
// again and again, as their periodic publishes do: the ExternalArtifact is
// written once and never flaps between two digests, and the archive its
// URL names is the same bytes from either replica, matching the digest
// kustomize-controller checks. The bytes are the artifact format's alone
// (internal/artifact/format.go), not a compressor's, so replicas of
// different builds agree too.
func TestTwoReplicasServeOneArchive(t *testing.T) {
	ctx := context.Background()
	dyn, _ := optimisticClient()
	head := "c1"
	x, y := replica(dyn, &head), replica(dyn, &head)
	at := func(ctx context.Context, commit string, fn func(Source) error) error { return fn(shardTree("a", "b")) }
	x.BuildWith(at)
	y.BuildWith(at)
	name := Name("premium", "shard-00")
	for round := range 4 {
		for _, p := range []*Publisher{x, y} {
			p.Forget()
			if _, err := p.Publish(ctx, shardTree("a", "b"), "c1", History{}); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	updates := 0
	for _, a := range dyn.Actions() {
		if a.GetVerb() == "update" && a.GetResource() == flux.ExternalArtifacts {
			updates++
		}
	}
	if updates != 1 {
		t.Errorf("the ExternalArtifact was written %d times, want once: it flaps", updates)
	}
	digest, err := artifactField(dyn, name, "digest")
	if err != nil {
		t.Fatal(err)
	}
	url, err := artifactField(dyn, name, "url")
	if err != nil {
		t.Fatal(err)
	}
	file := strings.TrimPrefix(url, "http://worker:8081")
	for i, p := range []*Publisher{x, y, replica(dyn, &head)} {
		if i == 2 {
			p.BuildWith(at) // a replica that published nothing: built on request
		}
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, file, nil))
		sum := sha256.Sum256(rec.Body.Bytes())
		if rec.Code != http.StatusOK || "sha256:"+hex.EncodeToString(sum[:]) != digest {
			t.Errorf("replica %d serves %s with %d, bytes of another digest than the object's %s", i, file, rec.Code, digest)
		}
	}
}

// moveTrees: c0 has tenant mv in premium's shard-00 (its Namespace and
// HelmRelease), c1 has it moved to advanced's shard-00 in one commit.
func moveTrees() (c0, c1 memtree.Tree) {
	l := gitops.Layout{Root: "root", Shards: 1, ShardKustomizations: true}
	base := memtree.Tree{
		l.LayoutFile(): string(l.LayoutContent()),
		"root/tier-templates/premium_tenant_template.yaml":  "kind: HelmRelease\n",
		"root/tier-templates/advanced_tenant_template.yaml": "kind: HelmRelease\n",
		"root/tenants/premium/kustomization.yaml":           "resources: []\n",
		"root/tenants/advanced/kustomization.yaml":          "resources: []\n",
		"root/tenants/premium/shard-00/stay.yaml":           "kind: ConfigMap\nmetadata:\n  name: stay\n",
		"root/tenants/advanced/shard-00/other.yaml":         "kind: ConfigMap\nmetadata:\n  name: other\n",
	}
	tenant := "kind: Namespace\nmetadata:\n  name: mv\n---\nkind: HelmRelease\nmetadata:\n  name: mv-%s\n  namespace: flux-system\n"
	c0, c1 = maps.Clone(base), maps.Clone(base)
	c0["root/tenants/premium/shard-00/kustomization.yaml"] = "resources:\n  - mv.yaml\n  - stay.yaml\n"
	c0["root/tenants/premium/shard-00/mv.yaml"] = fmt.Sprintf(tenant, "premium")
	c0["root/tenants/advanced/shard-00/kustomization.yaml"] = "resources:\n  - other.yaml\n"
	c1["root/tenants/premium/shard-00/kustomization.yaml"] = "resources:\n  - stay.yaml\n"
	c1["root/tenants/advanced/shard-00/kustomization.yaml"] = "resources:\n  - mv.yaml\n  - other.yaml\n"
	c1["root/tenants/advanced/shard-00/mv.yaml"] = fmt.Sprintf(tenant, "advanced")
	return c0, c1
}

// TestAFolderGivingUpObjectsWaitsForTheTaker: a tenant moved to another
// tier in one commit: its Namespace leaves premium's shard-00 and enters
// advanced's. advanced's folder is published first; premium's waits
// (ErrApplying, Waiting) until advanced's Kustomization has applied its
// new revision, so that Flux, which prunes only objects carrying the
// pruning Kustomization's name, finds the Namespace taken over and keeps
// it. Then premium's is published.
func TestAFolderGivingUpObjectsWaitsForTheTaker(t *testing.T) {
	ctx := context.Background()
	dyn, _ := optimisticClient()
	head := "c0"
	p := replica(dyn, &head)
	c0, c1 := moveTrees()
	if _, err := p.Publish(ctx, c0, "c0", History{}); err != nil {
		t.Fatal(err)
	}
	premium, advanced := Name("premium", "shard-00"), Name("advanced", "shard-00")
	kust := func(name, applied string) {
		k := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
			"metadata": map[string]any{"name": name, "namespace": "flux-system"},
			"status":   map[string]any{"lastAppliedRevision": applied, "lastAttemptedRevision": applied},
		}}
		res := dyn.Resource(flux.Kustomizations).Namespace("flux-system")
		if _, err := res.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			if _, err := res.Create(ctx, k, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			return
		}
		if _, err := res.UpdateStatus(ctx, k, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{premium, advanced} {
		rev, err := artifactField(dyn, name, "revision")
		if err != nil {
			t.Fatal(err)
		}
		kust(name, rev) // both applied c0
	}
	before, _ := artifactField(dyn, premium, "digest")
	head = "c1"
	_, err := p.Publish(ctx, c1, "c1", links(c0, c1))
	if !errors.Is(err, ErrApplying) {
		t.Fatalf("publish of the move: %v, want premium's folder held", err)
	}
	if now, _ := artifactField(dyn, premium, "digest"); now != before {
		t.Fatal("the folder giving up the Namespace was published before the taker applied it")
	}
	advRev, err := artifactField(dyn, advanced, "revision")
	if err != nil || advRev != "main@sha1:c1" {
		t.Fatalf("the taker's folder: %q, %v, want published at c1", advRev, err)
	}
	if !p.Waiting(ctx) {
		t.Fatal("Waiting says publish now, the taker has not applied")
	}
	if _, err := p.Publish(ctx, c1, "c1", links(c0, c1)); !errors.Is(err, ErrApplying) {
		t.Fatalf("published again before the taker applied: %v", err)
	}
	kust(advanced, advRev) // advanced's Kustomization applied the Namespace
	if p.Waiting(ctx) {
		t.Fatal("Waiting still waits, the taker applied")
	}
	if _, err := p.Publish(ctx, c1, "c1", links(c0, c1)); err != nil {
		t.Fatalf("publish once the taker applied: %v", err)
	}
	if now, _ := artifactField(dyn, premium, "digest"); now == before {
		t.Fatal("the giver's folder is still not published")
	}
}
