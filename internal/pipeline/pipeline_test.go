package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/kustomization"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

type env struct {
	srv *gitserver.Server
	p   *Pipeline
	obs *recorder
}

// recorder is an Observer that counts what it hears.
type recorder struct {
	mu      sync.Mutex
	started map[Step]int
	done    map[Step]int
	pushes  map[PushResult]int
	waits   int
}

func newRecorder() *recorder {
	return &recorder{started: map[Step]int{}, done: map[Step]int{}, pushes: map[PushResult]int{}}
}

func (r *recorder) LockWaited(time.Duration) { r.mu.Lock(); r.waits++; r.mu.Unlock() }
func (r *recorder) StepStarted(_ []Job, s Step) {
	r.mu.Lock()
	r.started[s]++
	r.mu.Unlock()
}
func (r *recorder) StepDone(s Step, _ time.Duration) { r.mu.Lock(); r.done[s]++; r.mu.Unlock() }
func (r *recorder) Pushed(p PushResult)              { r.mu.Lock(); r.pushes[p]++; r.mu.Unlock() }

func (r *recorder) startedCount(s Step) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started[s]
}

func (r *recorder) pushed(p PushResult) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pushes[p]
}

func setup(t *testing.T) env {
	t.Helper()
	return setupWith(t, templates.FS)
}

