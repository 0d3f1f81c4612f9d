package pipeline

// A batch pushed in parts of BatchBytes (the adversarial review of 9903117).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/templates"
)

// cancelOnPush cancels a context after the first successful push.
type cancelOnPush struct {
	*recorder
	cancel context.CancelCauseFunc
}

func (c cancelOnPush) Pushed(p PushResult) {
	c.recorder.Pushed(p)
	if p == PushSuccess {
		c.cancel(errors.New("shutdown grace period over"))
	}
}

// TestDryRunIsNotCut: a dry run decides each job on top of the jobs before
// it, whatever BatchBytes is: it pushes nothing, so a later part would be
// decided on the remote head without the earlier ones (the same delivery
// twice: Applied twice instead of a Duplicate).
func TestDryRunIsNotCut(t *testing.T) {
	for _, n := range []int64{0, 1} {
		t.Run(fmt.Sprintf("BatchBytes=%d", n), func(t *testing.T) {
			e := setup(t)
			p := New(e.p.repo, Options{Layout: gitops.Layout{Root: templates.Root}, DryRun: true, BatchBytes: n})
			sent := time.Now()
			res := p.Apply(context.Background(), []Job{
				{Request: onboard(t, "r1", "basic"), MessageID: "m1", Queue: "q", SentAt: sent},
				{Request: onboard(t, "r1", "basic"), MessageID: "m1", Queue: "q", SentAt: sent}, // the same delivery again
			})
			if !res[0].Applied || !res[1].Duplicate || res[1].Applied {
				t.Fatalf("dry run: %+v\n%+v", res[0], res[1])
			}
		})
	}
}

// TestCancelBetweenPartsSaysNotStarted: the grace runs out just after part
// 1's push; part 2's jobs fail at once as "not started" with the cause, with
// no further network call (before: a fetch with the dead context, reported
// as the git server being unavailable, which pauses the worker).
func TestCancelBetweenPartsSaysNotStarted(t *testing.T) {
	e := setup(t)
	var fetches atomic.Int32
	e.srv.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("service") == "git-upload-pack" {
			fetches.Add(1)
		}
		return true
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	p := New(e.p.repo, Options{Layout: gitops.Layout{Root: templates.Root}, BatchBytes: 1,
		Observer: cancelOnPush{e.obs, cancel}})
	before := fetches.Load()
	res := p.Apply(ctx, []Job{{Request: onboard(t, "s1", "basic")}, {Request: onboard(t, "s2", "basic")}})
	if !res[0].Applied {
		t.Fatalf("part 1: %+v", res[0])
	}
	if gitrepo.IsUnavailable(res[1].Err) || fetches.Load() != before {
		t.Errorf("part 2 after the grace ran out: %v, %d fetches: nothing more should be asked of the server", res[1].Err, fetches.Load()-before)
	}
	if res[1].Err == nil || !strings.Contains(res[1].Err.Error(), "not started") || !strings.Contains(res[1].Err.Error(), "grace") {
		t.Errorf("part 2 after the grace ran out: %v, want not started: shutdown grace period over", res[1].Err)
	}
}

// TestFailedPushStopsLaterParts: part 1's push fails against a server
// that answers 500; the later parts are not tried (each would be a push
// timeout, a relocation and a read-back under the lock before the worker's
// gate can close) and fail with the same error, for SQS to redeliver.
func TestFailedPushStopsLaterParts(t *testing.T) {
	e := withBatchBytes(setup(t), 1)
	var posts atomic.Int32
	e.srv.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") {
			posts.Add(1)
			http.Error(w, "boom", http.StatusInternalServerError)
			return false
		}
		return true
	})
	res := e.p.Apply(context.Background(), []Job{
		{Request: onboard(t, "u1", "basic")}, {Request: onboard(t, "u2", "basic")}, {Request: onboard(t, "u3", "basic")},
	})
	for i, r := range res {
		if r.Err == nil {
			t.Fatalf("job %d: %+v", i, r)
		}
	}
	if got := e.obs.pushed(PushError); got != 1 || posts.Load() != 1 {
		t.Errorf("%d pushes (%d requests) to a server that refused the first, want 1", got, posts.Load())
	}
	if !gitrepo.IsUnavailable(res[2].Err) {
		t.Errorf("job 3: %v, want the push's error", res[2].Err)
	}
}

