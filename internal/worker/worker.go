// Package worker turns SQS messages into pipeline jobs and decides how each
// message is settled: applied and no-op messages are deleted, bad ones
// dead-lettered, and transient failures left for redelivery.
package worker

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/clip"
	"github.com/tenant-worker/tenant-worker/internal/gate"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/readiness"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/internal/results"
	"github.com/tenant-worker/tenant-worker/internal/runs"
)

// Outcomes of a message, the values of the "outcome" label of the metrics,
// of result events and of the run history.
const (
	OutcomeApplied  = "applied"  // a commit was pushed
	OutcomeNoop     = "noop"     // already carried out (perhaps recorded in the ledger)
	OutcomeStale    = "stale"    // in send order, messages sent after it undo what it asks: changes nothing
	OutcomeHeld     = "held"     // recorded, to be carried out by a message sent before it, still on its way
	OutcomeRejected = "rejected" // a bad message: dead-lettered or deleted
	OutcomeRetry    = "retry"    // not finished: left for redelivery
)

// Outcomes lists every outcome.
var Outcomes = []string{OutcomeApplied, OutcomeNoop, OutcomeStale, OutcomeHeld, OutcomeRejected, OutcomeRetry}

// Applier carries out jobs; *pipeline.Pipeline is one.
type Applier interface {
	Apply(ctx context.Context, jobs []pipeline.Job) []pipeline.Result
	// Probe tells whether the fault a job met is gone.
	Probe(ctx context.Context, job pipeline.Job) error
}

// Gate is where the worker stops the consumers while git or the repository
// is at fault; *gate.Gate is one.
type Gate interface {
	Close(cause gate.Cause, err error, probe gate.Probe)
}

// Follower follows pushed changes into the cluster; *readiness.Follower
// is one.
type Follower interface {
	Pushed(commits []string, targets []readiness.Target)
}

// Worker handles the messages of every queue with one Applier.
type Worker struct {
	applier Applier
	metrics *metrics.Metrics
	runs    *runs.Recorder
	publish Publisher
	gate    Gate
	follow  Follower
	// queues names the queue of each kind, for the result events of
	// messages whose outcome a later change alters.
	queues map[message.Kind]string
}

// Follow makes the worker hand every pushed change to f, which reports
// back through Stage and Done.
func (w *Worker) Follow(f Follower) { w.follow = f }

// Publisher sends result events; *results.Publisher is one.
type Publisher interface {
	Publish(ctx context.Context, events []results.Event) (int, error)
}

// New returns a Worker. It records every run in rec, publishes the result
// of every finished message with pub when pub is not nil, and closes g when
// git or the repository is at fault (g may be nil).
func New(a Applier, m *metrics.Metrics, rec *runs.Recorder, pub Publisher, g Gate) *Worker {
	return &Worker{applier: a, metrics: m, runs: rec, publish: pub, gate: g, queues: map[message.Kind]string{}}
}

// delivery is one message on its way through the worker: what came in, what
// it asked for, what happened and how the message is settled.
type delivery struct {
	msg     queue.Message
	log     zerolog.Logger
	run     runs.Run
	job     *pipeline.Job    // nil when the body did not decode
	res     *pipeline.Result // nil when not applied
	outcome string
	settle  queue.Disposition
}

// Handler returns the queue handler for messages of kind on queueName:
// decode each message, apply the decoded ones together, then finish each
// (metrics, run history, result events).
func (w *Worker) Handler(kind message.Kind, queueName string) queue.Handler {
	w.queues[kind] = queueName
	return func(ctx context.Context, msgs []queue.Message) []queue.Disposition {
		start := time.Now()
		// The consumer's logger already names the queue.
		base := zerolog.Ctx(ctx).With().Str("kind", string(kind)).Logger()
		ds := make([]*delivery, len(msgs))
		for i, m := range msgs {
			ds[i] = &delivery{msg: m, run: runs.Run{MessageID: m.ID, Queue: queueName, Kind: string(kind),
				ReceiveCount: m.ReceiveCount, SentAt: m.SentAt, Started: start}}
		}
		for _, d := range ds {
			w.runs.Start(d.run)
		}
		for _, d := range ds {
			w.decode(base, kind, queueName, d)
		}
		w.apply(base.WithContext(ctx), queueName, ds)
		w.finish(ctx, base, queueName, ds, start)
		out := make([]queue.Disposition, len(ds))
		for i, d := range ds {
			out[i] = d.settle
		}
		return out
	}
}