// setupWith is setup with the repository seeded from seed.
func setupWith(t *testing.T, seed fs.FS) env {
	t.Helper()
	srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	url, err := srv.CreateRepo("gitops.git", "main", seed)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := gitrepo.Open(context.Background(), gitrepo.Options{URL: url, Branch: "main", LedgerBranch: "tenant-worker/ledger", Token: "tok",
		AuthorName: "admin", AuthorEmail: "admin@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	obs := newRecorder()
	return env{srv: srv, obs: obs, p: New(repo, Options{Layout: gitops.Layout{Root: templates.Root}, Observer: obs})}
}

func apply(t *testing.T, e env, kind message.Kind, body string) (Result, error) {
	t.Helper()
	res := e.p.ApplyOne(context.Background(), decode(t, kind, body))
	return res, res.Err
}

func decode(t *testing.T, kind message.Kind, body string) message.Request {
	t.Helper()
	req, err := message.Decode(kind, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func show(t *testing.T, e env, path string) string {
	t.Helper()
	out, err := e.srv.Output("gitops.git", "show", "main:"+templates.Root+"/"+path)
	if err != nil {
		return "<absent>"
	}
	return out
}

const onboard1 = `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`

func TestApplyAndNoop(t *testing.T) {
	e := setup(t)
	res, err := apply(t, e, message.Onboarding, onboard1)
	if err != nil || !res.Applied || res.Attempts != 1 {
		t.Fatalf("onboarding: %+v %v", res, err)
	}
	head, _ := e.srv.Output("gitops.git", "rev-parse", "main")
	if strings.TrimSpace(head) != res.Commit.String() {
		t.Fatalf("remote head %s, result %s", head, res.Commit)
	}
	if !strings.Contains(show(t, e, "tenants/premium/tenant-1.yaml"), "name: tenant-1-premium") {
		t.Fatal("tenant file not pushed")
	}
	res, err = apply(t, e, message.Onboarding, onboard1)
	if err != nil || res.Applied {
		t.Fatalf("repeat: %+v %v", res, err)
	}
	count, _ := e.srv.Output("gitops.git", "rev-list", "--count", "main")
	if strings.TrimSpace(count) != "2" {
		t.Fatalf("commits on main = %s, want 2 (no empty commit)", count)
	}
	for _, step := range Steps {
		if e.obs.started[step] == 0 || e.obs.done[step] != e.obs.started[step] {
			t.Errorf("step %s: started %d times, done %d", step, e.obs.started[step], e.obs.done[step])
		}
	}
	if e.obs.waits != 2 {
		t.Errorf("%d lock waits reported for 2 batches", e.obs.waits)
	}
}

func TestLostRaceIsReapplied(t *testing.T) {
	e := setup(t)
	var fired, fetches atomic.Int32
	e.srv.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("service") == "git-upload-pack" {
			fetches.Add(1) // a fetch's first request, the advertisement
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") && fired.Add(1) == 1 {
			// Image automation bumps a tag between our fetch and our push.
			pool := show(t, e, "pooled-envs/pool-1.yaml")
			pool = strings.Replace(pool, `tag: "0.1" # {"$imagepolicy": "flux-system:producer`, `tag: "0.2" # {"$imagepolicy": "flux-system:producer`, 1)
			if err := e.srv.WriteFile("gitops.git", "main", templates.Root+"/pooled-envs/pool-1.yaml", pool, "image automation"); err != nil {
				t.Error(err)
			}
		}
		return true
	})
	res, err := apply(t, e, message.Onboarding, onboard1)
	if err != nil || !res.Applied || res.Attempts != 2 {
		t.Fatalf("onboarding: %+v %v", res, err)
	}
	if !strings.Contains(show(t, e, "pooled-envs/pool-1.yaml"), `tag: "0.2"`) || show(t, e, "tenants/premium/tenant-1.yaml") == "<absent>" {
		t.Fatal("one of the two changes is missing from the branch")
	}
	if got := e.obs.pushed(PushConflict); got != 1 {
		t.Fatalf("conflicts counted: %v", got)
	}
	// The plan reads pool-1.yaml (what the platform declares): the
	// onboarding is decided again on the new head, not rebased.
	if got := e.obs.startedCount(StepRender); got != 2 {
		t.Errorf("renders: %d, want 2 (the change touches what the plan read)", got)
	}
	// The first attempt builds on the head as last seen; the lost push
	// reads the branch back; the retry fetches once, to find whether it
	// can rebase, and builds on what it fetched.
	if got := fetches.Load(); got != 2 {
		t.Errorf("upload-pack advertisements: %d, want 2 (the read-back and one fetch)", got)
	}
}

// TestLostRaceToAnUnrelatedChangeIsRebased: another writer changes a file
// no plan reads (a note) between the worker's fetch and its push. The
// worker's commit is written again on the new head and pushed, without
// planning, rendering or checking again: the retry's window between fetch
// and push is a fetch long, so a slow batch still wins against a writer
// that pushes more often than the batch can be planned.
func TestLostRaceToAnUnrelatedChangeIsRebased(t *testing.T) {
	// The other writer's note: a line, or 18 MB, which grows the memory
	// clone past its compaction threshold when the rebase fetches it.
	for name, note := range map[string]string{"a small note": "second\n", "a note that makes a compaction due": strings.Repeat("x\n", 9<<20)} {
		t.Run(name, func(t *testing.T) { lostRaceRebased(t, note) })
	}
}

func lostRaceRebased(t *testing.T, note string) {
	seed, err := templates.MapFS()
	if err != nil {
		t.Fatal(err)
	}
	seed["notes/today.txt"] = &fstest.MapFile{Data: []byte("first\n")}
	e := setupWith(t, seed)
	var fired atomic.Int32
	e.srv.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") && fired.Add(1) == 1 {
			if err := e.srv.WriteFile("gitops.git", "main", "notes/today.txt", note, "a note"); err != nil {
				t.Error(err)
			}
		}
		return true
	})
	res, err := apply(t, e, message.Onboarding, onboard1)
	if e.obs.pushed(PushConflict) != 1 {
		t.Fatalf("the planned lost race did not happen: %d pushes seen, %d conflicts", fired.Load(), e.obs.pushed(PushConflict))
	}
	if err != nil || !res.Applied || res.Attempts != 2 {
		t.Fatalf("onboarding: %+v %v", res, err)
	}
	for _, step := range []Step{StepRender, StepIntent} {
		if got := e.obs.startedCount(step); got != 1 {
			t.Errorf("step %s ran %d times, want once: the commit is rebased, not made again", step, got)
		}
	}
	head := strings.TrimSpace(mustOut(t, e, "rev-parse", "main"))
	if head != res.Commit.String() {
		t.Errorf("the result names %s, the branch is at %s", res.Commit, head)
	}
	if parent := strings.TrimSpace(mustOut(t, e, "log", "-1", "--format=%s", "main^")); parent != "a note" {
		t.Errorf("the onboarding's parent is %q, want the note", parent)
	}
	if msg := mustOut(t, e, "log", "-1", "--format=%B", "main"); !strings.Contains(msg, "Adding new tenant tenant-1") {
		t.Errorf("the rebased commit's message: %q", msg)
	}
	if got := mustOut(t, e, "show", "main:notes/today.txt"); got != note {
		t.Errorf("the note after the rebase: %d bytes, want the other writer's %d", len(got), len(note))
	}
	if !strings.Contains(show(t, e, "tenants/premium/tenant-1.yaml"), "name: tenant-1-premium") ||
		!strings.Contains(show(t, e, "tenants/premium/kustomization.yaml"), "tenant-1.yaml") {
		t.Error("the rebased onboarding is missing from the branch")
	}
}

