package pipeline

import (
	"context"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
)

// pushStep publishes the commit if the branch is still where the change was
// computed; otherwise it reports a conflict and the pipeline starts over.
type pushStep struct {
	repo    Repository
	metrics *metrics.Metrics
}

func (pushStep) Name() string { return "push" }

func (st pushStep) Run(ctx context.Context, s *State) error {
	err := st.repo.Push(ctx, s.Base, s.Commit)
	switch {
	case err == nil:
		st.metrics.PushAttempts.WithLabelValues(metrics.PushSuccess).Inc()
		st.metrics.LastPush.Set(float64(time.Now().UnixNano()) / 1e9)
	case gitrepo.IsConflict(err):
		st.metrics.PushAttempts.WithLabelValues(metrics.PushConflict).Inc()
	default:
		st.metrics.PushAttempts.WithLabelValues(metrics.PushError).Inc()
	}
	return err
}
