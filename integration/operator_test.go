package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/results"
	"github.com/tenant-worker/tenant-worker/internal/runs"
	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
)

// withResults gives the harness a results queue and points the worker at it.
func (h *harness) withResults() string {
	h.t.Helper()
	url, _, err := fauxqs.CreateQueue(context.Background(), h.api, "results-"+h.q.onboarding[strings.LastIndex(h.q.onboarding, "/")+1:], fauxqs.QueueOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	prev := h.tune
	h.tune = func(o *config.Options) {
		if prev != nil {
			prev(o)
		}
		o.ResultsQueue = url
	}
	return url
}

// apiRuns reads /api/runs.
func (h *harness) apiRuns(query string) runs.Status {
	h.t.Helper()
	var s runs.Status
	if err := json.Unmarshal([]byte(h.httpGet("/api/runs"+query)), &s); err != nil {
		h.t.Fatalf("/api/runs: %v", err)
	}
	return s
}

// TestResultEventsAndRunHistory: every finished message gets one result
// event on RESULTS_QUEUE and a row in /api/runs, with the reason of a
// refusal and the commit of a change.
func TestResultEventsAndRunHistory(t *testing.T) {
	h := newHarness(t, true)
	resultsURL := h.withResults()
	h.start()
	good := h.send(h.q.onboarding, `{"tenant_id":"tenant-7","tenant_tier":"advanced","release_version":"1.0"}`)
	bad := h.send(h.q.onboarding, `{"tenant_id":"tenant-8","tenant_tier":"gold","release_version":"1.0"}`)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev, err := results.Wait(ctx, h.api, resultsURL, good, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	head := h.head()
	if ev.Outcome != "applied" || ev.CommitSHA != head || ev.TenantID != "tenant-7" || ev.Tier != "advanced" ||
		ev.Kind != "onboarding" || ev.Queue != queueName(h.q.onboarding) || ev.DurationMS <= 0 || ev.Reason != "" {
		t.Errorf("event of the applied message: %+v (head %s)", ev, head)
	}
	ev, err = results.Wait(ctx, h.api, resultsURL, bad, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Outcome != "rejected" || ev.Reason != "unknown_tier" || ev.Error == "" || ev.CommitSHA != "" {
		t.Errorf("event of the refused message: %+v", ev)
	}

	// A redelivered duplicate is a noop event with the head it found.
	dup := h.send(h.q.onboarding, `{"tenant_id":"tenant-7","tenant_tier":"advanced","release_version":"1.0"}`)
	if ev, err = results.Wait(ctx, h.api, resultsURL, dup, nil, nil); err != nil || ev.Outcome != "noop" {
		t.Errorf("event of the repeated message: %+v %v", ev, err)
	}
	if n := h.queueCount(resultsURL); n != 0 {
		t.Errorf("%d more events than messages", n)
	}

	s := h.apiRuns("")
	byID := map[string]runs.Run{}
	for _, r := range s.Runs {
		byID[r.MessageID] = r
	}
	if r := byID[good]; r.Outcome != "applied" || r.Commit != head || r.Tenant != "tenant-7" || r.Attempts != 1 ||
		r.StepsMS == nil || r.CommitMessage != "Adding new tenant tenant-7 in tier advanced" {
		t.Errorf("run of the applied message: %+v", r)
	} else {
		for _, step := range []string{"lock", "sync", "render", "commit", "validate", "intent", "push"} {
			if _, ok := r.StepsMS[step]; !ok {
				t.Errorf("run has no %s step: %v", step, r.StepsMS)
			}
		}
	}
	if r := byID[bad]; r.Outcome != "rejected" || r.Reason != "unknown_tier" || r.Tier != "gold" || !strings.Contains(r.Error, "gold") {
		t.Errorf("run of the refused message: %+v", r)
	}
	// A body that does not decode is shown, so the page says what was sent.
	garbled := h.send(h.q.onboarding, `{"tenant_id":"Tenant 9!","tenant_tier":"basic","release_version":"1.0"}`)
	if ev, err = results.Wait(ctx, h.api, resultsURL, garbled, nil, nil); err != nil || ev.Reason != "invalid_tenant_id" {
		t.Fatalf("event of the garbled message: %+v %v", ev, err)
	}
	if r := h.apiRuns("?id=" + garbled); len(r.Runs) != 1 || !strings.Contains(r.Runs[0].Body, "Tenant 9!") {
		t.Errorf("run of the garbled message: %+v", r.Runs)
	}
	s = h.apiRuns("")
	if s.LastPush.IsZero() || len(s.Queues) != 3 {
		t.Errorf("status: last push %v, queues %+v", s.LastPush, s.Queues)
	}
	if f := h.apiRuns("?outcome=rejected"); len(f.Runs) != 2 || f.Runs[1].MessageID != bad {
		t.Errorf("?outcome=rejected gives %+v", f.Runs)
	}
	page := h.httpGet("/")
	for _, want := range []string{`data-message-id="` + good + `"`, `data-message-id="` + bad + `"`, "unknown_tier", head[:10]} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	if m := h.httpGet("/metrics"); !strings.Contains(m, `tenant_worker_result_events_total{result="sent"} 4`) {
		t.Error("result events not counted")
	}
}
