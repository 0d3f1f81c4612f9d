package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/templates"
)

// TestShardedLayoutPassesEveryCheck: in a repository laid out in shard
// folders, a batch of onboardings (several new shard folders, several
// tenants in one), a tier deployment and offboardings that empty a shard
// are validated, judged by the intent check as what they name, and pushed.
func TestShardedLayoutPassesEveryCheck(t *testing.T) {
	testShardedLayout(t, gitops.Layout{Root: templates.Root, Shards: 3})
}

// TestShardKustomizationsPassEveryCheck: the same when each shard folder
// is applied by a Kustomization of its own: each folder is validated and
// judged by the intent check as its own Kustomization builds it (the
// tenants folder no longer builds the shards), an emptied shard stays,
// listing nothing, and each result tells the readiness follower so.
func TestShardKustomizationsPassEveryCheck(t *testing.T) {
	testShardedLayout(t, gitops.Layout{Root: templates.Root, Shards: 3, ShardKustomizations: true})
}

func testShardedLayout(t *testing.T, l gitops.Layout) {
	m, err := templates.MapFS()
	if err != nil {
		t.Fatal(err)
	}
	m[l.LayoutFile()] = &fstest.MapFile{Data: l.LayoutContent()}
	e := setupWith(t, m)
	srv, p := e.srv, e.p
	p.opts.Releases = true // what the readiness follower is given
	sent := time.Now()
	job := func(kind message.Kind, body string) Job {
		req, err := message.Decode(kind, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		sent = sent.Add(time.Millisecond)
		return Job{Request: req, MessageID: fmt.Sprintf("m-%d", sent.UnixNano()), Queue: string(kind), SentAt: sent}
	}
	var jobs []Job
	for i := range 8 {
		jobs = append(jobs, job(message.Onboarding, fmt.Sprintf(`{"tenant_id":"t%d","tenant_tier":"premium","release_version":"1.0"}`, i)))
	}
	run := func(what string, jobs ...Job) {
		t.Helper()
		for i, r := range p.Apply(context.Background(), jobs) {
			if r.Err != nil || !r.Applied {
				t.Fatalf("%s, job %d: %+v", what, i, r)
			}
			if r.OwnShards != l.ShardKustomizations || len(r.Paths) == 0 {
				t.Errorf("%s, job %d: OwnShards %v, paths %v: the follower is told the wrong layout", what, i, r.OwnShards, r.Paths)
			}
		}
	}
	run("onboardings", jobs...)
	show := func(p string) string {
		out, err := srv.Output("gitops.git", "show", "main:"+p)
		if err != nil {
			return "<absent>"
		}
		return out
	}
	for i := range 8 {
		id := fmt.Sprintf("t%d", i)
		if !strings.Contains(show(l.TenantFile("premium", id)), "name: "+id+"-premium") {
			t.Errorf("%s is not at %s", id, l.TenantFile("premium", id))
		}
	}
	run("tier deployment", job(message.Deployment, `{"tenant_tier":"premium","release_version":"2.0"}`))
	if !strings.Contains(show(l.TenantFile("premium", "t3")), "2.0") {
		t.Errorf("the tier deployment left t3 at its release:\n%s", show(l.TenantFile("premium", "t3")))
	}
	// Empty the shard of t0: its folder goes, and the tier stops listing it.
	shard := l.Shard("t0")
	var off []Job
	for i := range 8 {
		if id := fmt.Sprintf("t%d", i); l.Shard(id) == shard {
			off = append(off, job(message.Offboarding, `{"tenant_id":"`+id+`","tenant_tier":"premium"}`))
		}
	}
	run("offboardings", off...)
	if k := show(l.TierKustomization("premium")); strings.Contains(k, shard) {
		t.Errorf("the tier still lists %s:\n%s", shard, k)
	}
	out, _ := srv.Output("gitops.git", "ls-tree", "-r", "--name-only", "main", l.TierDir("premium")+"/"+shard)
	if l.ShardKustomizations {
		if k := show(l.TierDir("premium") + "/" + shard + "/kustomization.yaml"); !strings.Contains(k, "resources: []") {
			t.Errorf("%s, applied by a Kustomization of its own, does not list nothing: %q", shard, k)
		}
		if k := show(l.TierKustomization("premium")); strings.Contains(k, "shard-") {
			t.Errorf("the tier lists shard folders:\n%s", k)
		}
	} else if out != "" {
		t.Errorf("%s still holds %s", shard, out)
	}
}
