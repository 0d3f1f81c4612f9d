// Package metrics defines the worker's Prometheus metrics. They are built on
// a Registerer passed in, never on the global registry, so tests get a fresh
// set each.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenant-worker/tenant-worker/internal/gate"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/reject"
)

// Metrics holds every metric the worker records.
type Metrics struct {
	Messages        *prometheus.CounterVec
	Rejections      *prometheus.CounterVec
	MessageDuration *prometheus.HistogramVec
	StepDuration    *prometheus.HistogramVec
	LockWait        prometheus.Histogram
	PushAttempts    *prometheus.CounterVec
	LastPush        prometheus.Gauge
	SQSErrors       *prometheus.CounterVec
	// QueueMessages and DeadLetterMessages are read from the queues'
	// attributes every QUEUE_STATS_INTERVAL.
	QueueMessages      *prometheus.GaugeVec
	DeadLetterMessages *prometheus.GaugeVec
	// ResultEvents counts result events published to RESULTS_QUEUE.
	ResultEvents *prometheus.CounterVec
	// Paused is 1 for the cause that stopped the consumers, 0 otherwise.
	Paused *prometheus.GaugeVec
	// Probes counts the probes of a paused worker, by result.
	Probes *prometheus.CounterVec
}

// Results of a probe, the values of the "result" label.
const (
	ProbePassed = "passed"
	ProbeFailed = "failed"
)

// Results of publishing result events, the values of the "result" label.
const (
	ResultSent   = "sent"
	ResultFailed = "failed"
)

// States of queued messages, the values of the "state" label.
const (
	StateVisible  = "visible"   // waiting to be received
	StateInFlight = "in_flight" // received, not yet deleted
	StateDelayed  = "delayed"   // waiting out a retry delay
)

// New creates the metrics and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	buckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	m := &Metrics{
		Messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenant_worker_messages_total",
			Help: "Messages handled, by queue and outcome (applied, noop, stale, rejected, retry).",
		}, []string{"queue", "outcome"}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenant_worker_rejections_total",
			Help: "Messages refused as bad input, by queue and reason.",
		}, []string{"queue", "reason"}),
		MessageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tenant_worker_message_duration_seconds",
			Help:    "Time from receiving a message to its outcome, by queue and outcome.",
			Buckets: buckets,
		}, []string{"queue", "outcome"}),
		StepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tenant_worker_step_duration_seconds",
			Help:    "Duration of each pipeline step (sync, render, commit, validate, push).",
			Buckets: buckets,
		}, []string{"step"}),
		LockWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tenant_worker_lock_wait_seconds",
			Help:    "Time spent waiting for the repository lock (the Argo workflow mutex).",
			Buckets: buckets,
		}),
		PushAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenant_worker_push_attempts_total",
			Help: "Push attempts, by result (success, conflict, error).",
		}, []string{"result"}),
		LastPush: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tenant_worker_last_push_timestamp_seconds",
			Help: "Unix time of the last successful push.",
		}),
		SQSErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenant_worker_sqs_errors_total",
			Help: "Failed SQS calls, by queue and operation.",
		}, []string{"queue", "op"}),
	}
	m.QueueMessages = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenant_worker_queue_messages",
		Help: "Approximate messages in each source queue, by state (visible, in_flight, delayed).",
	}, []string{"queue", "state"})
	m.DeadLetterMessages = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenant_worker_dead_letter_messages",
		Help: "Approximate messages in the dead-letter queue of each source queue.",
	}, []string{"queue"})
	m.ResultEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenant_worker_result_events_total",
		Help: "Result events published to RESULTS_QUEUE, by result (sent, failed).",
	}, []string{"result"})
	m.Paused = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenant_worker_paused",
		Help: "1 while the worker receives no messages because git or the repository is at fault, by cause (git_unreachable, git_credentials, repository_broken).",
	}, []string{"cause"})
	m.Probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenant_worker_probes_total",
		Help: "Probes of a paused worker for the fault to be gone, by result (passed, failed).",
	}, []string{"result"})
	reg.MustRegister(m.Messages, m.Rejections, m.MessageDuration, m.StepDuration, m.LockWait,
		m.PushAttempts, m.LastPush, m.SQSErrors, m.QueueMessages, m.DeadLetterMessages, m.ResultEvents,
		m.Paused, m.Probes)
	for _, c := range gate.Causes {
		m.Paused.WithLabelValues(string(c))
	}
	for _, r := range []string{ProbePassed, ProbeFailed} {
		m.Probes.WithLabelValues(r)
	}

	for _, s := range pipeline.Steps {
		m.StepDuration.WithLabelValues(string(s))
	}
	for _, r := range pipeline.PushResults {
		m.PushAttempts.WithLabelValues(string(r))
	}
	for _, r := range []string{ResultSent, ResultFailed} {
		m.ResultEvents.WithLabelValues(r)
	}
	return m
}

// InitQueue creates the label sets of a queue, so dashboards see zeros
// rather than gaps before its first message. outcomes are the values the
// worker gives the "outcome" label.
func (m *Metrics) InitQueue(queue string, outcomes []string) {
	for _, o := range outcomes {
		m.Messages.WithLabelValues(queue, o)
		m.MessageDuration.WithLabelValues(queue, o)
	}
	for _, r := range reject.Reasons {
		m.Rejections.WithLabelValues(queue, string(r))
	}
}

// PipelineObserver records what the pipeline reports: step durations, lock
// waits, push results and the time of the last successful push. OnStep, if
// set, hears each step as it starts too (the status page's runs in flight).
type PipelineObserver struct {
	M      *Metrics
	OnStep func(jobs []pipeline.Job, step pipeline.Step)
}

// LockWaited implements pipeline.Observer.
func (o PipelineObserver) LockWaited(d time.Duration) { o.M.LockWait.Observe(d.Seconds()) }

// StepStarted implements pipeline.Observer.
func (o PipelineObserver) StepStarted(jobs []pipeline.Job, step pipeline.Step) {
	if o.OnStep != nil {
		o.OnStep(jobs, step)
	}
}

// StepDone implements pipeline.Observer.
func (o PipelineObserver) StepDone(step pipeline.Step, d time.Duration) {
	o.M.StepDuration.WithLabelValues(string(step)).Observe(d.Seconds())
}

// Pushed implements pipeline.Observer.
func (o PipelineObserver) Pushed(result pipeline.PushResult) {
	o.M.PushAttempts.WithLabelValues(string(result)).Inc()
	if result == pipeline.PushSuccess {
		o.M.LastPush.Set(float64(time.Now().UnixNano()) / 1e9)
	}
}
