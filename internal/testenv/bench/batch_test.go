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
	"github.com/tenant-worker/tenant-worker/internal/kustomization"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

// BenchmarkBatchInShardFolders is the worker's cost of one batch of
// MAX_BATCH onboardings (1,000 by default; 500 until 2026-12-06 evening, 200 before) at 1,000
// and at 21,000 tenants (the repository before and after the ledger
// bench's backlog of 20,000), in 100 shard
// folders per tier: the pipeline in process against git's http-backend,
// each size on a fresh clone, so what it measures is the repository's size
// and not the history the clone went through. The two sizes take turns,
// batch by batch, so a slow moment of the machine falls on both.
//
// It reports each step's milliseconds per batch and the kustomization
// bytes parsed as YAML per batch, for each size, and fails:
//
//   - when the YAML bytes per batch at 21,000 tenants are more than 1.2x
//     those at 1,000: a read of a shard's list that misses the parse cache
//     costs the shard's size, and the count does not depend on the
//     machine's speed (9.8 KB at both sizes; with the parse cache as it
//     was before 0b6f839, 265 KB against 2,122 KB);
//   - when the worker's own time per batch (every step but the push, which
//     is the server's as much as the worker's, and the lock) at 21,000 is
//     more than 1.5x the time at 1,000. What is left grows with the shard's
//     size (each commit rewrites its shard's list and tree): 1.1-1.35x.
//
// Run it with:
//
//	go test -run '^$' -bench '^BenchmarkBatchInShardFolders$' -benchtime 10x ./internal/testenv/bench/
func BenchmarkBatchInShardFolders(b *testing.B) {
	sizes := []int{1000, 21000}
	runs := make([]*batchRun, len(sizes))
	for i, n := range sizes {
		runs[i] = newBatchRun(b, n, 100)
	}
	b.ResetTimer()
	for range b.N {
		for _, r := range runs {
			r.apply(b)
		}
	}
	b.StopTimer()
	own := make([]float64, len(sizes))
	parsed := make([]float64, len(sizes))
	for i, r := range runs {
		for _, s := range slices.Sorted(maps.Keys(r.steps)) {
			ms := float64(r.steps[s]) / float64(b.N) / float64(time.Millisecond)
			b.ReportMetric(ms, fmt.Sprintf("%s-ms/batch@%d", s, sizes[i]))
			if s != string(pipeline.StepPush) && s != string(pipeline.StepLock) {
				own[i] += ms
			}
		}
		parsed[i] = float64(r.yamlBytes) / float64(b.N) / 1024
		b.ReportMetric(own[i], fmt.Sprintf("own-ms/batch@%d", sizes[i]))
		b.ReportMetric(parsed[i], fmt.Sprintf("yaml-KB/batch@%d", sizes[i]))
	}
	if parsed[1] > 1.2*parsed[0] {
		b.Errorf("the worker parsed %.0f KB of kustomizations as YAML per batch at %d tenants and %.0f KB at %d: %.2fx, more than 1.2x",
			parsed[0], sizes[0], parsed[1], sizes[1], parsed[1]/parsed[0])
	}
	if own[1] > 1.5*own[0] {
		b.Errorf("the worker's own time per batch is %.0f ms at %d tenants and %.0f ms at %d: %.2fx, more than 1.5x",
			own[0], sizes[0], own[1], sizes[1], own[1]/own[0])
	}
}

// batchRun applies batches of onboardings to one repository and adds up
// what they cost.
type batchRun struct {
	p         *pipeline.Pipeline
	k         int
	sent      time.Time
	steps     map[string]time.Duration
	yamlBytes int64
}

// newBatchRun seeds a repository of n tenants in shards folders per tier,
// clones it, and applies one batch to warm the clone and the caches.
func newBatchRun(b testing.TB, n, shards int) *batchRun {
	b.Helper()
	srv, err := gitserver.Start(b.TempDir(), "127.0.0.1:0", "tok")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	if err := seedRepoWith(srv, "gitops.git", n, seedSpec{Layout: gitops.Layout{Shards: shards}, Tiers: backlogTiers}); err != nil {
		b.Fatal(err)
	}
	repo, err := gitrepo.Open(context.Background(), gitrepo.Options{URL: srv.RepoURL("gitops.git"), Branch: "main",
		LedgerBranch: "tenant-worker/ledger", Token: "tok", AuthorName: "bench", AuthorEmail: "bench@example.com"})
	if err != nil {
		b.Fatal(err)
	}
	r := &batchRun{p: pipeline.New(repo, pipeline.Options{Layout: gitops.Layout{Root: templates.Root}}),
		sent: time.Now().Add(-time.Hour), steps: map[string]time.Duration{}}
	r.apply(b)
	clear(r.steps) // what the warm-up cost is not measured
	r.yamlBytes = 0
	return r
}