// TestRebaseInALaterPart: part 2 loses a race to an unrelated note, is
// rebased, and every result names the commit on the branch.
func TestRebaseInALaterPart(t *testing.T) {
	seed, err := templates.MapFS()
	if err != nil {
		t.Fatal(err)
	}
	e := withBatchBytes(setupWith(t, seed), 1)
	var posts atomic.Int32
	e.srv.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") && posts.Add(1) == 2 {
			if err := e.srv.WriteFile("gitops.git", "main", "notes/n.txt", "x\n", "a note"); err != nil {
				t.Error(err)
			}
		}
		return true
	})
	sent := time.Now()
	res := e.p.Apply(context.Background(), []Job{
		{Request: onboard(t, "w1", "basic"), MessageID: "w1", SentAt: sent},
		{Request: onboard(t, "w2", "basic"), MessageID: "w2", SentAt: sent.Add(time.Millisecond)},
		{Request: onboard(t, "w3", "basic"), MessageID: "w3", SentAt: sent.Add(2 * time.Millisecond)},
	})
	for i, r := range res {
		if r.Err != nil || !r.Applied {
			t.Fatalf("job %d: %+v", i, r)
		}
	}
	if e.obs.pushed(PushConflict) != 1 || res[1].Attempts != 2 {
		t.Fatalf("no lost race in part 2: %d conflicts, %+v", e.obs.pushed(PushConflict), res[1])
	}
	log := mustOut(t, e, "log", "--format=%H %s", "-4", "main")
	for i, want := range []string{"w3", "w2", "a note", "w1"} {
		line := strings.Split(strings.TrimSpace(log), "\n")[i]
		if !strings.Contains(line, want) {
			t.Fatalf("history:\n%s", log)
		}
	}
	if !strings.Contains(log, res[1].Commit.String()+" ") {
		t.Fatalf("w2's result %s is not on main:\n%s", res[1].Commit, log)
	}
}

// cancelOnStep cancels a context when a step starts.
type cancelOnStep struct {
	*recorder
	step   Step
	cancel context.CancelCauseFunc
}

func (c cancelOnStep) StepStarted(jobs []Job, s Step) {
	c.recorder.StepStarted(jobs, s)
	if s == c.step {
		c.cancel(errors.New("shutdown grace period over"))
	}
}

// TestCancelBeforeConfirmingIsNotTheServers: a no-op decided on the head as
// last seen must be confirmed on a fetched head, and the grace runs out
// before that fetch. The job fails with the cancellation and its cause, for
// SQS to redeliver, and nothing more is asked of the server (over SSH a
// new connection could hang past the grace); it is not "git server
// unavailable", which would pause the worker over its own shutdown.
func TestCancelBeforeConfirmingIsNotTheServers(t *testing.T) {
	e := setup(t)
	if res := e.p.Apply(context.Background(), []Job{{Request: onboard(t, "c1", "basic")}}); !res[0].Applied {
		t.Fatalf("setup: %+v", res[0])
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var asked atomic.Int32 // requests after the grace ran out
	e.srv.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if ctx.Err() != nil {
			asked.Add(1)
		}
		return true
	})
	p := New(e.p.repo, Options{Layout: gitops.Layout{Root: templates.Root}, Observer: cancelOnStep{e.obs, StepRender, cancel}})
	res := p.Apply(ctx, []Job{{Request: onboard(t, "c1", "basic")}})
	if context.Cause(ctx) == nil {
		t.Fatal("the render step never started: the fault did not happen")
	}
	if n := asked.Load(); n > 0 {
		t.Errorf("%d requests reached the server after the grace ran out, want none", n)
	}
	err := res[0].Err
	if !errors.Is(err, context.Canceled) || !strings.Contains(fmt.Sprint(err), "grace") {
		t.Errorf("job: %+v, want the cancellation with its cause", res[0])
	}
	if gitrepo.IsUnavailable(err) {
		t.Errorf("job: %v is classed as the server's", err)
	}
}

// stepsByMessage records each message's last step, and the steps the
// messages of later parts were in when a part was pushed.
type stepsByMessage struct {
	*recorder
	mu     sync.Mutex
	last   map[string]Step
	atPush []map[string]Step
}

func (s *stepsByMessage) StepStarted(jobs []Job, step Step) {
	s.recorder.StepStarted(jobs, step)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range jobs {
		s.last[j.MessageID] = step
	}
}

func (s *stepsByMessage) Pushed(p PushResult) {
	s.recorder.Pushed(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.atPush = append(s.atPush, maps.Clone(s.last))
}

// TestLaterPartsWaitOnTheStatusPage: while a part is pushed, the jobs of
// the later parts are shown waiting, not in a step they have not reached.
func TestLaterPartsWaitOnTheStatusPage(t *testing.T) {
	e := setup(t)
	obs := &stepsByMessage{recorder: e.obs, last: map[string]Step{}}
	p := New(e.p.repo, Options{Layout: gitops.Layout{Root: templates.Root}, BatchBytes: 1, Observer: obs})
	res := p.Apply(context.Background(), []Job{
		{Request: onboard(t, "w1", "basic"), MessageID: "m1"},
		{Request: onboard(t, "w2", "basic"), MessageID: "m2"},
		{Request: onboard(t, "w3", "basic"), MessageID: "m3"},
	})
	for i, r := range res {
		if !r.Applied {
			t.Fatalf("job %d: %+v", i, r)
		}
	}
	if len(obs.atPush) != 3 {
		t.Fatalf("%d pushes, want 3 parts", len(obs.atPush))
	}
	for part, steps := range obs.atPush {
		if steps[fmt.Sprintf("m%d", part+1)] != StepPush {
			t.Errorf("part %d pushed while its job is in %q", part+1, steps[fmt.Sprintf("m%d", part+1)])
		}
		for later := part + 2; later <= 3; later++ {
			if got := steps[fmt.Sprintf("m%d", later)]; got != StepLock {
				t.Errorf("part %d pushed while m%d (a later part) is shown in %q, want %q", part+1, later, got, StepLock)
			}
		}
	}
}