// decode reads a message's body. A bad one is settled at once: it never
// reaches the repository lock.
func (w *Worker) decode(base zerolog.Logger, kind message.Kind, queueName string, d *delivery) {
	d.log = base.With().Str("message_id", d.msg.ID).Int("receive_count", d.msg.ReceiveCount).Logger()
	req, err := message.Decode(kind, []byte(d.msg.Body))
	if err != nil {
		d.outcome, d.settle = w.failed(d.log, queueName, err)
		d.run.Body = clip.String(d.msg.Body, 512)
		return
	}
	d.log = d.log.With().Str("tenant", req.TenantID).Str("tier", req.Tier).Logger()
	d.run.Tenant, d.run.Tier, d.run.Release = req.TenantID, req.Tier, req.ReleaseVersion
	w.runs.Update([]string{d.msg.ID}, func(r *runs.Run) { r.Tenant, r.Tier, r.Release = req.TenantID, req.Tier, req.ReleaseVersion })
	d.job = &pipeline.Job{Request: req, MessageID: d.msg.ID, Queue: queueName, Group: d.msg.GroupID, SentAt: d.msg.SentAt}
}

// apply carries out the decoded deliveries as one batch.
func (w *Worker) apply(ctx context.Context, queueName string, ds []*delivery) {
	var jobs []pipeline.Job
	var todo []*delivery
	for _, d := range ds {
		if d.job != nil {
			jobs, todo = append(jobs, *d.job), append(todo, d)
		}
	}
	if len(jobs) == 0 {
		return
	}
	for i, res := range w.applier.Apply(ctx, jobs) {
		d := todo[i]
		d.res = &res
		d.outcome, d.settle = w.settled(d, queueName, res)
		d.run.Attempts, d.run.CommitMessage = res.Attempts, res.Message
		if !res.Commit.IsZero() && res.Err == nil {
			d.run.Commit = res.Commit.String()
		}
		d.run.StepsMS = make(map[string]int64, len(res.Steps))
		for step, dur := range res.Steps {
			d.run.StepsMS[step] = dur.Milliseconds()
		}
	}
}

// handOver gives the follower the commits pushed, in order, and the changes
// to follow: those of applied messages (a ledger record alone changes
// nothing in the cluster).
func (w *Worker) handOver(ds []*delivery) {
	var commits []string
	var targets []readiness.Target
	now := time.Now()
	for _, d := range ds {
		res := d.res
		if res == nil || res.Err != nil || !res.Applied {
			continue
		}
		commits = append(commits, res.Commit.String())
		if d.outcome != OutcomeApplied {
			continue
		}
		targets = append(targets, readiness.Target{
			MessageID: d.msg.ID, Queue: d.run.Queue, Kind: d.run.Kind, Tenant: d.run.Tenant, Tier: d.run.Tier,
			Commit: res.Commit.String(), Pushed: now, Releases: res.Releases, Paths: res.Paths, OwnShards: res.OwnShards,
		})
	}
	if len(commits) > 0 {
		w.follow.Pushed(commits, targets)
	}
}

// Stage records that a followed change reached a stage.
func (w *Worker) Stage(t readiness.Target, stage string, at time.Time) {
	w.runs.UpdateDone(t.MessageID, func(r *runs.Run) {
		if r.Commit != t.Commit {
			return
		}
		r.Live = stage
		if r.LiveMS == nil {
			r.LiveMS = map[string]int64{}
		}
		r.LiveMS[stage] = at.Sub(t.Pushed).Milliseconds()
	})
}

