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
	repo, err := gitrepo.Open(context.Background(), gitrepo.Options{URL: e.srv.RepoURL("gitops.git"), Branch: "main", LedgerBranch: "tenant-worker/ledger", Token: "tok",
		AuthorName: "seed", AuthorEmail: "seed@example.com", Timeout: scaleTimeout})
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

// scaleTimeout bounds each git call of a repository of thousands of
// tenants here. Under the race detector, beside the other packages' tests,
// pushing a 10,000-file seed took more than the worker's default 30 s (CI,
// 2026-12-07); how fast such a push or clone is belongs to make bench, not
// to a test of what a redelivery does.
const scaleTimeout = 10 * time.Minute

// restart opens a new clone (in dir, or in memory) and pipeline, as a
// restarted worker does.
func restart(t *testing.T, e env, dir string) *Pipeline {
	t.Helper()
	repo, err := gitrepo.Open(context.Background(), gitrepo.Options{URL: e.srv.RepoURL("gitops.git"), Branch: "main", LedgerBranch: "tenant-worker/ledger", Token: "tok",
		Dir: dir, AuthorName: "admin", AuthorEmail: "admin@example.com", Timeout: scaleTimeout})
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
			// A copy of 1.0 under another id (a late duplicate) is stale:
			// recorded on the ledger branch alone (a message sent before it
			// may still make it count), main unmoved.
			head := strings.TrimSpace(mustOut(t, e, "rev-parse", "main"))
			r := p.Apply(context.Background(), []Job{{Request: deploy("1.0"), MessageID: "d1-copy", SentAt: sent.Add(time.Millisecond)}})[0]
			if r.Err != nil || !r.Stale || strings.TrimSpace(mustOut(t, e, "rev-parse", "main")) != head {
				t.Fatalf("late copy of 1.0: %+v", r)
			}
			if got := show(t, e, "tenants/premium/t42.yaml"); !strings.Contains(got, `version: "2.0.x"`) {
				t.Fatalf("t42 is not at 2.0:\n%s", got)
			}
		})
	}
}

// TestLedgerMovesOutOfTheTree: a repository whose ledger is in the tree
// (<root>/.tenant-worker, as every version before the ledger branch wrote
// it) is migrated by the first batch, in its one atomic push: the records
// are on the ledger branch, the folder is gone from the branch Flux reads,
// and they still decide: a redelivery is a duplicate, an older message is
// stale, also after a restart.
func TestLedgerMovesOutOfTheTree(t *testing.T) {
	e := setup(t)
	sent := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	ms := sent.UnixMilli()
	on := decode(t, message.Onboarding, `{"tenant_id":"t1","tenant_tier":"premium","release_version":"0.0"}`)
	// The tenant and the two files exactly as the in-tree ledger wrote them.
	first := e.p.Apply(context.Background(), []Job{{Request: on}})[0]
	if first.Err != nil || !first.Applied {
		t.Fatalf("seed: %+v", first)
	}
	seed, err := gitrepo.Open(context.Background(), gitrepo.Options{URL: e.srv.RepoURL("gitops.git"), Branch: "main", Token: "tok",
		AuthorName: "seed", AuthorEmail: "seed@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	legacy := map[string][]byte{
		templates.Root + "/.tenant-worker/targets": []byte("# tenant-worker: send time (Unix ms, SQS SentTimestamp) of the last message applied to each\n" +
			"# tenant and pooled environment. A message sent earlier changes nothing of it. Written by tenant-worker.\n" +
			fmt.Sprintf("release/t1 %d\ntenant/t1 %d\n", ms, ms)),
		templates.Root + "/.tenant-worker/messages": []byte("# tenant-worker: messages applied in the queues' retention period (id, send time in Unix ms),\n" +
			"# oldest first; a redelivered one is recognised here. Written by tenant-worker.\n" +
			fmt.Sprintf("m-on %d\n", ms)),
	}
	head := seed.Head()
	c, err := seed.Commit(head, legacy, "Adding new tenant t1 in tier premium\n\nTenant-Worker-Message-Id: m-on\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := seed.Push(context.Background(), head, c); err != nil {
		t.Fatal(err)
	}

	p := restart(t, e, "")
	replica := restart(t, e, "") // started beside it, on the same head
	off := decode(t, message.Offboarding, `{"tenant_id":"t1","tenant_tier":"premium"}`)
	res := p.Apply(context.Background(), []Job{
		{Request: on, MessageID: "m-on", SentAt: sent},                          // redelivered
		{Request: off, MessageID: "m-old", SentAt: sent.Add(-time.Millisecond)}, // sent before the onboarding
	})
	if res[0].Err != nil || !res[0].Duplicate || res[1].Err != nil || !res[1].Stale {
		t.Fatalf("after the migration: %+v", res)
	}
	if out, err := e.srv.Output("gitops.git", "ls-tree", "-r", "--name-only", "main", templates.Root+"/.tenant-worker"); err != nil || out != "" {
		t.Fatalf("the in-tree ledger is still on main: %q %v", out, err)
	}
	if log := mustOut(t, e, "log", "-1", "--format=%s", "main"); log != "Move the tenant-worker ledger out of the branch Flux reads\n" {
		t.Fatalf("main's last commit: %q", log)
	}
	if show(t, e, "tenants/premium/t1.yaml") == "<absent>" {
		t.Fatal("t1 is gone")
	}
	// The replica, which saw the in-tree ledger too, loses the race with
	// its own migration and decides on the branch made: one migration.
	r0 := replica.Apply(context.Background(), []Job{{Request: on, MessageID: "m-on", SentAt: sent}})[0]
	if r0.Err != nil || !r0.Duplicate {
		t.Fatalf("the replica's redelivery: %+v", r0)
	}
	if n := strings.Count(mustOut(t, e, "log", "--format=%s", "main"), "Move the tenant-worker ledger"); n != 1 {
		t.Fatalf("%d migrations on main", n)
	}
	if roots := mustOut(t, e, "rev-list", "--max-parents=0", "tenant-worker/ledger"); strings.Count(roots, "\n") != 1 {
		t.Fatalf("the ledger branch has roots %q", roots)
	}
	// A restarted worker reads the records from the ledger branch alone.
	p = restart(t, e, "")
	r := p.Apply(context.Background(), []Job{{Request: on, MessageID: "m-on", SentAt: sent}})[0]
	if r.Err != nil || !r.Duplicate {
		t.Fatalf("redelivery after a restart: %+v", r)
	}
	r = p.Apply(context.Background(), []Job{{Request: off, MessageID: "m-old-2", SentAt: sent.Add(-time.Second)}})[0]
	if r.Err != nil || !r.Stale {
		t.Fatalf("an older offboarding after a restart: %+v", r)
	}
}
