package pipeline

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/templates"
)

// seedTenants commits n premium tenants to the branch in one commit.
func seedTenants(t *testing.T, e env, n int) {
	t.Helper()
	repo, err := gitrepo.Open(context.Background(), gitrepo.Options{URL: e.srv.RepoURL("gitops.git"), Branch: "main", Token: "tok",
		AuthorName: "seed", AuthorEmail: "seed@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := fs.ReadFile(templates.FS, templates.Root+"/tier-templates/premium_tenant_template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := templates.Root + "/tenants/premium/"
	files := map[string][]byte{}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - dummy-configmap.yaml\n"
	for i := range n {
		id := fmt.Sprintf("t%d", i)
		files[dir+id+".yaml"] = []byte(strings.NewReplacer("{TENANT_ID}", id, "{RELEASE_VERSION}", "0.0").Replace(string(tmpl)))
		k += "  - " + id + ".yaml\n"
	}
	files[dir+"kustomization.yaml"] = []byte(k)
	head := repo.Head()
	c, err := repo.Commit(head, files, "Seed tenants")
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Push(context.Background(), head, c); err != nil {
		t.Fatal(err)
	}
}

// restart opens a new clone (in dir, or in memory) and pipeline, as a
// restarted worker does.
func restart(t *testing.T, e env, dir string) *Pipeline {
	t.Helper()
	repo, err := gitrepo.Open(context.Background(), gitrepo.Options{URL: e.srv.RepoURL("gitops.git"), Branch: "main", Token: "tok",
		Dir: dir, AuthorName: "admin", AuthorEmail: "admin@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	return New(repo, Options{Layout: gitops.Layout{Root: templates.Root}})
}

// TestRedeliveryAfterRestartAtScale: a batch [deploy 1.0, deploy 2.0] is
// pushed, the worker restarts (its clone compacted or new) and both
// messages come back: nothing is applied again, and the tenant stays at
// 2.0. The record is in the tree, so neither compaction, a restart nor the
// size of the repository can shorten it.
func TestRedeliveryAfterRestartAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 tenants")
	}
	for _, clone := range []string{"memory", "disk"} {
		t.Run(clone, func(t *testing.T) {
			e := setup(t)
			seedTenants(t, e, 10_000)
			dir := ""
			if clone == "disk" {
				dir = filepath.Join(t.TempDir(), "clone")
			}
			p := restart(t, e, dir)
			sent := time.Now().Add(-time.Minute)
			deploy := func(v string) message.Request {
				return decode(t, message.Deployment, `{"tenant_tier":"premium","tenant_id":"t42","release_version":"`+v+`"}`)
			}
			jobs := []Job{
				{Request: deploy("1.0"), MessageID: "d1", SentAt: sent},
				{Request: deploy("2.0"), MessageID: "d2", SentAt: sent.Add(time.Second)},
			}
			for i, r := range p.Apply(context.Background(), jobs) {
				if r.Err != nil || !r.Applied {
					t.Fatalf("job %d: %+v", i, r)
				}
			}
			p = restart(t, e, dir)
			for _, j := range jobs {
				r := p.Apply(context.Background(), []Job{j})[0]
				if r.Err != nil || !r.Duplicate || r.Applied {
					t.Fatalf("redelivered %s: %+v", j.MessageID, r)
				}
			}
			// A copy of 1.0 under another id (a late duplicate) is stale.
			r := p.Apply(context.Background(), []Job{{Request: deploy("1.0"), MessageID: "d1-copy", SentAt: sent.Add(time.Millisecond)}})[0]
			if r.Err != nil || !r.Stale || r.Applied {
				t.Fatalf("late copy of 1.0: %+v", r)
			}
			if got := show(t, e, "tenants/premium/t42.yaml"); !strings.Contains(got, `version: "2.0.x"`) {
				t.Fatalf("t42 is not at 2.0:\n%s", got)
			}
		})
	}
}