func TestBrokenTemplateIsNotTheMessagesFault(t *testing.T) {
	e := setup(t)
	tmpl := templates.Root + "/tier-templates/basic_tenant_template.yaml"
	b, _ := fs.ReadFile(templates.FS, tmpl)
	for name, broken := range map[string]string{
		"a field Flux refuses":        strings.Replace(string(b), "interval: 1m0s", "interval: 1m0s\n  bogusField: 1", 1),
		"a placeholder we never fill": strings.Replace(string(b), "interval: 1m0s", "interval: {INTERVAL}", 1),
	} {
		t.Run(name, func(t *testing.T) {
			if err := e.srv.WriteFile("gitops.git", "main", tmpl, broken, "break the template"); err != nil {
				t.Fatal(err)
			}
			before, _ := e.srv.Output("gitops.git", "rev-parse", "main")
			_, err := apply(t, e, message.Onboarding, `{"tenant_id":"t3","tenant_tier":"basic","release_version":"0.0"}`)
			if _, rejected := reject.As(err); rejected || !gitops.IsBroken(err) {
				t.Fatalf("got %v, want a fault of the repository, not a rejection", err)
			}
			if after, _ := e.srv.Output("gitops.git", "rev-parse", "main"); before != after {
				t.Fatal("an invalid change was pushed")
			}
		})
	}
}

func TestFluxVariablesInTemplatesPass(t *testing.T) {
	e := setup(t)
	tmpl := templates.Root + "/tier-templates/premium_tenant_template.yaml"
	b, _ := fs.ReadFile(templates.FS, tmpl)
	// Flux's post-build substitution, which the tenants Kustomization enables.
	withVar := strings.Replace(string(b), "interval: 1m0s", "interval: ${TENANT_INTERVAL}", 1)
	if withVar == string(b) {
		t.Fatal("the template has no interval line to edit")
	}
	if err := e.srv.WriteFile("gitops.git", "main", tmpl, withVar, "use a Flux variable"); err != nil {
		t.Fatal(err)
	}
	res, err := apply(t, e, message.Onboarding, onboard1)
	if err != nil || !res.Applied {
		t.Fatalf("onboarding with ${VAR} in the template: %+v %v", res, err)
	}
	if got := show(t, e, "tenants/premium/tenant-1.yaml"); !strings.Contains(got, "interval: ${TENANT_INTERVAL}") {
		t.Fatalf("the Flux variable was not left for Flux:\n%s", got)
	}
}

func TestTheMessagesOwnFaultIsRejected(t *testing.T) {
	e := setup(t)
	// Release names grow with the tenant id: a long id passes the message
	// check but makes a name Helm refuses, while a short one still fits.
	tmpl := templates.Root + "/tier-templates/basic_tenant_template.yaml"
	b, _ := fs.ReadFile(templates.FS, tmpl)
	long := strings.Replace(string(b), "releaseName: {TENANT_ID}-basic", "releaseName: {TENANT_ID}-basic-with-a-long-suffix", 1)
	if long == string(b) {
		t.Fatal("the template has no release name to edit")
	}
	if err := e.srv.WriteFile("gitops.git", "main", tmpl, long, "longer release names"); err != nil {
		t.Fatal(err)
	}
	_, err := apply(t, e, message.Onboarding, `{"tenant_id":"`+strings.Repeat("t", 40)+`","tenant_tier":"basic","release_version":"0.0"}`)
	if r, ok := reject.As(err); !ok || r.Reason != reject.InvalidRender {
		t.Fatalf("got %v, want an invalid_render rejection", err)
	}
	if res, err := apply(t, e, message.Onboarding, `{"tenant_id":"short","tenant_tier":"basic","release_version":"0.0"}`); err != nil || !res.Applied {
		t.Fatalf("a short id: %+v %v", res, err)
	}
}

