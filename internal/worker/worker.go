// Package worker turns SQS messages into pipeline jobs and decides how each
// message is settled: applied and no-op messages are deleted, bad ones
// dead-lettered, and transient failures left for redelivery.
package worker

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/internal/results"
	"github.com/tenant-worker/tenant-worker/internal/runs"
)

// Applier carries out jobs; *pipeline.Pipeline is one.
type Applier interface {
	Apply(ctx context.Context, jobs []pipeline.Job) []pipeline.Result
}

// Worker handles the messages of every queue with one Applier.
type Worker struct {
	applier Applier
	metrics *metrics.Metrics
	runs    *runs.Recorder
	publish Publisher
}

// Publisher sends result events; *results.Publisher is one.
type Publisher interface {
	Publish(ctx context.Context, events []results.Event) (int, error)
}

// New returns a Worker. It records every run in rec, and publishes the
// result of every finished message with pub when pub is not nil.
func New(a Applier, m *metrics.Metrics, rec *runs.Recorder, pub Publisher) *Worker {
	return &Worker{applier: a, metrics: m, runs: rec, publish: pub}
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
		done := make([]runs.Run, len(msgs))
		for i, m := range msgs {
			done[i] = runs.Run{MessageID: m.ID, Queue: queueName, Kind: string(kind), ReceiveCount: m.ReceiveCount, SentAt: m.SentAt, Started: start}
		}
		w.runs.Start(done...)

		// Decode first: bad messages never reach the repository lock.
		var jobs []pipeline.Job
		var index []int
		for i, m := range msgs {
			logs[i] = base.With().Str("message_id", m.ID).Int("receive_count", m.ReceiveCount).Logger()
			req, err := message.Decode(kind, []byte(m.Body))
			if err != nil {
				outcomes[i], ds[i] = w.failed(logs[i], queueName, err)
				done[i].Body = clip(m.Body, 512)
				continue
			}
			logs[i] = logs[i].With().Str("tenant", req.TenantID).Str("tier", req.Tier).Logger()
			done[i].Tenant, done[i].Tier, done[i].Release = req.TenantID, req.Tier, req.ReleaseVersion
			w.runs.Update([]string{m.ID}, func(r *runs.Run) { r.Tenant, r.Tier, r.Release = req.TenantID, req.Tier, req.ReleaseVersion })
			jobs = append(jobs, pipeline.Job{Request: req, MessageID: m.ID, Queue: queueName, Group: m.GroupID})
			index = append(index, i)
		}
		if len(jobs) > 0 {
			for j, res := range w.applier.Apply(base.WithContext(ctx), jobs) {
				i := index[j]
				outcomes[i], ds[i] = w.settled(logs[i], queueName, msgs[i], res)
				done[i].Attempts, done[i].CommitMessage = res.Attempts, res.Message
				if !res.Commit.IsZero() && res.Err == nil {
					done[i].Commit = res.Commit.String()
				}
				done[i].StepsMS = make(map[string]int64, len(res.Steps))
				for step, d := range res.Steps {
					done[i].StepsMS[step] = d.Milliseconds()
				}
			}
		}
		finished := time.Now()
		var events []results.Event
		for i := range msgs {
			w.metrics.Messages.WithLabelValues(queueName, outcomes[i]).Inc()
			w.metrics.MessageDuration.WithLabelValues(queueName, outcomes[i]).Observe(finished.Sub(start).Seconds())
			r := &done[i]
			r.Outcome, r.Reason, r.Error, r.Finished = outcomes[i], ds[i].Reason, ds[i].Detail, finished
			w.runs.Finish(*r)
			if outcomes[i] != metrics.OutcomeRetry {
				events = append(events, results.Event{
					MessageID: r.MessageID, Queue: queueName, Kind: r.Kind, TenantID: r.Tenant, Tier: r.Tier,
					Outcome: r.Outcome, Reason: r.Reason, Error: r.Error, CommitSHA: r.Commit,
					DurationMS: finished.Sub(start).Milliseconds(),
				})
			}
		}
		w.publishResults(ctx, base, events)
		return ds
	}
}

// publishResults sends the result events of finished messages. A failure
// is logged and counted, never fatal: the tenant change itself is done.
func (w *Worker) publishResults(ctx context.Context, log zerolog.Logger, events []results.Event) {
	if w.publish == nil || len(events) == 0 {
		return
	}
	sent, err := w.publish.Publish(ctx, events)
	w.metrics.ResultEvents.WithLabelValues(metrics.ResultSent).Add(float64(sent))
	if err != nil {
		w.metrics.ResultEvents.WithLabelValues(metrics.ResultFailed).Add(float64(len(events) - sent))
		log.Error().Err(err).Msg("could not publish result events")
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
		return metrics.OutcomeRetry, queue.Disposition{Action: queue.Release, Detail: err.Error()}
	}
	log.Error().Err(err).Msg("message failed; SQS will redeliver it")
	return metrics.OutcomeRetry, queue.Disposition{Action: queue.Retry, Detail: err.Error()}
}

func sentOrNow(m queue.Message) time.Time {
	if m.SentAt.IsZero() {
		return time.Now()
	}
	return m.SentAt
}

// clip shortens s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
