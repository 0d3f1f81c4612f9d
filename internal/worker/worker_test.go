package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/gate"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/internal/results"
	"github.com/tenant-worker/tenant-worker/internal/runs"
)

// fakeApplier answers each job by the tenant id of its request.
type fakeApplier struct {
	answer map[string]pipeline.Result
	probed []pipeline.Job
}

func (f *fakeApplier) Apply(_ context.Context, jobs []pipeline.Job) []pipeline.Result {
	out := make([]pipeline.Result, len(jobs))
	for i, j := range jobs {
		out[i] = f.answer[j.Request.TenantID]
	}
	return out
}

func (f *fakeApplier) Probe(_ context.Context, job pipeline.Job) error {
	f.probed = append(f.probed, job)
	return nil
}

type fakeGate struct{ causes []gate.Cause }

func (g *fakeGate) Close(cause gate.Cause, _ error, probe gate.Probe) {
	g.causes = append(g.causes, cause)
	_ = probe(context.Background())
}

type fakePublisher struct{ events []results.Event }

func (p *fakePublisher) Publish(_ context.Context, events []results.Event) (int, error) {
	p.events = append(p.events, events...)
	return len(events), nil
}

func onboarding(id string) queue.Message {
	return queue.Message{ID: "m-" + id, ReceiptHandle: "rh-" + id, ReceiveCount: 1, SentAt: time.Now(),
		Body: fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":"premium","release_version":"0.0"}`, id)}
}

// TestHandlerSettlesEachOutcome: one receive holding every kind of outcome
// is decoded, applied and finished into the right disposition, metric,
// run record and result event.
func TestHandlerSettlesEachOutcome(t *testing.T) {
	commit := plumbing.NewHash("1111111111111111111111111111111111111111")
	a := &fakeApplier{answer: map[string]pipeline.Result{
		"applied":  {Applied: true, Commit: commit, Message: "Adding new tenant applied in tier premium"},
		"noop":     {Commit: commit},
		"recorded": {Applied: true, Recorded: true, Commit: commit},
		"dup":      {Duplicate: true, Commit: commit},
		"stale":    {Stale: true, Commit: commit},
		"conflict": {Err: reject.Errorf(reject.TierConflict, "tenant conflict exists in tier basic")},
		"broken":   {Err: fmt.Errorf("%w: template", gitops.ErrBroken)},
		"down":     {Err: fmt.Errorf("push: %w: connection refused", gitrepo.ErrUnavailable)},
		"denied":   {Err: fmt.Errorf("push: %w", gitrepo.ErrAuth)},
		"skipped":  {Err: pipeline.ErrSkipped},
		"lost":     {Err: fmt.Errorf("push: %w", gitrepo.ErrConflict)},
	}}
	g, pub := &fakeGate{}, &fakePublisher{}
	m := metrics.New(prometheus.NewRegistry())
	rec := runs.New(100)
	w := New(a, m, rec, pub, g)
	ids := []string{"applied", "noop", "recorded", "dup", "stale", "conflict", "broken", "down", "denied", "skipped", "lost"}
	msgs := []queue.Message{{ID: "m-bad", ReceiptHandle: "rh-bad", Body: "not json"}}
	for _, id := range ids {
		msgs = append(msgs, onboarding(id))
	}
	ctx := zerolog.Nop().WithContext(context.Background())
	ds := w.Handler(message.Onboarding, "q")(ctx, msgs)

	want := []queue.Action{queue.Reject, queue.Ack, queue.Ack, queue.Ack, queue.Ack, queue.Ack, queue.Reject,
		queue.Release, queue.Release, queue.Release, queue.Release, queue.Retry}
	if len(ds) != len(want) {
		t.Fatalf("%d dispositions for %d messages", len(ds), len(want))
	}
	for i, d := range ds {
		if d.Action != want[i] {
			t.Errorf("%s: action %v, want %v", msgs[i].ID, d.Action, want[i])
		}
	}
	if ds[0].Reason != string(reject.InvalidJSON) || ds[6].Reason != string(reject.TierConflict) {
		t.Errorf("reasons: %q, %q", ds[0].Reason, ds[6].Reason)
	}
	if fmt.Sprint(g.causes) != "[repository_broken git_unreachable git_credentials]" || len(a.probed) != 3 {
		t.Errorf("gate closed for %v, probes %d", g.causes, len(a.probed))
	}
	for outcome, n := range map[string]float64{OutcomeApplied: 1, OutcomeNoop: 3, OutcomeStale: 1,
		OutcomeRejected: 2, OutcomeRetry: 5} {
		if got := testutil.ToFloat64(m.Messages.WithLabelValues("q", outcome)); got != n {
			t.Errorf("messages{outcome=%s} = %v, want %v", outcome, got, n)
		}
	}
	// Every finished message gets its event; those left for retry do not.
	if len(pub.events) != 7 {
		t.Errorf("%d result events, want 7", len(pub.events))
	}
	st := rec.Status()
	if len(st.InFlight) != 0 || len(st.Runs) != len(msgs) {
		t.Errorf("run history: %d in flight, %d finished", len(st.InFlight), len(st.Runs))
	}
	for _, r := range st.Runs {
		if r.MessageID == "m-bad" && r.Body != "not json" {
			t.Errorf("the undecodable body is not kept for the status page: %q", r.Body)
		}
	}
}
