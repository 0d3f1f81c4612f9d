package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/templates"
)

// stepTimes records how long one pipeline step took, each time.
type stepTimes struct {
	step pipeline.Step
	mu   sync.Mutex
	ds   []time.Duration
}

func (s *stepTimes) LockWaited(time.Duration)                  {}
func (s *stepTimes) StepStarted([]pipeline.Job, pipeline.Step) {}
func (s *stepTimes) Pushed(pipeline.PushResult)                {}
func (s *stepTimes) StepDone(step pipeline.Step, d time.Duration) {
	if step == s.step {
		s.mu.Lock()
		s.ds = append(s.ds, d)
		s.mu.Unlock()
	}
}

// intentCosts measures, at every size, what the intent check costs each
// onboarding: the pipeline of the worker, in process, on a clone of the
// size's repository, doing everything but the push, n times. Its p50 is
// set beside the worker's single-message p50 measured from SQS.
func intentCosts(ctx context.Context, runs []*sizeRun, n int) error {
	for _, r := range runs {
		repo, err := gitrepo.Open(ctx, gitrepo.Options{URL: r.srv.RepoURL("worker.git"), Branch: "main",
			AuthorName: "bench", AuthorEmail: "bench@example.com"})
		if err != nil {
			return fmt.Errorf("intent at %d tenants: %w", r.res.Tenants, err)
		}
		obs := &stepTimes{step: pipeline.StepIntent}
		p := pipeline.New(repo, pipeline.Options{Layout: gitops.Layout{Root: templates.Root}, Observer: obs, DryRun: true})
		for i := range n {
			req := message.Request{Kind: message.Onboarding, TenantID: fmt.Sprintf("intent-%d", i), Tier: "premium", ReleaseVersion: "0.0"}
			if res := p.ApplyOne(ctx, req); res.Err != nil || !res.Applied {
				return fmt.Errorf("intent at %d tenants: %+v", r.res.Tenants, res)
			}
		}
		r.res.Intent = stats(obs.ds)
		if r.res.Worker.P50 > 0 {
			r.res.IntentShare = r.res.Intent.P50 / r.res.Worker.P50
		}
	}
	return nil
}