func TestBrokenBranchIsNotTheMessagesFault(t *testing.T) {
	e := setup(t)
	k := templates.Root + "/tenants/premium/kustomization.yaml"
	if err := e.srv.WriteFile("gitops.git", "main", k, "resources:\n  - dummy-configmap.yaml\n  - ghost.yaml\n", "oops"); err != nil {
		t.Fatal(err)
	}
	_, err := apply(t, e, message.Onboarding, onboard1)
	if err == nil {
		t.Fatal("pushed on top of a broken branch")
	}
	if _, ok := reject.As(err); ok {
		t.Fatalf("blamed the message for a broken branch: %v", err)
	}
}

func TestLockWatchesContext(t *testing.T) {
	e := setup(t)
	e.p.lock <- struct{}{} // someone holds the lock
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := message.Decode(message.Onboarding, []byte(onboard1))
	if res := e.p.ApplyOne(ctx, req); res.Err == nil {
		t.Fatal("Apply ran without the lock")
	}
}

func onboard(t *testing.T, id, tier string) message.Request {
	return decode(t, message.Onboarding, `{"tenant_id":"`+id+`","tenant_tier":"`+tier+`","release_version":"0.0"}`)
}

func TestBatchOneCommitEachOnePush(t *testing.T) {
	e := setup(t)
	before := strings.TrimSpace(mustOut(t, e, "rev-parse", "main"))
	sent := time.Now()
	jobs := []Job{
		{Request: onboard(t, "a1", "basic"), MessageID: "m1", Queue: "q", SentAt: sent},
		{Request: onboard(t, "a1", "premium"), MessageID: "m2", Queue: "q", SentAt: sent.Add(time.Millisecond)}, // held: a1 is in basic
		{Request: onboard(t, "a2", "basic"), MessageID: "m3", Queue: "q", SentAt: sent.Add(2 * time.Millisecond)},
		{Request: onboard(t, "a2", "basic"), MessageID: "m4", Queue: "q", SentAt: sent.Add(3 * time.Millisecond)}, // in place after m3
	}
	res := e.p.Apply(context.Background(), jobs)
	if !res[0].Applied || !res[1].Held || !res[2].Applied || !res[3].Recorded || res[3].Err != nil {
		t.Fatalf("results: %+v", res)
	}
	// The branch Flux reads moves only for what changes its tree; the
	// ledger branch records every message, in the same push.
	format := "--format=%s|%(trailers:key=Tenant-Worker-Message-Id,valueonly,separator=)"
	if log := mustOut(t, e, "log", format, before+"..main"); log != "Adding new tenant a2 in tier basic|m3\nAdding new tenant a1 in tier basic|m1\n" {
		t.Fatalf("history of main:\n%s", log)
	}
	// The ledger branch gains one commit for the batch, which names every
	// message in order: each tree of the ledger is written once a push.
	if log := mustOut(t, e, "log", "--format=%B", "tenant-worker/ledger"); log != "Ledger: 4 messages\n\n"+
		"- Adding new tenant a1 in tier basic [message m1]\n"+
		"- Held: tenant a1 is in tier basic; it moves to tier premium when an offboarding from basic sent before this onboarding arrives [message m2]\n"+
		"- Adding new tenant a2 in tier basic [message m3]\n"+
		"- Already in place: Adding new tenant a2 in tier basic [message m4]\n\n" {
		t.Fatalf("history of the ledger:\n%s", log)
	}
	if res[1].Commit.String() != strings.TrimSpace(mustOut(t, e, "rev-parse", "tenant-worker/ledger")) {
		t.Fatalf("the held message's result names %s, not the ledger commit that holds it", res[1].Commit)
	}
	if got := e.obs.pushed(PushSuccess); got != 1 {
		t.Fatalf("%v pushes, want 1", got)
	}
	// Redelivered messages are recognised by the ledger, even m1 whose
	// change a later message could have undone, and m4 that changed nothing.
	head := res[2].Commit // main's: m4 changed only the ledger branch
	for _, j := range []Job{jobs[0], jobs[3]} {
		r := e.p.Apply(context.Background(), []Job{j})[0]
		if !r.Duplicate || r.Applied || r.Commit != head {
			t.Fatalf("redelivery of %s: %+v", j.MessageID, r)
		}
	}
}