// apply applies one batch of MAX_BATCH onboardings of new tenants.
func (r *batchRun) apply(b testing.TB) {
	b.Helper()
	jobs := make([]pipeline.Job, 0, maxBatch())
	for range maxBatch() {
		r.k++
		req, err := message.Decode(message.Onboarding, fmt.Appendf(nil, `{"tenant_id":"batch-%d","tenant_tier":%q,"release_version":"0.0"}`,
			r.k, backlogTiers[r.k%len(backlogTiers)]))
		if err != nil {
			b.Fatal(err)
		}
		r.sent = r.sent.Add(time.Millisecond)
		jobs = append(jobs, pipeline.Job{Request: req, MessageID: fmt.Sprintf("batch-message-%d", r.k), Queue: "onboarding", SentAt: r.sent})
	}
	before := kustomization.YAMLBytes()
	rs := r.p.Apply(context.Background(), jobs)
	r.yamlBytes += kustomization.YAMLBytes() - before
	for i, res := range rs {
		if res.Err != nil || !res.Applied {
			b.Fatalf("job %d: applied %v: %v", i, res.Applied, res.Err)
		}
	}
	for s, d := range rs[0].Steps {
		r.steps[s] += d
	}
}

// BenchmarkBatchHistory is the worker's own time per batch over a backlog's
// history on one clone: 20 batches of MAX_BATCH onboardings, one after
// another, take a repository of 2,000 tenants (1,000 and a warm-up batch)
// in 100 shard folders per tier to 22,000, as the ledger bench's backlog
// does, against git's http-backend
// in process. BenchmarkBatchInShardFolders measures each size on a fresh
// clone; this one measures what the clone and its caches, the ledger's
// records and the Go heap go through in a run.
//
// It reports the p50 of the worker's own time (every step but the push
// and the lock) over the first and the last fifth of the batches, and the
// push's, and fails when the last fifth's own time is more than 1.2x the
// first's. Both fifths run on the same machine in the same process, and
// nothing else shares it but the in-process git server, so the ratio is
// the worker's, not the machine's speed (1.00x when it was added,
// 2026-12-06: 2,275 and 2,269 ms a batch of 1,000; on Gitea in the ledger
// bench the same steps grew 1.3x, with Gitea's work after each push on the
// same two cores).
//
// Run it with:
//
//	go test -run '^$' -bench '^BenchmarkBatchHistory$' -benchtime 1x ./internal/testenv/bench/
func BenchmarkBatchHistory(b *testing.B) {
	const batches = 20
	for range b.N {
		b.StopTimer()
		r := newBatchRun(b, 1000, 100)
		b.StartTimer()
		own := make([]time.Duration, batches)
		push := make([]time.Duration, batches)
		for i := range batches {
			clear(r.steps)
			r.apply(b)
			for s, d := range r.steps {
				switch s {
				case string(pipeline.StepPush):
					push[i] = d
				case string(pipeline.StepLock):
				default:
					own[i] += d
				}
			}
		}
		k := batches / 5
		first, last := stats(own[:k]).P50, stats(own[batches-k:]).P50
		b.ReportMetric(first, "own-ms/batch-first-fifth")
		b.ReportMetric(last, "own-ms/batch-last-fifth")
		b.ReportMetric(stats(push[:k]).P50, "push-ms/batch-first-fifth")
		b.ReportMetric(stats(push[batches-k:]).P50, "push-ms/batch-last-fifth")
		if last > 1.2*first {
			b.Errorf("the worker's own time per batch grew from %.0f ms (first fifth of %d batches) to %.0f ms (last fifth): %.2fx, more than 1.2x",
				first, batches, last, last/first)
		}
	}
}
