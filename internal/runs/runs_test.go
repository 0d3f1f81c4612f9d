package runs

import (
	"fmt"
	"testing"
	"time"
)

func TestHistoryIsBoundedNewestFirst(t *testing.T) {
	r := New(3)
	clock := time.Unix(1000, 0)
	r.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	for i := range 5 {
		id := fmt.Sprint("m", i)
		r.Start(Run{MessageID: id, Queue: "q", Tenant: "t" + id})
		r.Finish(Run{MessageID: id, Outcome: "applied", Commit: "c" + id})
	}
	s := r.Status()
	if len(s.Runs) != 3 {
		t.Fatalf("%d runs kept, want 3", len(s.Runs))
	}
	for i, want := range []string{"m4", "m3", "m2"} {
		if got := s.Runs[i]; got.MessageID != want || got.Tenant != "t"+want || got.Queue != "q" || got.DurationMS != 1000 {
			t.Errorf("run %d = %+v, want %s filled from Start", i, got, want)
		}
	}
	if len(s.InFlight) != 0 || s.LastPush.IsZero() {
		t.Errorf("in flight %v, last push %v", s.InFlight, s.LastPush)
	}
}

func TestInFlightStepsAndOldestAge(t *testing.T) {
	r := New(10)
	now := time.Unix(5000, 0)
	r.now = func() time.Time { return now }
	r.AddQueue("onboarding")
	r.Start(Run{MessageID: "a", Queue: "onboarding", SentAt: now.Add(-30 * time.Second)},
		Run{MessageID: "b", Queue: "onboarding", SentAt: now.Add(-10 * time.Second)})
	r.Update([]string{"a", "b"}, func(run *Run) { run.Step = "push" })
	s := r.Status()
	if len(s.InFlight) != 2 || s.InFlight[0].MessageID != "a" || s.InFlight[0].Step != "push" {
		t.Fatalf("in flight %+v", s.InFlight)
	}
	if q := s.Queues[0]; q.OldestAgeSeconds != 30 {
		t.Errorf("oldest age %v, want 30", q.OldestAgeSeconds)
	}
	r.Finish(Run{MessageID: "a", Outcome: "rejected", Reason: "unknown_tier"})
	r.Finish(Run{MessageID: "b", Outcome: "noop"})
	s = r.Status()
	if len(s.InFlight) != 0 || s.Runs[1].Reason != "unknown_tier" || s.Runs[1].Step != "" {
		t.Errorf("after finish: %+v", s)
	}
	if !s.LastPush.IsZero() {
		t.Error("a run that pushed nothing set the last push")
	}
	if q := s.Queues[0]; q.OldestAgeSeconds != 0 {
		t.Errorf("an empty queue has an oldest message %vs old", q.OldestAgeSeconds)
	}
	r.SetDepth("onboarding", 4, 1, 0, 2, nil)
	if q := r.Status().Queues[0]; q.Visible != 4 || q.DeadLetter != 2 || q.OldestAgeSeconds != 10 {
		t.Errorf("queue %+v", q)
	}
}