func TestPushFailureVoidsLaterDecisions(t *testing.T) {
	e := setup(t)
	e.srv.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") {
			http.Error(w, "boom", http.StatusInternalServerError)
			return false
		}
		return true
	})
	res := e.p.Apply(context.Background(), []Job{
		{Request: decode(t, message.Offboarding, `{"tenant_id":"ghost","tenant_tier":"basic"}`)}, // no-op on the remote head
		{Request: onboard(t, "b1", "basic"), MessageID: "x1"},
		{Request: onboard(t, "b1", "basic"), MessageID: "x2"}, // no-op only thanks to x1
	})
	if res[0].Err != nil || res[1].Err == nil || res[2].Err == nil {
		t.Fatalf("results: %+v", res)
	}
}

// TestFIFOGroupStopsAfterAFailure: a group's failed message holds back its
// later messages, in the same push and, when the batch passes its bytes
// (one byte allowed: each job its own push), in the next.
func TestFIFOGroupStopsAfterAFailure(t *testing.T) {
	for _, bytes := range []int64{0, 1} {
		t.Run(fmt.Sprintf("BatchBytes=%d", bytes), func(t *testing.T) {
			e := withBatchBytes(setup(t), bytes)
			// Break the branch so that every change fails validation transiently.
			k := templates.Root + "/tenants/premium/kustomization.yaml"
			if err := e.srv.WriteFile("gitops.git", "main", k, "resources:\n  - dummy-configmap.yaml\n  - ghost.yaml\n", "oops"); err != nil {
				t.Fatal(err)
			}
			res := e.p.Apply(context.Background(), []Job{
				{Request: onboard(t, "c1", "premium"), Group: "g"},
				{Request: onboard(t, "c2", "basic"), Group: "g"},
				{Request: decode(t, message.Deployment, `{"tenant_tier":"basic","release_version":"1.0"}`), Group: "h"}, // pooled-envs only
			})
			if res[0].Err == nil || !errors.Is(res[1].Err, ErrSkipped) || !res[2].Applied {
				t.Fatalf("results: %+v", res)
			}
		})
	}
}

func TestFIFOGroupGoesOnAfterARejection(t *testing.T) {
	e := setup(t)
	res := e.p.Apply(context.Background(), []Job{
		{Request: onboard(t, "d1", "premium"), Group: "g"},
		{Request: onboard(t, "d1", "basic"), Group: "g"}, // rejected: d1 is premium
		{Request: onboard(t, "d2", "basic"), Group: "g"},
	})
	if _, ok := reject.As(res[1].Err); !ok || !res[0].Applied || !res[2].Applied {
		t.Fatalf("results: %+v", res)
	}
}

