package integration

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
)

// TestFaultRun sends more than 300 messages across the three queues while
// another writer pushes to the branch, the git server fails and stalls
// pushes, worker processes are killed with SIGKILL and restarted, and two
// workers run at once for part of the run. Nothing may be lost or applied
// twice, and the tree must be exactly what the messages ask for.
func TestFaultRun(t *testing.T) {
	if testing.Short() {
		t.Skip("fault run skipped in -short mode")
	}
	h := newHarness(t, false)
	// Chaos raises receive counts; keep the redrive limit out of the way.
	h.q = createQueuesOpts(t, h.api, fauxqs.QueueOptions{MaxReceiveCount: 50})

	// Workers push as "worker-<n>", so the git server knows whose push it
	// holds; they take at most two messages per push, so phase 1 alone (240
	// onboardings) needs at least 120 pushes and every planned fault below
	// is reached on any machine, at any send rate.
	env := []string{"GIT_TIMEOUT=8s", "SQS_VISIBILITY_TIMEOUT=5s", "PUSH_ATTEMPTS=30", "SQS_MAX_MESSAGES=2", "MAX_BATCH=2"}
	if n := os.Getenv("GOMAXPROCS"); n != "" {
		env = append(env, "GOMAXPROCS="+n)
	}
	logs := &syncBuffer{}
	h.logs = logs
	if path := os.Getenv("FAULT_LOG"); path != "" {
		t.Cleanup(func() { _ = os.WriteFile(path, []byte(logs.String()), 0o644) })
	}
	c := newChaos(h, logs, env)
	h.onStall = c.dump
	h.git.SetHook(c.hook)
	c.start()

	// The messages. Phase 1: 240 onboardings, 30 bad messages, 20 exact
	// duplicates. Phase 2: 40 offboardings, a deployment per tier and 5
	// offboardings from the wrong tier. Within a phase the outcome does not
	// depend on the order, so the final tree is known.
	m := newModel()
	want := map[string]string{} // message id -> expected outcome class
	every := 2 * time.Millisecond
	if v := os.Getenv("FAULT_SEND_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FAULT_SEND_EVERY: %v", err)
		}
		every = d
	}
	send := func(queueURL, body, outcome string) string {
		time.Sleep(every)
		id := h.send(queueURL, body)
		want[id] = outcome
		return id
	}
	tiers := []string{"premium", "advanced", "basic"}
	var bodies, ids []string
	for i := 1; i <= 240; i++ {
		id, tier := fmt.Sprintf("f%d", i), tiers[i%3]
		body := fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q,"release_version":"0.0"}`, id, tier)
		m.step("onboarding", id, tier, "0.0")
		ids = append(ids, send(h.q.onboarding, body, "applied"))
		bodies = append(bodies, body)
		if i%12 == 0 {
			// An exact duplicate of an earlier message: whichever of the two
			// is handled first applies, the other is a no-op.
			send(h.q.onboarding, bodies[i/2], "either")
			want[ids[i/2]] = "either"
			send([]string{h.q.onboarding, h.q.offboarding, h.q.deployment}[i%36/12],
				fmt.Sprintf(`{"tenant_id":"bad_%d","tenant_tier":"x"}`, i), "rejected")
		}
		if i%24 == 0 {
			send(h.q.onboarding, fmt.Sprintf(`{"tenant_id":"f%d","tenant_tier":"premium","release_version":"1"}`, i), "rejected")
			send(h.q.onboarding, `not json at all`, "rejected")
		}
	}
	for len(want) < 290 {
		send(h.q.onboarding, fmt.Sprintf(`{"tenant_id":"x%d"}`, len(want)), "rejected")
	}
	h.waitAccounted(want, logs, 240*time.Second)

	for i := 1; i <= 40; i++ {
		id, tier := fmt.Sprintf("f%d", i*5), tiers[i*5%3]
		m.step("offboarding", id, tier, "")
		send(h.q.offboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q}`, id, tier), "applied")
	}
	for _, tier := range tiers {
		m.step("deployment", "", tier, "1.0")
		send(h.q.deployment, fmt.Sprintf(`{"tenant_tier":%q,"release_version":"1.0"}`, tier), "applied")
	}
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("f%d", i*5+1) // not offboarded above
		// From another tier than the tenant's: held, waiting for an
		// onboarding to that tier sent before it (none comes).
		send(h.q.offboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q}`, id, tiers[(i*5+2)%3]), "held")
	}
	h.waitAccounted(want, logs, 240*time.Second)
	c.stop()

	// Phase 3: latest send time wins. One worker; the git server holds its
	// push of the onboarding of z1 while the test sends z1's offboarding,
	// then fails that push once the offboarding is in the worker's hands.
	// The offboarding, waiting for the repository lock, goes first; the
	// onboarding, sent before it, comes back and must change nothing.
	// It is given the repository's new URL: one given the old URL would
	// find the move when the held push fails, and push again at once.
	stale := h.spawnIn("", logs, append(append([]string{"GIT_USERNAME=worker-stale"}, env...),
		"GIT_REPO_URL="+h.git.RepoURL(renamedTo))...)
	held, release := make(chan struct{}), make(chan struct{})
	var holds atomic.Int32
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if user, _, _ := r.BasicAuth(); user != "worker-stale" || r.Method != http.MethodPost ||
			!strings.HasSuffix(r.URL.Path, "git-receive-pack") || holds.Add(1) != 1 {
			return true
		}
		close(held)
		<-release
		http.Error(w, "failed after the newer message arrived", http.StatusInternalServerError)
		return false
	})
	m.step("onboarding", "z1", "premium", "0.0")
	m.step("offboarding", "z1", "premium", "")
	send(h.q.onboarding, `{"tenant_id":"z1","tenant_tier":"premium","release_version":"0.0"}`, "stale")
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("the onboarding of z1 was never pushed")
	}
	newer := send(h.q.offboarding, `{"tenant_id":"z1","tenant_tier":"premium"}`, "noop")
	addr := ""
	for _, l := range stale.logs.lines("message", "serving the status page, /api/runs, /metrics, /healthz and /readyz") {
		addr = fmt.Sprint(l["addr"])
	}
	h.waitFor("the offboarding in the worker's hands", 60*time.Second, func() bool { return inFlightAt(addr, newer) })
	close(release)
	counts := h.waitAccounted(want, logs, 120*time.Second)
	if err := stale.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err, ok := stale.stopped(20 * time.Second); !ok || err != nil {
		t.Errorf("worker exit: %v (exited %v)", err, ok)
	}
	if counts["stale"] < 1 {
		t.Errorf("no message was stale")
	}

	// Zero lost: every message settled, the tree is exactly the model's.
	for _, u := range []string{h.q.onboarding, h.q.offboarding, h.q.deployment} {
		if n := h.queueCount(u); n != 0 {
			t.Errorf("%d messages left in %s", n, u)
		}
	}
	h.checkInvariants(m, true)
	// Nothing force-pushed: every commit of the other writer is in main's
	// history.
	foreign := 0
	for _, subject := range strings.Split(h.gitOut("log", "--format=%s", "main"), "\n") {
		if strings.HasPrefix(subject, foreignSubject) {
			foreign++
		}
	}
	if int64(foreign) != c.foreign.Load() || foreign == 0 {
		t.Errorf("main's history holds %d of the other writer's %d commits", foreign, c.foreign.Load())
	}
	// Zero applied twice: no message id in two commits. A message whose
	// change was in place already may have a commit that only records it
	// in the ledger ("Already in place: ...").
	perID, recordedIDs := map[string]int{}, map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(h.gitOut("log", "--format=%s|%(trailers:key=Tenant-Worker-Message-Id,valueonly,separator= )", "main")), "\n") {
		subject, id, _ := strings.Cut(line, "|")
		if id = strings.TrimSpace(id); id == "" {
			continue
		}
		perID[id]++
		recordedIDs[id] = strings.HasPrefix(subject, "Already in place: ")
	}
	applied := 0
	for id, n := range perID {
		if n > 1 {
			t.Errorf("message %s applied %d times", id, n)
		}
		switch {
		case recordedIDs[id] && (want[id] == "either" || want[id] == "noop"):
		case !recordedIDs[id] && (want[id] == "applied" || want[id] == "either"):
			applied++
		default:
			t.Errorf("message %s has a commit (recorded only: %v) but should be %s", id, recordedIDs[id], want[id])
		}
	}
	// Rejected messages are in the dead-letter queues with a reason.
	dead := map[string]string{}
	for _, kind := range []string{"onboarding", "offboarding", "deployment"} {
		for id, reason := range h.drainDLQ(h.q.dlq[kind]) {
			dead[id] = reason
		}
	}
	rejected := 0
	for id, w := range want {
		if w == "rejected" {
			rejected++
			if dead[id] == "" {
				t.Errorf("rejected message %s not in a dead-letter queue (dead letters read: %d); its log lines:\n%s",
					id, len(dead), strings.Join(logs.naming(id), "\n"))
			}
		}
	}
	longest, recovered := c.recovery(logs)
	// The other writer's notes touch nothing a plan reads: some batch that
	// lost to one was rebased; its YAML file is read by every collision
	// check: some batch that lost to one was decided again.
	rebased, again := retries(logs)
	if rebased == 0 {
		t.Errorf("no batch that lost a race was rebased, although %d of the other writer's notes beat a push", c.injectedCount(faultWriterNote))
	}
	if again == 0 {
		t.Errorf("no batch that lost a race was decided again, although %d of the other writer's YAML files beat a push", c.injectedCount(faultWriterYAML))
	}
	t.Logf("fault run: %d messages sent: %d applied (one commit each), %d no-ops, stale or held, %d rejected and dead-lettered, 0 lost; "+
		"%d redeliveries recognised by the ledger; %d stale; %d commits by another writer; %d pushes by workers; %d lost push races (%d rebased); "+
		"%d transient failures retried through SQS; crash recovery: the %d messages in hand at SIGKILLs handled again within %s "+
		"(SQS_VISIBILITY_TIMEOUT 5s); faults injected/observed: %s",
		len(want), applied, len(want)-applied-rejected, rejected, counts["redelivered"], counts["stale"], c.injectedCount(faultWriterNote)+c.injectedCount(faultWriterYAML), c.pushes.Load(),
		strings.Count(logs.String(), "push lost a race"), rebased, strings.Count(logs.String(), "message failed; SQS will redeliver it"),
		recovered, longest.Round(time.Second), c.report())
	c.check(t)
	if counts["redelivered"] < 1 {
		t.Errorf("no redelivery was recognised as already applied, although workers were killed after the branch moved")
	}
	nHeld := 0
	for _, w := range want {
		if w == "held" {
			nHeld++
		}
	}
	if applied != 283 || nHeld != 5 || rejected != len(want)-283-20-2-nHeld {
		t.Errorf("applied %d, held %d, rejected %d: the accounting does not add up", applied, nHeld, rejected)
	}
	assertNoTokenInOutput(t, h)
}

// waitAccounted waits until every message in want has a final outcome in
// the logs (of any worker process) and returns counts by outcome.
func (h *harness) waitAccounted(want map[string]string, logs *syncBuffer, timeout time.Duration) map[string]int {
	h.t.Helper()
	var counts map[string]int
	lastMissing := 0
	var missingIDs []string
	defer func() {
		if h.t.Failed() {
			slices.Sort(missingIDs)
			h.t.Logf("%d of %d messages were not accounted for, such as %v", lastMissing, len(want), missingIDs[:min(len(missingIDs), 10)])
			if h.onStall != nil {
				h.onStall()
			}
		}
	}()
	h.waitFor("every message accounted for", timeout, func() bool {
		seen := map[string]string{}
		redelivered := 0
		for _, l := range logs.lines("level", "info") {
			id, _ := l["message_id"].(string)
			switch l["message"] {
			case "tenant change pushed":
				seen[id] = "applied"
			case "already carried out; nothing to push", "already carried out; recorded in the ledger":
				if seen[id] == "" {
					seen[id] = "noop"
				}
			case staleLine:
				if seen[id] == "" {
					seen[id] = "stale"
				}
			case heldLine:
				if seen[id] == "" {
					seen[id] = "held"
				}
			case "already applied by an earlier delivery of this message":
				if seen[id] == "" {
					seen[id] = "noop"
				}
				redelivered++
			}
		}
		for _, l := range logs.lines("level", "warn") {
			if l["message"] == "message rejected" {
				seen[l["message_id"].(string)] = "rejected"
			}
		}
		counts = map[string]int{"redelivered": redelivered}
		missing := 0
		missingIDs = missingIDs[:0]
		for id := range want {
			if seen[id] == "" {
				missing++
				missingIDs = append(missingIDs, id)
			}
		}
		if missing > 0 {
			lastMissing = missing
			return false
		}
		for id, w := range want {
			got := seen[id]
			if w == "applied" && got == "noop" {
				got = "applied" // applied, then the redelivery recognised
			}
			if w == "either" && (got == "applied" || got == "noop" || got == "stale") {
				got = w
			}
			if got != w {
				h.t.Fatalf("message %s: outcome %s, want %s", id, got, w)
			}
			counts[got]++
		}
		return true
	})
	return counts
}

// retries counts the attempts after a lost race that workers rebased and
// those they ran again whole (from their "batch attempt done" lines).
func retries(logs *syncBuffer) (rebased, again int) {
	for _, l := range logs.lines("message", "batch attempt done") {
		attempt, _ := l["attempt"].(float64)
		switch {
		case l["rebased"] == true:
			rebased++
		case attempt > 1:
			again++
		}
	}
	return rebased, again
}
