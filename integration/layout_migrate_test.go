package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/tenant-worker/tenant-worker/internal/cli"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/testenv/controlplane"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// deletions watches a resource from before the tenants are applied, and
// records every object deleted or marked for deletion, and the names it
// saw added (which proves the watch was live).
type deletions struct {
	mu      sync.Mutex
	added   map[string]bool
	deleted []string
}

func (d *deletions) watch(t *testing.T, cp *controlplane.ControlPlane, gvr schema.GroupVersionResource, ns string) {
	t.Helper()
	w, err := cp.Dynamic.Resource(gvr).Namespace(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			o, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			d.mu.Lock()
			switch {
			case ev.Type == watch.Deleted || o.GetDeletionTimestamp() != nil:
				d.deleted = append(d.deleted, gvr.Resource+"/"+o.GetName())
			case ev.Type == watch.Added:
				d.added[o.GetName()] = true
			}
			d.mu.Unlock()
		}
	}()
}

// TestLayoutMigrationKeepsEveryTenant: 100 tenants applied by the
// platform's dataplane-tenants Kustomization; `tenant-worker layout
// migrate` moves them into shard folders and back, each time applied by
// Flux. Not one HelmRelease or tenant Namespace is deleted or marked for
// deletion at any moment (watched from before the first apply), and every
// HelmRelease keeps its uid.
func TestLayoutMigrationKeepsEveryTenant(t *testing.T) {
	const tenants = 100
	ctx := context.Background()
	srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	files, err := templates.Files()
	if err != nil {
		t.Fatal(err)
	}
	seed := fstest.MapFS{}
	for p, b := range files {
		seed[p] = &fstest.MapFile{Data: b}
	}
	k := templates.Root + "/tenants/premium/kustomization.yaml"
	list := strings.TrimRight(string(files[k]), "\n") + "\n"
	tmpl := string(files[templates.Root+"/tier-templates/premium_tenant_template.yaml"])
	for i := range tenants {
		id := fmt.Sprintf("mig-%d", i)
		seed[templates.Root+"/tenants/premium/"+id+".yaml"] = &fstest.MapFile{
			Data: []byte(strings.NewReplacer("{TENANT_ID}", id, "{RELEASE_VERSION}", "0.0").Replace(tmpl))}
		list += "  - " + id + ".yaml\n"
	}
	seed[k] = &fstest.MapFile{Data: []byte(list)}
	url, err := srv.CreateRepo("gitops.git", "main", seed)
	if err != nil {
		t.Fatal(err)
	}

	cp, err := controlplane.Start(ctx, t.TempDir(), controlplane.Options{ControllerManager: true, Flux: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(cp.Logs("kustomize-controller", 30))
		}
	})
	var releases, spaces deletions
	releases.added, spaces.added = map[string]bool{}, map[string]bool{}
	releases.watch(t, cp, flux.HelmReleases, controlplane.Namespace)
	spaces.watch(t, cp, namespaces, "")
	if _, err := cp.InstallPlatform(ctx, t.TempDir(), controlplane.PlatformOptions{RepoURL: url, Username: "git", Password: "tok"}); err != nil {
		t.Fatal(err)
	}

	head := func() string { out, _ := srv.Output("gitops.git", "rev-parse", "main"); return strings.TrimSpace(out) }
	fc, err := flux.New(cp.Config, flux.Options{Namespace: controlplane.Namespace, GitRepository: "flux-system"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	applied := func(what string) {
		t.Helper()
		want := "main@sha1:" + head()
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		for {
			fc.RequestFetch(ctx, time.Now())
			k, err := cp.Dynamic.Resource(flux.Kustomizations).Namespace(controlplane.Namespace).Get(ctx, "dataplane-tenants", metav1.GetOptions{})
			if err == nil {
				if rev, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision"); rev == want {
					return
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: dataplane-tenants did not apply %s within 5 minutes", what, want)
			case <-time.After(time.Second):
			}
		}
	}
	uids := func() map[string]string {
		t.Helper()
		list, err := cp.Dynamic.Resource(flux.HelmReleases).Namespace(controlplane.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, o := range list.Items {
			if strings.HasPrefix(o.GetName(), "mig-") {
				out[o.GetName()] = string(o.GetUID())
			}
		}
		return out
	}
	check := func(what string, before map[string]string) {
		t.Helper()
		after := uids()
		for name, uid := range before {
			if after[name] != uid {
				t.Errorf("%s: HelmRelease %s has uid %q, not %q", what, name, after[name], uid)
			}
		}
		for _, d := range []*deletions{&releases, &spaces} {
			d.mu.Lock()
			if len(d.deleted) > 0 {
				t.Errorf("%s: deleted or marked for deletion: %v", what, d.deleted)
			}
			d.mu.Unlock()
		}
	}

	applied("the platform's first apply")
	before := uids()
	if len(before) != tenants {
		t.Fatalf("%d HelmReleases applied, want %d", len(before), tenants)
	}
	releases.mu.Lock()
	seen := 0
	for name := range releases.added {
		if strings.HasPrefix(name, "mig-") {
			seen++
		}
	}
	releases.mu.Unlock()
	if seen < tenants {
		t.Fatalf("the watch saw %d HelmReleases added of %d: it is not live", seen, tenants)
	}

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GIT_REPO_URL": url, "GIT_TOKEN_FILE": tokenFile}
	for _, shards := range []string{"8", "0"} {
		start := head()
		var out, errOut bytes.Buffer
		if code := cli.Main([]string{"layout", "migrate", "--shards", shards}, &out, &errOut, func(k string) string { return env[k] }); code != 0 || head() == start {
			t.Fatalf("layout migrate --shards %s: exit %d\n%s%s", shards, code, out.String(), errOut.String())
		}
		applied("after migrating to " + shards + " shards")
		check("after migrating to "+shards+" shards", before)
	}
	if ls, _ := srv.Output("gitops.git", "ls-tree", "-r", "--name-only", "main"); strings.Contains(ls, "shard-") {
		t.Errorf("shard folders left after migrating back")
	}
}
