package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/config"
)

// probeRequests counts the requests a paused worker makes to learn whether
// it may push again (the receive-pack advertisement).
func isProbe(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Query().Get("service") == "git-receive-pack"
}

// readyz returns the worker's /readyz answer.
func readyz(addr string) string {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestGitOutageDeadLettersNothing: while git is down the worker stops
// receiving, says why, probes, and resumes by itself. The outage ends at a
// point of the protocol (after 40 failed probes), and lasts more than ten
// times the redrive window: the time in which SQS, receiving the message
// at the worker's retry delays, would have dead-lettered it (5 receives).
func TestGitOutageDeadLettersNothing(t *testing.T) {
	h := newHarness(t, true)
	const retry, maxRetry, probeEvery = 100 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond
	h.tune = func(o *config.Options) {
		o.RetryDelay, o.MaxRetryDelay, o.ProbeMaxDelay = retry, maxRetry, probeEvery
	}
	// 5 receives, the first at once, then after 0.1, 0.2, 0.2, 0.2 s.
	redriveWindow := retry + 3*maxRetry
	var down atomic.Bool
	var failedProbes atomic.Int32
	const outageProbes = 40
	var began, ended atomic.Int64
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if !down.Load() {
			return true
		}
		if isProbe(r) && failedProbes.Add(1) >= outageProbes {
			ended.Store(time.Now().UnixNano())
			down.Store(false) // the outage ends at a known point
		}
		http.Error(w, "git is down", http.StatusServiceUnavailable)
		return false
	})
	h.start()
	began.Store(time.Now().UnixNano())
	down.Store(true)
	id := h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`)
	h.waitFor("the worker to pause", 20*time.Second, func() bool {
		return strings.Contains(readyz(h.httpAddr), "git_unreachable")
	})
	if m := h.httpGet("/metrics"); !strings.Contains(m, `tenant_worker_paused{cause="git_unreachable"} 1`) {
		t.Errorf("metrics while paused lack the paused gauge")
	}
	if page := h.httpGet("/"); !strings.Contains(page, `id="paused"`) {
		t.Errorf("the status page does not say the worker is paused")
	}
	line := h.outcome(id)
	if line["message"] != "tenant change pushed" {
		t.Fatalf("after the outage: %v", line)
	}
	if n := failedProbes.Load(); n < outageProbes {
		t.Fatalf("the outage ended after %d failed probes, planned %d", n, outageProbes)
	}
	// The probes are paced by the worker's backoff, so the outage cannot be
	// shorter than this on any machine.
	if lasted := time.Duration(ended.Load() - began.Load()); lasted < 10*redriveWindow {
		t.Fatalf("the outage lasted %s, less than ten redrive windows (%s)", lasted, 10*redriveWindow)
	}
	// One receive met the outage, one after it: the receive count never
	// climbed while git was down.
	if rc := line["receive_count"].(float64); rc > 2 {
		t.Fatalf("receive count %v after the outage, want at most 2", rc)
	}
	if got := h.drainDLQ(h.q.dlq["onboarding"]); len(got) != 0 {
		t.Fatalf("dead letters after a git outage: %v", got)
	}
	h.waitFor("ready again", 10*time.Second, func() bool { return readyz(h.httpAddr) == "ready\n" })
}

// TestTokenRotation: the server starts refusing the token; the worker stops
// receiving, and resumes once the token file holds the new token, which it
// reads again after the refusal. Neither token is ever printed.
func TestTokenRotation(t *testing.T) {
	h := newHarness(t, true)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := h.startBinary("GIT_TOKEN_FILE="+tokenFile, "PROBE_MAX_DELAY=100ms")
	const rotated = "tok-rotated-2b9d-never-print-me"
	h.httpBackend().SetToken(rotated)
	id := h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`)
	// Three probes refused: the file still holds the old token.
	h.waitFor("the worker to pause for its credentials", 20*time.Second, func() bool {
		return len(p.logs.lines("message", "still paused: the fault is still there")) >= 3 &&
			len(p.logs.lines("cause", "git_credentials")) > 0
	})
	if err := os.WriteFile(tokenFile, []byte(rotated+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if line := h.outcome(id); line["message"] != "tenant change pushed" {
		t.Fatalf("after the rotation: %v", line)
	}
	if got := h.drainDLQ(h.q.dlq["onboarding"]); len(got) != 0 {
		t.Fatalf("dead letters after a token rotation: %v", got)
	}
	if out := p.logs.String(); strings.Contains(out, rotated) || strings.Contains(out, token) {
		t.Fatal("a token was printed")
	}
}

// TestNoAtomicPushIsAPause: a git server that does not offer atomic
// pushes (git's receive.advertiseAtomic false), which moving the ledger
// branch with the branch needs, pauses the worker with cause
// git_unsupported on /readyz, found at start or at a push; it resumes by
// itself once the server offers them again, and nothing is dead-lettered.
// The server changes its mind at points of the protocol: a push it fails
// (as a restart would) and a number of probes seen while /readyz said so.
func TestNoAtomicPushIsAPause(t *testing.T) {
	body := `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`
	for _, when := range []string{"start", "push"} {
		t.Run(when, func(t *testing.T) {
			h := newHarness(t, true)
			h.tune = func(o *config.Options) {
				o.RetryDelay, o.MaxRetryDelay, o.ProbeMaxDelay = 100*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
			}
			srv := h.httpBackend()
			atomicPush := func(on bool) {
				if _, err := srv.Output(repoName, "config", "receive.advertiseAtomic", fmt.Sprint(on)); err != nil {
					t.Error(err)
				}
			}
			var armed, seenPaused, failed atomic.Bool
			var probes atomic.Int32
			srv.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
				switch {
				case armed.Load() && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack"):
					// The push: the server goes without atomic pushes, and
					// fails this one, as a restart with a new setting would.
					armed.Store(false)
					atomicPush(false)
					failed.Store(true)
					http.Error(w, "restarting", http.StatusServiceUnavailable)
					return false
				case isProbe(r) && seenPaused.Load() && probes.Add(1) == 3:
					atomicPush(true) // the fault ends after three probes seen paused
				}
				return true
			})
			var id string
			if when == "start" {
				atomicPush(false)
				h.launchInProcess()
				id = h.send(h.q.onboarding, body)
			} else {
				h.start()
				armed.Store(true)
				id = h.send(h.q.onboarding, body)
			}
			h.waitFor("a pause for git_unsupported", time.Minute, func() bool {
				return strings.Contains(readyz(h.httpAddr), "git_unsupported")
			})
			seenPaused.Store(true)
			if m := h.httpGet("/metrics"); !strings.Contains(m, `tenant_worker_paused{cause="git_unsupported"} 1`) {
				t.Errorf("metrics while paused lack the paused gauge for git_unsupported")
			}
			if line := h.outcome(id); line["message"] != "tenant change pushed" {
				t.Fatalf("once atomic pushes are back: %v", line)
			}
			if when == "push" && !failed.Load() {
				t.Fatal("the planned failed push did not happen")
			}
			if probes.Load() < 3 {
				t.Fatalf("%d probes while paused, planned 3", probes.Load())
			}
			if got := h.drainDLQ(h.q.dlq["onboarding"]); len(got) != 0 {
				t.Fatalf("dead letters: %v", got)
			}
			if n := len(h.logs.naming("git_unsupported")); n == 0 {
				t.Errorf("the log never names the cause")
			}
			h.waitFor("ready again", time.Minute, func() bool { return readyz(h.httpAddr) == "ready\n" })
		})
	}
}
