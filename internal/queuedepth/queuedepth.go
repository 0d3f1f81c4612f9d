// Package queuedepth reads, every interval, how many messages each queue
// and its dead-letter queue hold, for the metrics and the status page.
package queuedepth

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/runs"
)

// Watcher reads the depths of Queues through API every Every, and
// publishes them in Metrics and Runs (the status page).
type Watcher struct {
	API     queue.API
	Queues  []*queue.Queue
	Metrics *metrics.Metrics
	Runs    *runs.Recorder
	Every   time.Duration
}

// Run reads the depths at once and then every w.Every until ctx ends. A
// read that fails is counted, shown on the status page and logged, and
// tried again at the next interval.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.Every)
	defer t.Stop()
	for {
		if !w.readAll(ctx) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readAll reads every queue's depth once; false when ctx ended meanwhile.
func (w *Watcher) readAll(ctx context.Context) bool {
	log := zerolog.Ctx(ctx)
	m := w.Metrics
	for _, q := range w.Queues {
		d, err := q.Depth(ctx, w.API)
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			m.SQSErrors.WithLabelValues(q.Name, "depth").Inc()
			w.Runs.SetDepth(q.Name, 0, 0, 0, 0, err)
			log.Warn().Err(err).Str("queue", q.Name).Msg("could not read queue depth")
			continue
		}
		m.QueueMessages.WithLabelValues(q.Name, metrics.StateVisible).Set(float64(d.Visible))
		m.QueueMessages.WithLabelValues(q.Name, metrics.StateInFlight).Set(float64(d.InFlight))
		m.QueueMessages.WithLabelValues(q.Name, metrics.StateDelayed).Set(float64(d.Delayed))
		w.Runs.SetDepth(q.Name, d.Visible, d.InFlight, d.Delayed, d.DeadLetter, nil)
		if d.DeadLetter >= 0 {
			m.DeadLetterMessages.WithLabelValues(q.Name).Set(float64(d.DeadLetter))
		}
	}
	return true
}