func mustOut(t *testing.T, e env, args ...string) string {
	t.Helper()
	out, err := e.srv.Output("gitops.git", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBatchFindsTheJobThatBreaksTheBuild(t *testing.T) {
	e := setup(t)
	// The basic template now also renders a copy of the tier's dummy
	// ConfigMap: each file decodes, but kustomize refuses the duplicate.
	tmpl := templates.Root + "/tier-templates/basic_tenant_template.yaml"
	b, _ := fs.ReadFile(templates.FS, tmpl)
	dup := string(b) + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dummy-configmap-basic\n  namespace: default\n"
	if err := e.srv.WriteFile("gitops.git", "main", tmpl, dup, "break the template"); err != nil {
		t.Fatal(err)
	}
	res := e.p.Apply(context.Background(), []Job{
		{Request: onboard(t, "p1", "premium")},
		{Request: onboard(t, "b1", "basic")},
		{Request: onboard(t, "p2", "premium")},
	})
	if _, rejected := reject.As(res[1].Err); rejected || !gitops.IsBroken(res[1].Err) {
		t.Fatalf("b1: %v, want a fault of the repository (every basic onboarding fails)", res[1].Err)
	}
	if !res[0].Applied || !res[2].Applied {
		t.Fatalf("results: %+v", res)
	}
	if show(t, e, "tenants/basic/b1.yaml") != "<absent>" || show(t, e, "tenants/premium/p2.yaml") == "<absent>" {
		t.Fatal("wrong tree")
	}
}

// failingPush is a Repository whose pushes fail: an in-memory clone of a
// real repository with Push replaced.
type failingPush struct {
	Repository
	pushes int
}

func (f *failingPush) PushRefs(context.Context, gitrepo.Move, gitrepo.Move) error {
	f.pushes++
	return errors.New("push refused by the fake")
}

// TestFailedPushVoidsWhatWasDecidedOnIt: decisions taken on the remote head
// stand, decisions taken on top of commits that were never pushed do not.
func TestFailedPushVoidsWhatWasDecidedOnIt(t *testing.T) {
	e := setup(t)
	repo := &failingPush{Repository: e.p.repo}
	p := New(repo, Options{Layout: gitops.Layout{Root: templates.Root}})
	res := p.Apply(context.Background(), []Job{
		{Request: decode(t, message.Offboarding, `{"tenant_id":"ghost","tenant_tier":"basic"}`)}, // no-op on the remote head
		{Request: onboard(t, "v1", "basic")},                                                     // a commit, never pushed
		{Request: onboard(t, "v1", "basic")},                                                     // a no-op only on top of it
		{Request: onboard(t, "v1", "premium")},                                                   // refused only on top of it
	})
	if repo.pushes != 1 {
		t.Fatalf("%d pushes, want 1", repo.pushes)
	}
	if res[0].Err != nil || res[0].Applied {
		t.Errorf("a no-op on the remote head must stand: %+v", res[0])
	}
	for i := 1; i < 4; i++ {
		if res[i].Err == nil || res[i].Applied {
			t.Errorf("job %d was decided on an unpushed commit and must be void: %+v", i, res[i])
		}
		if _, rejected := reject.As(res[i].Err); rejected {
			t.Errorf("job %d: a refusal decided on an unpushed commit stands: %v", i, res[i].Err)
		}
	}
}

// TestLostRaceDecidesCollisionsAgain: a platform commit outside the
// layout's root (a Namespace "billing" in the infrastructure) lands between
// the worker's plan and its push. The onboarding of "billing" then loses
// the race, and its retry must be decided on the new head: a name
// collision, not the plan made before the Namespace existed.
func TestLostRaceDecidesCollisionsAgain(t *testing.T) {
	e := setup(t)
	var fired atomic.Int32
	e.srv.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") && fired.Add(1) == 1 {
			if err := e.srv.WriteFile("gitops.git", "main", "infrastructure/billing.yaml",
				"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: billing\n", "platform: billing"); err != nil {
				t.Error(err)
			}
		}
		return true
	})
	res, err := apply(t, e, message.Onboarding, `{"tenant_id":"billing","tenant_tier":"premium","release_version":"0.0"}`)
	if fired.Load() == 0 || e.obs.pushed(PushConflict) != 1 {
		t.Fatalf("the planned lost race did not happen: %d pushes seen, %d conflicts", fired.Load(), e.obs.pushed(PushConflict))
	}
	if r, ok := reject.As(err); !ok || r.Reason != reject.NameCollision {
		t.Fatalf("onboarding after the platform took the name: %+v %v, want %s", res, err, reject.NameCollision)
	}
	if show(t, e, "tenants/premium/billing.yaml") != "<absent>" {
		t.Fatal("the colliding tenant was pushed")
	}
}