// Done records a followed change's end and publishes its readiness event.
func (w *Worker) Done(ctx context.Context, e readiness.Event) {
	w.metrics.Readiness.WithLabelValues(e.Kind, e.Outcome).Inc()
	if e.Outcome == readiness.OutcomeReady {
		w.metrics.TimeToReady.WithLabelValues(e.Kind).Observe(e.Done.Sub(e.Pushed).Seconds())
	}
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return max(t.Sub(e.Pushed).Milliseconds(), 1)
	}
	stages := &results.Stages{PushedAt: e.Pushed.UTC(), FetchedMS: ms(e.Fetched), AppliedMS: ms(e.Applied), DoneMS: ms(e.Done)}
	w.Stage(e.Target, e.Outcome, e.Done)
	w.runs.UpdateDone(e.MessageID, func(r *runs.Run) {
		if r.Commit == e.Commit && e.Message != "" && e.Outcome != readiness.OutcomeSuperseded {
			r.LiveError = strings.TrimPrefix(e.Reason+": "+e.Message, ": ")
		}
	})
	log := zerolog.Ctx(ctx).With().Str("message_id", e.MessageID).Str("kind", e.Kind).Str("tenant", e.Tenant).
		Str("tier", e.Tier).Str("commit", e.Commit).Str("readiness", e.Outcome).
		Int64("fetched_ms", stages.FetchedMS).Int64("applied_ms", stages.AppliedMS).Int64("done_ms", stages.DoneMS).Logger()
	switch e.Outcome {
	case readiness.OutcomeReady:
		log.Info().Msg("tenant change is live in the cluster")
	case readiness.OutcomeSuperseded:
		// Not a failure: the later change has its own readiness event.
		log.Info().Str("superseded_by", e.SupersededBy).Msg("tenant change replaced by a later one before it was live")
	default:
		log.Warn().Str("reason", e.Reason).Str("error", e.Message).Msg("tenant change is not live in the cluster")
	}
	w.publishResults(ctx, log, []results.Event{{
		MessageID: e.MessageID, Queue: e.Queue, Kind: e.Kind, TenantID: e.Tenant, Tier: e.Tier,
		Outcome: e.Outcome, Reason: e.Reason, Error: e.Message, CommitSHA: e.Commit,
		DurationMS: e.Done.Sub(e.Pushed).Milliseconds(), Stages: stages, SupersededBy: e.SupersededBy,
	}})
}

