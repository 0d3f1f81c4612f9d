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

	// Readiness counts the readiness events of followed changes, by kind
	// and outcome (ready, failed, superseded, timeout); TimeToReady is the time from
	// the push to ready, by kind; ReadinessPending the changes followed.
	Readiness        *prometheus.CounterVec
	TimeToReady      *prometheus.HistogramVec
	ReadinessPending prometheus.Gauge
	// ReconcileRequests counts the requests to Flux to reconcile now.
	ReconcileRequests *prometheus.CounterVec
	// ClusterReadErrors counts failed readings of Flux's objects.
	ClusterReadErrors prometheus.Counter
	// UnservedKinds is how many kinds the templates render that the
	// cluster does not serve (every tenant of such a template would fail).
	UnservedKinds prometheus.Gauge
}

// Results of a request to Flux, the values of the "result" label.
const (
	RequestSent   = "sent"
	RequestFailed = "failed"
)

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
	m.Readiness = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenant_worker_readiness_total",
		Help: "Readiness events of pushed changes followed into the cluster, by kind and outcome (ready, failed, superseded: replaced by a later change before it was ready, timeout).",
	}, []string{"kind", "outcome"})
	m.TimeToReady = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenant_worker_time_to_ready_seconds",
		Help:    "Time from the push of a change to every HelmRelease it touches being ready (or gone), by kind.",
		Buckets: []float64{.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300, 600, 1200},
	}, []string{"kind"})
	m.ReadinessPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tenant_worker_readiness_pending",
		Help: "Pushed changes followed into the cluster that have no readiness event yet.",
	})
	m.ReconcileRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenant_worker_reconcile_requests_total",
		Help: "Requests to Flux to reconcile now (reconcile.fluxcd.io/requestedAt), by result (sent, failed).",
	}, []string{"result"})
	m.ClusterReadErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenant_worker_cluster_read_errors_total",
		Help: "Readings of Flux's objects that failed.",
	})
	m.UnservedKinds = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tenant_worker_unserved_kinds",
		Help: "Kinds and apiVersions the templates render that the cluster does not serve; every change using them fails.",
	})
	reg.MustRegister(m.Messages, m.Rejections, m.MessageDuration, m.StepDuration, m.LockWait,
		m.PushAttempts, m.LastPush, m.SQSErrors, m.QueueMessages, m.DeadLetterMessages, m.ResultEvents,
		m.Paused, m.Probes, m.Readiness, m.TimeToReady, m.ReadinessPending, m.ReconcileRequests,
		m.ClusterReadErrors, m.UnservedKinds)
	for _, r := range []string{RequestSent, RequestFailed} {
		m.ReconcileRequests.WithLabelValues(r)
	}
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
