// Package worker turns SQS messages into pipeline requests and decides how
// each message is settled: applied and no-op messages are deleted, bad ones
// dead-lettered, and transient failures left for redelivery.
package worker

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/reject"
)

// Applier carries out a request; *pipeline.Pipeline is one.
type Applier interface {
	Apply(ctx context.Context, req message.Request) (pipeline.Result, error)
}

// Worker handles the messages of every queue with one Applier.
type Worker struct {
	applier Applier
	metrics *metrics.Metrics
}

// New returns a Worker.
func New(a Applier, m *metrics.Metrics) *Worker {
	return &Worker{applier: a, metrics: m}
}

// Handler returns the queue handler for messages of kind on queueName.
func (w *Worker) Handler(kind message.Kind, queueName string) queue.Handler {
	return func(ctx context.Context, m queue.Message) queue.Disposition {
		start := time.Now()
		log := zerolog.Ctx(ctx).With().Str("message_id", m.ID).Str("queue", queueName).
			Str("kind", string(kind)).Int("receive_count", m.ReceiveCount).Logger()
		ctx = log.WithContext(ctx)
		outcome, d := w.handle(ctx, kind, queueName, m)
		w.metrics.Messages.WithLabelValues(queueName, outcome).Inc()
		w.metrics.MessageDuration.WithLabelValues(queueName, outcome).Observe(time.Since(start).Seconds())
		return d
	}
}

func (w *Worker) handle(ctx context.Context, kind message.Kind, queueName string, m queue.Message) (string, queue.Disposition) {
	log := zerolog.Ctx(ctx)
	req, err := message.Decode(kind, []byte(m.Body))
	if err == nil {
		l := log.With().Str("tenant", req.TenantID).Str("tier", req.Tier).Logger()
		log = &l
		ctx = l.WithContext(ctx)
		var res pipeline.Result
		res, err = w.applier.Apply(ctx, req)
		if err == nil {
			ev := log.Info().Str("commit", res.Commit.String()).Int("attempts", res.Attempts).
				Dur("duration", time.Since(sentOrNow(m)))
			if !res.Applied {
				ev.Msg("already carried out; nothing to push")
				return metrics.OutcomeNoop, queue.Disposition{Action: queue.Ack}
			}
			ev.Str("commit_message", res.Message).Msg("tenant change pushed")
			return metrics.OutcomeApplied, queue.Disposition{Action: queue.Ack}
		}
	}
	if r, ok := reject.As(err); ok {
		w.metrics.Rejections.WithLabelValues(queueName, string(r.Reason)).Inc()
		log.Warn().Str("reason", string(r.Reason)).Err(r.Err).Msg("message rejected")
		return metrics.OutcomeRejected, queue.Disposition{Action: queue.Reject, Reason: string(r.Reason), Detail: r.Err.Error()}
	}
	log.Error().Err(err).Msg("message failed; SQS will redeliver it")
	return metrics.OutcomeRetry, queue.Disposition{Action: queue.Retry}
}

func sentOrNow(m queue.Message) time.Time {
	if m.SentAt.IsZero() {
		return time.Now()
	}
	return m.SentAt
}
