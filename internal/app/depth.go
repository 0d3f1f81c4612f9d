package app

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/runs"
)

// watchDepths reads the depth of every queue and its dead-letter queue
// every interval until ctx ends, and publishes them as metrics and on the
// status page.
func watchDepths(ctx context.Context, api queue.API, queues []*queue.Queue, m *metrics.Metrics, rec *runs.Recorder, every time.Duration) {
	log := zerolog.Ctx(ctx)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for _, q := range queues {
			d, err := q.Depth(ctx, api)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				m.SQSErrors.WithLabelValues(q.Name, "depth").Inc()
				rec.SetDepth(q.Name, 0, 0, 0, 0, err)
				log.Warn().Err(err).Str("queue", q.Name).Msg("could not read queue depth")
				continue
			}
			m.QueueMessages.WithLabelValues(q.Name, metrics.StateVisible).Set(float64(d.Visible))
			m.QueueMessages.WithLabelValues(q.Name, metrics.StateInFlight).Set(float64(d.InFlight))
			m.QueueMessages.WithLabelValues(q.Name, metrics.StateDelayed).Set(float64(d.Delayed))
			rec.SetDepth(q.Name, d.Visible, d.InFlight, d.Delayed, d.DeadLetter, nil)
			if d.DeadLetter >= 0 {
				m.DeadLetterMessages.WithLabelValues(q.Name).Set(float64(d.DeadLetter))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