// finish records each delivery's outcome in metrics and the run history,
// and publishes the result events of the finished ones.
func (w *Worker) finish(ctx context.Context, log zerolog.Logger, queueName string, ds []*delivery, start time.Time) {
	finished := time.Now()
	var events []results.Event
	if w.follow != nil {
		for _, d := range ds {
			if d.outcome == OutcomeApplied {
				d.run.Live = readiness.StagePushed
			}
		}
	}
	for _, d := range ds {
		w.metrics.Messages.WithLabelValues(queueName, d.outcome).Inc()
		w.metrics.MessageDuration.WithLabelValues(queueName, d.outcome).Observe(finished.Sub(start).Seconds())
		r := &d.run
		r.Outcome, r.Reason, r.Error, r.Finished = d.outcome, d.settle.Reason, d.settle.Detail, finished
		w.runs.Finish(*r)
		if d.outcome != OutcomeRetry {
			events = append(events, results.Event{
				MessageID: r.MessageID, Queue: queueName, Kind: r.Kind, TenantID: r.Tenant, Tier: r.Tier,
				Outcome: r.Outcome, Reason: r.Reason, Error: r.Error, CommitSHA: r.Commit,
				DurationMS: finished.Sub(start).Milliseconds(),
			})
		}
	}
	for _, d := range ds {
		if d.res != nil && d.res.Err == nil && d.res.Applied {
			events = append(events, w.resolved(log, d.res.Resolved, d.res.Commit.String())...)
		}
	}
	w.publishResults(ctx, log, events)
	if w.follow != nil {
		w.handOver(ds)
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
func (w *Worker) settled(d *delivery, queueName string, res pipeline.Result) (string, queue.Disposition) {
	log, m := d.log, d.msg
	if res.Err != nil {
		if cause, ok := FaultOf(res.Err); ok && w.gate != nil {
			// Not the message's fault, nor one a retry of it alone would
			// mend: stop receiving until a probe finds the fault gone, and
			// let the message go back at once for when it is.
			job := *d.job
			w.gate.Close(cause, res.Err, func(ctx context.Context) error { return w.applier.Probe(ctx, job) })
			log.Error().Err(res.Err).Str("pause", string(cause)).Msg("message failed; SQS will redeliver it")
			return OutcomeRetry, queue.Disposition{Action: queue.Release, Detail: res.Err.Error()}
		}
		return w.failed(log, queueName, res.Err)
	}
	ev := log.Info().Str("commit", res.Commit.String()).Int("attempts", res.Attempts).
		Dur("latency", time.Since(sentOrNow(m)))
	switch {
	case res.Duplicate:
		ev.Msg("already applied by an earlier delivery of this message")
		return OutcomeNoop, queue.Disposition{Action: queue.Ack}
	case res.Stale:
		ev.Time("sent_at", m.SentAt).Msg("stale: messages sent after it undo what it asks; recorded, nothing to change")
		return OutcomeStale, queue.Disposition{Action: queue.Ack}
	case res.Held && res.Applied:
		ev.Str("commit_message", res.Message).Msg("held in the ledger until a message sent before it arrives")
		return OutcomeHeld, queue.Disposition{Action: queue.Ack, Detail: res.Message}
	case res.Recorded && res.Applied:
		ev.Str("commit_message", res.Message).Msg("already carried out; recorded in the ledger")
		return OutcomeNoop, queue.Disposition{Action: queue.Ack}
	case !res.Applied:
		ev.Msg("already carried out; nothing to push")
		return OutcomeNoop, queue.Disposition{Action: queue.Ack}
	default:
		ev.Str("commit_message", res.Message).Msg("tenant change pushed")
		return OutcomeApplied, queue.Disposition{Action: queue.Ack}
	}
}

// FaultOf says whether err is a fault of git or the repository, which
// stops the consumers, and which.
func FaultOf(err error) (gate.Cause, bool) {
	switch {
	case gitops.IsBroken(err):
		return gate.RepositoryBroken, true
	case errors.Is(err, gitrepo.ErrNoAtomic):
		return gate.GitUnsupported, true
	case gitrepo.IsAuth(err):
		return gate.GitCredentials, true
	case gitrepo.IsUnavailable(err):
		return gate.GitUnreachable, true
	}
	return "", false
}

// failed logs a failure once and classifies it: a rejection is terminal,
// anything else is retried through SQS.
func (w *Worker) failed(log zerolog.Logger, queueName string, err error) (string, queue.Disposition) {
	if r, ok := reject.As(err); ok {
		w.metrics.Rejections.WithLabelValues(queueName, string(r.Reason)).Inc()
		log.Warn().Str("reason", string(r.Reason)).Err(r.Err).Msg("message rejected")
		return OutcomeRejected, queue.Disposition{Action: queue.Reject, Reason: string(r.Reason), Detail: r.Err.Error()}
	}
	if errors.Is(err, pipeline.ErrSkipped) {
		log.Info().Msg("held back behind a failed message of its group")
		return OutcomeRetry, queue.Disposition{Action: queue.Release, Detail: err.Error()}
	}
	log.Error().Err(err).Msg("message failed; SQS will redeliver it")
	return OutcomeRetry, queue.Disposition{Action: queue.Retry, Detail: err.Error()}
}

func sentOrNow(m queue.Message) time.Time {
	if m.SentAt.IsZero() {
		return time.Now()
	}
	return m.SentAt
}
