// Package worker turns SQS messages into pipeline jobs and decides how each
// message is settled: applied and no-op messages are deleted, bad ones
// dead-lettered, and transient failures left for redelivery.
package worker

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/reject"
)

// Applier carries out jobs; *pipeline.Pipeline is one.
type Applier interface {
	Apply(ctx context.Context, jobs []pipeline.Job) []pipeline.Result
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
	return func(ctx context.Context, msgs []queue.Message) []queue.Disposition {
		start := time.Now()
		// The consumer's logger already names the queue.
		base := zerolog.Ctx(ctx).With().Str("kind", string(kind)).Logger()
		logs := make([]zerolog.Logger, len(msgs))
		ds := make([]queue.Disposition, len(msgs))
		outcomes := make([]string, len(msgs))

		// Decode first: bad messages never reach the repository lock.
		var jobs []pipeline.Job
		var index []int
		for i, m := range msgs {
			logs[i] = base.With().Str("message_id", m.ID).Int("receive_count", m.ReceiveCount).Logger()
			req, err := message.Decode(kind, []byte(m.Body))
			if err != nil {
				outcomes[i], ds[i] = w.failed(logs[i], queueName, err)
				continue
			}
			logs[i] = logs[i].With().Str("tenant", req.TenantID).Str("tier", req.Tier).Logger()
			jobs = append(jobs, pipeline.Job{Request: req, MessageID: m.ID, Queue: queueName, Group: m.GroupID})
			index = append(index, i)
		}
		if len(jobs) > 0 {
			for j, res := range w.applier.Apply(base.WithContext(ctx), jobs) {
				i := index[j]
				outcomes[i], ds[i] = w.settled(logs[i], queueName, msgs[i], res)
			}
		}
		for i := range msgs {
			w.metrics.Messages.WithLabelValues(queueName, outcomes[i]).Inc()
			w.metrics.MessageDuration.WithLabelValues(queueName, outcomes[i]).Observe(time.Since(start).Seconds())
		}
		return ds
	}
}

// settled logs the result of a job and says how to settle its message.
func (w *Worker) settled(log zerolog.Logger, queueName string, m queue.Message, res pipeline.Result) (string, queue.Disposition) {
	if res.Err != nil {
		return w.failed(log, queueName, res.Err)
	}
	ev := log.Info().Str("commit", res.Commit.String()).Int("attempts", res.Attempts).
		Dur("latency", time.Since(sentOrNow(m)))
	switch {
	case res.Duplicate:
		ev.Msg("already applied by an earlier delivery of this message")
		return metrics.OutcomeNoop, queue.Disposition{Action: queue.Ack}
	case !res.Applied:
		ev.Msg("already carried out; nothing to push")
		return metrics.OutcomeNoop, queue.Disposition{Action: queue.Ack}
	default:
		ev.Str("commit_message", res.Message).Msg("tenant change pushed")
		return metrics.OutcomeApplied, queue.Disposition{Action: queue.Ack}
	}
}

// failed logs a failure once and classifies it: a rejection is terminal,
// anything else is retried through SQS.
func (w *Worker) failed(log zerolog.Logger, queueName string, err error) (string, queue.Disposition) {
	if r, ok := reject.As(err); ok {
		w.metrics.Rejections.WithLabelValues(queueName, string(r.Reason)).Inc()
		log.Warn().Str("reason", string(r.Reason)).Err(r.Err).Msg("message rejected")
		return metrics.OutcomeRejected, queue.Disposition{Action: queue.Reject, Reason: string(r.Reason), Detail: r.Err.Error()}
	}
	if errors.Is(err, pipeline.ErrSkipped) {
		log.Info().Msg("held back behind a failed message of its group")
		return metrics.OutcomeRetry, queue.Disposition{Action: queue.Release}
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
