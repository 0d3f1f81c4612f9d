// Package runs keeps the worker's recent history in memory, bounded: the
// last N finished runs (one per message), the runs in flight with their
// current step, the depth of each queue and the last successful push. The
// status page and /api/runs read it.
package runs

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Run is the handling of one message.
type Run struct {
	MessageID    string `json:"message_id"`
	Queue        string `json:"queue"`
	Kind         string `json:"kind"`
	Tenant       string `json:"tenant_id,omitempty"`
	Tier         string `json:"tier,omitempty"`
	Release      string `json:"release_version,omitempty"`
	ReceiveCount int    `json:"receive_count"`
	// Body is the start of a message that could not be decoded, so that
	// the page shows what was refused.
	Body string `json:"body,omitempty"`
	// Step is the current step of a run in flight (lock, sync, render,
	// commit, validate, push); empty once finished.
	Step string `json:"step,omitempty"`
	// Outcome is applied, noop, rejected or retry once finished.
	Outcome string `json:"outcome,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Error   string `json:"error,omitempty"`
	Commit  string `json:"commit_sha,omitempty"`
	// CommitMessage is the subject of the pushed commit.
	CommitMessage string `json:"commit_message,omitempty"`
	Attempts      int    `json:"attempts"`
	// StepsMS is the time each step took, in milliseconds. Messages handled
	// together share their batch's steps.
	StepsMS    map[string]int64 `json:"steps_ms,omitempty"`
	SentAt     time.Time        `json:"sent_at,omitzero"`
	Started    time.Time        `json:"started_at"`
	Finished   time.Time        `json:"finished_at,omitzero"`
	DurationMS int64            `json:"duration_ms"`
	// Live is where an applied change stands in the cluster, when the
	// worker follows it: pushed, fetched, applied, then ready, failed or
	// timeout. LiveMS has the time from the push to each stage reached,
	// LiveError Flux's reason and message of a failure (or what a timeout
	// still waited for).
	Live      string           `json:"live,omitempty"`
	LiveMS    map[string]int64 `json:"live_ms,omitempty"`
	LiveError string           `json:"live_error,omitempty"`
}

// Queue is what is known of one source queue.
type Queue struct {
	Name     string `json:"name"`
	Visible  int64  `json:"visible"`
	InFlight int64  `json:"in_flight"`
	Delayed  int64  `json:"delayed"`
	// DeadLetter is -1 when the queue has no dead-letter queue.
	DeadLetter int64 `json:"dead_letter"`
	// OldestAgeSeconds is the age of the oldest message in hand, or of the
	// last one received when none is: SQS does not report the age of its
	// oldest message as a queue attribute.
	OldestAgeSeconds float64   `json:"oldest_age_seconds"`
	ReadAt           time.Time `json:"read_at,omitzero"`
	Error            string    `json:"error,omitempty"`
}

// Status is a snapshot of everything the recorder holds.
type Status struct {
	InFlight []Run     `json:"in_flight"`
	Runs     []Run     `json:"runs"`
	Queues   []Queue   `json:"queues"`
	LastPush time.Time `json:"last_push,omitzero"`
	// Paused says why the worker does not receive messages, while it does not.
	Paused *Pause `json:"paused,omitempty"`
	// Warning is a problem that does not stop the worker but will fail
	// changes later (kinds the cluster does not serve).
	Warning string    `json:"warning,omitempty"`
	Now     time.Time `json:"now"`
}

// Pause is why the worker stopped receiving: git or the repository is at
// fault, and it probes until the fault is gone.
type Pause struct {
	Cause  string    `json:"cause"`
	Error  string    `json:"error"`
	Since  time.Time `json:"since"`
	Probes int       `json:"probes"`
}

// Recorder holds the history. It is safe for concurrent use.
type Recorder struct {
	mu       sync.Mutex
	limit    int
	done     []Run // ring, oldest first once full
	next     int
	inflight map[string]*Run
	order    []string // in-flight ids in start order
	queues   map[string]*Queue
	lastSent map[string]time.Time // per queue: sent time of the last message received
	lastPush time.Time
	paused   *Pause
	warning  string
	now      func() time.Time
}

// New keeps the last limit finished runs (at least 1).
func New(limit int) *Recorder {
	return &Recorder{
		limit: max(limit, 1), inflight: map[string]*Run{}, queues: map[string]*Queue{},
		lastSent: map[string]time.Time{}, now: time.Now,
	}
}

// AddQueue makes a queue known, in display order.
func (r *Recorder) AddQueue(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.queues[name]; !ok {
		r.queues[name] = &Queue{Name: name, DeadLetter: -1}
	}
}

// Start records runs as in flight, waiting for the repository lock.
func (r *Recorder) Start(runs ...Run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for _, run := range runs {
		if run.Started.IsZero() {
			run.Started = now
		}
		if run.Step == "" {
			run.Step = "lock"
		}
		if _, ok := r.inflight[run.MessageID]; !ok {
			r.order = append(r.order, run.MessageID)
		}
		r.inflight[run.MessageID] = &run
		if !run.SentAt.IsZero() && run.SentAt.After(r.lastSent[run.Queue]) {
			r.lastSent[run.Queue] = run.SentAt
		}
	}
}

// Update changes runs in flight: the step, or what decoding learnt.
func (r *Recorder) Update(ids []string, fn func(*Run)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if run, ok := r.inflight[id]; ok {
			fn(run)
		}
	}
}

// Finish moves a run from in flight to the history. run carries the
// outcome; what Start recorded fills the fields it leaves empty.
func (r *Recorder) Finish(run Run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if started, ok := r.inflight[run.MessageID]; ok {
		fillFrom(&run, started)
		delete(r.inflight, run.MessageID)
		r.order = slices.DeleteFunc(r.order, func(id string) bool { return id == run.MessageID })
	}
	run.Step = ""
	if run.Finished.IsZero() {
		run.Finished = r.now()
	}
	if !run.Started.IsZero() {
		run.DurationMS = run.Finished.Sub(run.Started).Milliseconds()
	}
	if run.Outcome == "applied" && run.Finished.After(r.lastPush) {
		r.lastPush = run.Finished
	}
	if len(r.done) < r.limit {
		r.done = append(r.done, run)
		return
	}
	r.done[r.next] = run
	r.next = (r.next + 1) % r.limit
}

// UpdateDone calls fn on the finished run of message id, if the history
// still holds it (the newest of its runs: a redelivery adds another).
func (r *Recorder) UpdateDone(id string, fn func(*Run)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.done {
		// Newest first: the ring's slot before next, backwards.
		j := (r.next - 1 - i + 2*len(r.done)) % len(r.done)
		if r.done[j].MessageID == id {
			fn(&r.done[j])
			return
		}
	}
}

func fillFrom(run, started *Run) {
	if run.Queue == "" {
		run.Queue = started.Queue
	}
	if run.Kind == "" {
		run.Kind = started.Kind
	}
	if run.Tenant == "" {
		run.Tenant = started.Tenant
	}
	if run.Tier == "" {
		run.Tier = started.Tier
	}
	if run.Release == "" {
		run.Release = started.Release
	}
	if run.ReceiveCount == 0 {
		run.ReceiveCount = started.ReceiveCount
	}
	if run.SentAt.IsZero() {
		run.SentAt = started.SentAt
	}
	if run.Started.IsZero() {
		run.Started = started.Started
	}
}

// SetPause records why the worker is paused; nil when it is not.
func (r *Recorder) SetPause(p *Pause) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = p
}

// SetWarning records a problem that does not stop the worker; "" clears it.
func (r *Recorder) SetWarning(w string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warning = w
}

// SetPush records a successful push made outside a recorded run.
func (r *Recorder) SetPush(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at.After(r.lastPush) {
		r.lastPush = at
	}
}

// SetDepth records a queue's depth, or the error reading it.
func (r *Recorder) SetDepth(name string, visible, inFlight, delayed, deadLetter int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q, ok := r.queues[name]
	if !ok {
		q = &Queue{Name: name}
		r.queues[name] = q
	}
	if err != nil {
		q.Error = err.Error()
		return
	}
	q.Visible, q.InFlight, q.Delayed, q.DeadLetter, q.Error = visible, inFlight, delayed, deadLetter, ""
	q.ReadAt = r.now()
}

// Status returns a snapshot: runs in flight in start order, finished runs
// newest first, queues by name.
func (r *Recorder) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	s := Status{Now: now, LastPush: r.lastPush, InFlight: []Run{}, Runs: make([]Run, 0, len(r.done)), Warning: r.warning}
	if r.paused != nil {
		p := *r.paused
		s.Paused = &p
	}
	oldest := map[string]time.Time{}
	for _, id := range r.order {
		run := *r.inflight[id]
		run.StepsMS = maps.Clone(run.StepsMS)
		run.DurationMS = now.Sub(run.Started).Milliseconds()
		s.InFlight = append(s.InFlight, run)
		if !run.SentAt.IsZero() && (oldest[run.Queue].IsZero() || run.SentAt.Before(oldest[run.Queue])) {
			oldest[run.Queue] = run.SentAt
		}
	}
	for i := range r.done {
		// Newest first: walk the ring backwards from the last written slot.
		// (Until the ring is full, next stays 0 and this is len-1-i.)
		run := r.done[(r.next-1-i+2*len(r.done))%len(r.done)]
		run.StepsMS = maps.Clone(run.StepsMS)
		s.Runs = append(s.Runs, run)
	}
	for _, q := range r.queues {
		c := *q
		at := oldest[q.Name]
		if at.IsZero() {
			at = r.lastSent[q.Name]
		}
		if !at.IsZero() && (c.Visible > 0 || !oldest[q.Name].IsZero()) {
			c.OldestAgeSeconds = now.Sub(at).Seconds()
		}
		s.Queues = append(s.Queues, c)
	}
	slices.SortFunc(s.Queues, func(a, b Queue) int { return strings.Compare(a.Name, b.Name) })
	return s
}
