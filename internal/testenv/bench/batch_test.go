package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

// BenchmarkBatchInShardFolders is the worker's cost of one batch of 200
// onboardings (MAX_BATCH) at 1,000 and at 21,000 tenants (the repository
// before and after the ledger bench's backlog of 20,000), in 100 shard
// folders per tier: the pipeline in process against git's http-backend,
// each size on a fresh clone, so what it measures is the repository's size
// and not the history the clone went through. It reports each step's
// milliseconds per batch, and fails when the batch at 21,000 tenants costs
// more than 1.2x the batch at 1,000 (the time spent in the worker, not
// counting the push, which is the server's as much as the worker's).
//
//	go test -run '^$' -bench '^BenchmarkBatchInShardFolders$' -benchtime 20x ./internal/testenv/bench/
func BenchmarkBatchInShardFolders(b *testing.B) {
	own := map[int]float64{}
	sizes := []int{1000, 21000}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			steps := batchAtSize(b, n, 100)
			total := 0.0
			for _, s := range slices.Sorted(maps.Keys(steps)) {
				ms := float64(steps[s]) / float64(b.N) / float64(time.Millisecond)
				b.ReportMetric(ms, s+"-ms/batch")
				if s != string(pipeline.StepPush) && s != string(pipeline.StepLock) {
					total += ms
				}
			}
			own[n] = total
		})
	}
	if small, large := own[sizes[0]], own[sizes[1]]; small > 0 && large > 1.2*small {
		b.Errorf("the worker's own time per batch is %.0f ms at %d tenants and %.0f ms at %d: %.2fx, more than 1.2x",
			small, sizes[0], large, sizes[1], large/small)
	}
}

// batchAtSize applies b.N batches of 200 onboardings to a repository of n
// tenants in shards folders per tier, and returns the time spent in each
// step over all of them.
func batchAtSize(b *testing.B, n, shards int) map[string]time.Duration {
	b.Helper()
	srv, err := gitserver.Start(b.TempDir(), "127.0.0.1:0", "tok")
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	if err := seedRepoWith(srv, "gitops.git", n, seedSpec{Layout: gitops.Layout{Shards: shards}, Tiers: backlogTiers}); err != nil {
		b.Fatal(err)
	}
	repo, err := gitrepo.Open(context.Background(), gitrepo.Options{URL: srv.RepoURL("gitops.git"), Branch: "main",
		LedgerBranch: "tenant-worker/ledger", Token: "tok", AuthorName: "bench", AuthorEmail: "bench@example.com"})
	if err != nil {
		b.Fatal(err)
	}
	p := pipeline.New(repo, pipeline.Options{Layout: gitops.Layout{Root: templates.Root}})
	sent, k := time.Now().Add(-time.Hour), 0
	batch := func() []pipeline.Job {
		jobs := make([]pipeline.Job, 0, maxBatch())
		for range maxBatch() {
			k++
			req, err := message.Decode(message.Onboarding, fmt.Appendf(nil, `{"tenant_id":"batch-%d","tenant_tier":%q,"release_version":"0.0"}`,
				k, backlogTiers[k%len(backlogTiers)]))
			if err != nil {
				b.Fatal(err)
			}
			sent = sent.Add(time.Millisecond)
			jobs = append(jobs, pipeline.Job{Request: req, MessageID: fmt.Sprintf("batch-message-%d", k), Queue: "onboarding", SentAt: sent})
		}
		return jobs
	}
	apply := func(steps map[string]time.Duration) {
		rs := p.Apply(context.Background(), batch())
		for i, r := range rs {
			if r.Err != nil || !r.Applied {
				b.Fatalf("job %d: applied %v: %v", i, r.Applied, r.Err)
			}
		}
		for s, d := range rs[0].Steps {
			steps[s] += d
		}
	}
	apply(map[string]time.Duration{}) // the first batch warms the clone and the caches
	steps := map[string]time.Duration{}
	b.ResetTimer()
	for range b.N {
		apply(steps)
	}
	return steps
}