// TestEveryKeySpellingKeepsTheTier: a tier kustomization whose list is
// written under a quoted key keeps every tenant after an onboarding (the
// old editor appended a second key, and Flux would have pruned the tier);
// one with two keys kustomize reads as one list pauses the worker, names
// the file, and pushes nothing.
func TestEveryKeySpellingKeepsTheTier(t *testing.T) {
	e := setup(t)
	for _, id := range []string{"b1", "b2"} {
		if _, err := apply(t, e, message.Onboarding, `{"tenant_id":"`+id+`","tenant_tier":"basic","release_version":"0.0"}`); err != nil {
			t.Fatal(err)
		}
	}
	k := templates.Root + "/tenants/basic/kustomization.yaml"
	quoted := strings.Replace(show(t, e, "tenants/basic/kustomization.yaml"), "resources:", `"resources" :`, 1)
	if err := e.srv.WriteFile("gitops.git", "main", k, quoted, "by hand"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(t, e, message.Onboarding, `{"tenant_id":"b3","tenant_tier":"basic","release_version":"0.0"}`); err != nil {
		t.Fatalf("onboarding b3 into a quoted list: %v", err)
	}
	got, err := kustomization.Listed([]byte(show(t, e, "tenants/basic/kustomization.yaml")))
	if err != nil || !slices.Equal(got, []string{"dummy-configmap.yaml", "b1.yaml", "b2.yaml", "b3.yaml"}) {
		t.Fatalf("kustomize reads %v (%v), want every tenant", got, err)
	}

	twice := show(t, e, "tenants/basic/kustomization.yaml") + "\nResources:\n  - b1.yaml\n"
	if err := e.srv.WriteFile("gitops.git", "main", k, twice, "by hand"); err != nil {
		t.Fatal(err)
	}
	head := mustOut(t, e, "rev-parse", "main")
	_, err = apply(t, e, message.Onboarding, `{"tenant_id":"b4","tenant_tier":"basic","release_version":"0.0"}`)
	if !gitops.IsBroken(err) || !strings.Contains(err.Error(), k) {
		t.Fatalf("onboarding into two lists: %v, want a fault of the repository naming %s", err, k)
	}
	if after := mustOut(t, e, "rev-parse", "main"); after != head {
		t.Fatal("something was pushed")
	}
}

// editor is a Repository whose commits are changed on the way, standing
// for an editor that does something the message did not ask.
type editor struct {
	Repository
	edit func(files map[string][]byte)
}

func (r editor) Commit(parent plumbing.Hash, files map[string][]byte, msg string) (plumbing.Hash, error) {
	if !strings.HasPrefix(msg, "probe") {
		r.edit(files)
	}
	return r.Repository.Commit(parent, files, msg)
}

// TestUnintendedChangeIsNeverPushed: a commit that builds but drops
// another tenant is refused before the push. When a stand-in tenant of the
// same tier passes, the message is rejected (unintended_change); when it
// fails too, the repository is at fault: a pause naming files and objects.
func TestUnintendedChangeIsNeverPushed(t *testing.T) {
	e := setup(t)
	for _, id := range []string{"b1", "b2"} {
		if _, err := apply(t, e, message.Onboarding, `{"tenant_id":"`+id+`","tenant_tier":"basic","release_version":"0.0"}`); err != nil {
			t.Fatal(err)
		}
	}
	k := templates.Root + "/tenants/basic/kustomization.yaml"
	dropB1 := func(files map[string][]byte) {
		if b, ok := files[k]; ok {
			files[k] = []byte(strings.Replace(string(b), "  - b1.yaml\n", "", 1))
		}
	}
	head := mustOut(t, e, "rev-parse", "main")
	for name, tc := range map[string]struct {
		probeToo bool
		check    func(err error) bool
	}{
		"the message's own": {false, func(err error) bool {
			r, ok := reject.As(err)
			return ok && r.Reason == reject.UnintendedChange && strings.Contains(err.Error(), "remove HelmRelease flux-system/b1-basic")
		}},
		"the repository's": {true, func(err error) bool {
			return gitops.IsBroken(err) && strings.Contains(err.Error(), "unintended_change") &&
				strings.Contains(err.Error(), templates.Root+"/tenants/basic/b1.yaml")
		}},
	} {
		t.Run(name, func(t *testing.T) {
			repo := editor{Repository: e.p.repo, edit: dropB1}
			if tc.probeToo {
				repo = editor{Repository: &probeEdits{Repository: e.p.repo, edit: dropB1}, edit: dropB1}
			}
			p := New(repo, Options{Layout: gitops.Layout{Root: templates.Root}})
			res := p.ApplyOne(context.Background(), decode(t, message.Onboarding, `{"tenant_id":"b3","tenant_tier":"basic","release_version":"0.0"}`))
			if !tc.check(res.Err) || res.Applied {
				t.Fatalf("result %+v", res)
			}
			if after := mustOut(t, e, "rev-parse", "main"); after != head {
				t.Fatal("the change was pushed")
			}
		})
	}
}

// probeEdits changes the stand-in's commits too.
type probeEdits struct {
	Repository
	edit func(files map[string][]byte)
}

func (r *probeEdits) Commit(parent plumbing.Hash, files map[string][]byte, msg string) (plumbing.Hash, error) {
	r.edit(files)
	return r.Repository.Commit(parent, files, msg)
}

// TestReadSinceGivesTheCommitsAfter: the branch is read with each commit
// after the one named, with its parent; incomplete with none named, with
// one not on the branch, or with more commits than asked for.
func TestReadSinceGivesTheCommitsAfter(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	out, err := e.srv.Output("gitops.git", "rev-parse", "main")
	if err != nil {
		t.Fatal(err)
	}
	before := strings.TrimSpace(out)
	if _, err := apply(t, e, message.Onboarding, onboard1); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.WriteFile("gitops.git", "main", "README.md", "another writer\n", "another writer"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	file := templates.Root + "/tenants/premium/tenant-1.yaml"
	read := func(since string, max int) (chain []*gitrepo.Snapshot, complete bool) {
		t.Helper()
		if err := e.p.ReadSince(ctx, since, max, func(c []*gitrepo.Snapshot, ok bool) error {
			chain, complete = c, ok
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return chain, complete
	}
	chain, complete := read(before, 10)
	if !complete || len(chain) != 3 {
		t.Fatalf("since the commit before the push: %d commits, complete %v; want it, the push and the other writer's commit", len(chain), complete)
	}
	if chain[0].Commit.String() != before {
		t.Errorf("the chain starts at %s, want %s", chain[0].Commit, before)
	}
	if _, err := chain[0].ReadFile(file); err == nil {
		t.Error("the push's parent has the pushed tenant's file")
	}
	if _, err := chain[1].ReadFile(file); err != nil {
		t.Errorf("the push lacks the pushed tenant's file: %v", err)
	}
	if parents, _, err := e.p.repo.CommitInfo(chain[2].Commit); err != nil || parents[0] != chain[1].Commit {
		t.Error("the chain is not in order, oldest first")
	}
	head := chain[2].Commit.String()
	for _, tc := range []struct {
		since string
		max   int
	}{{"", 10}, {strings.Repeat("ab", 20), 10}, {before, 1}} {
		if chain, complete := read(tc.since, tc.max); complete || len(chain) != 1 || chain[0].Commit.String() != head {
			t.Errorf("since %q, at most %d: %d commits, complete %v; want the head alone, incomplete", tc.since, tc.max, len(chain), complete)
		}
	}
	if chain, complete := read(head, 10); !complete || len(chain) != 1 {
		t.Errorf("since the head: %d commits, complete %v; want the head alone, complete", len(chain), complete)
	}
}

// withBatchBytes is e with a pipeline on the same clone whose batches stop
// at n bytes written (0: the default).
func withBatchBytes(e env, n int64) env {
	e.p = New(e.p.repo, Options{Layout: gitops.Layout{Root: templates.Root}, Observer: e.obs, BatchBytes: n})
	return e
}

// TestABatchPastItsBytesIsPushedInParts: a batch whose commits pass
// BatchBytes is pushed as far as it got, and the rest follows in the next
// push of the same call, with the results a single push gives (the jobs
// of TestBatchOneCommitEachOnePush, one byte allowed: each job its own push).
func TestABatchPastItsBytesIsPushedInParts(t *testing.T) {
	e := withBatchBytes(setup(t), 1)
	before := strings.TrimSpace(mustOut(t, e, "rev-parse", "main"))
	sent := time.Now()
	res := e.p.Apply(context.Background(), []Job{
		{Request: onboard(t, "a1", "basic"), MessageID: "m1", Queue: "q", SentAt: sent},
		{Request: onboard(t, "a1", "premium"), MessageID: "m2", Queue: "q", SentAt: sent.Add(time.Millisecond)}, // held: a1 is in basic
		{Request: onboard(t, "a2", "basic"), MessageID: "m3", Queue: "q", SentAt: sent.Add(2 * time.Millisecond)},
		{Request: onboard(t, "a2", "basic"), MessageID: "m4", Queue: "q", SentAt: sent.Add(3 * time.Millisecond)}, // in place after m3
	})
	if !res[0].Applied || !res[1].Held || !res[2].Applied || !res[3].Recorded || res[3].Err != nil {
		t.Fatalf("results: %+v", res)
	}
	format := "--format=%s|%(trailers:key=Tenant-Worker-Message-Id,valueonly,separator=)"
	if log := mustOut(t, e, "log", format, before+"..main"); log != "Adding new tenant a2 in tier basic|m3\nAdding new tenant a1 in tier basic|m1\n" {
		t.Fatalf("history of main:\n%s", log)
	}
	if got := e.obs.pushed(PushSuccess); got != 4 {
		t.Fatalf("%v pushes, want 4 (one per job)", got)
	}
	if n := strings.TrimSpace(mustOut(t, e, "rev-list", "--count", "tenant-worker/ledger")); n != "4" {
		t.Fatalf("%s ledger commits, want 4", n)
	}
	for _, r := range res {
		if r.Steps == nil {
			t.Fatalf("a result without the batch's step times: %+v", r)
		}
	}
}
