package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/pipeline"
)

// TestGiteaTokensAreCredentialProblems: against real Gitea, a token of
// scope read:repository (Gitea answers 403 on push) and then a wrong token
// pause the worker for its credentials: not ready, the pause metric, the
// status page, and nothing dead-lettered though the message waits longer
// than the redrive limit would allow. Once the token file holds a token
// that may push, the message goes through.
func TestGiteaTokensAreCredentialProblems(t *testing.T) {
	t.Parallel()
	h := newHarnessOn(t, giteaServer, true)
	g := h.gitea()
	tokenFile := filepath.Join(t.TempDir(), "token")
	write(t, tokenFile, g.ReadToken+"\n")
	var refused403 atomic.Int32
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.Contains(r.URL.String(), "git-receive-pack") {
			// A push's advertisement or its pack; Gitea itself answers.
			refused403.Add(1)
		}
		return true
	})
	p := h.startBinary("GIT_TOKEN_FILE="+tokenFile, "PROBE_MAX_DELAY=200ms", "RETRY_DELAY=1s")
	h.httpAddr = p.addr(t)
	id := h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`)

	paused := func(what string) {
		t.Helper()
		// Six refused probes: longer than five receives would take.
		h.waitFor("the worker to pause for its credentials ("+what+")", 60*time.Second, func() bool {
			return len(p.logs.lines("message", "still paused: the fault is still there")) >= 6 &&
				len(p.logs.lines("cause", "git_credentials")) > 0
		})
		if r := h.httpGet("/readyz"); !strings.Contains(r, "git_credentials") {
			t.Errorf("%s: /readyz %q", what, r)
		}
		if m := h.httpGet("/metrics"); !strings.Contains(m, `tenant_worker_paused{cause="git_credentials"} 1`) {
			t.Errorf("%s: no pause in the metrics", what)
		}
		if page := h.httpGet("/"); !strings.Contains(page, "git_credentials") {
			t.Errorf("%s: the status page does not show the pause", what)
		}
	}
	paused("read:repository token")
	if refused403.Load() == 0 {
		t.Fatal("planned fault did not occur: no push was tried with the read-only token")
	}
	if !strings.Contains(p.logs.String(), "403") && !strings.Contains(p.logs.String(), "authorization failed") {
		t.Errorf("the log does not say Gitea refused the push:\n%s", tail(p.logs.String(), 3000))
	}

	// A wrong token: Gitea answers 401 to everything.
	write(t, tokenFile, "0123456789abcdef0123456789abcdef01234567\n")
	before := len(p.logs.lines("message", "still paused: the fault is still there"))
	h.waitFor("probes refused with the wrong token", 60*time.Second, func() bool {
		return len(p.logs.lines("message", "still paused: the fault is still there")) >= before+3
	})
	paused("wrong token")

	write(t, tokenFile, g.Token+"\n")
	if line := h.outcome(id); line["message"] != "tenant change pushed" {
		t.Fatalf("after the token was fixed: %v", line)
	}
	if got := h.drainDLQ(h.q.dlq["onboarding"]); len(got) != 0 {
		t.Fatalf("dead letters for a credentials problem: %v", got)
	}
	for _, tok := range []string{g.Token, g.ReadToken} {
		if strings.Contains(p.logs.String(), tok) {
			t.Fatal("a token was printed")
		}
	}
}

// TestGiteaRenameAndAPI: the repository is renamed in Gitea while the
// worker runs (Gitea answers the old URL with 301); the worker keeps
// pushing, and Gitea's own API shows its commits with their trailers.
func TestGiteaRenameAndAPI(t *testing.T) {
	t.Parallel()
	h := newHarnessOn(t, giteaServer, true)
	g := h.gitea()
	h.start()
	first := h.outcome(h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`))
	if first["message"] != "tenant change pushed" {
		t.Fatalf("outcome: %v", first)
	}
	if err := g.Rename(repoName, "renamed-gitops"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(g.RepoURL(repoName) + "/info/refs?service=git-upload-pack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !strings.HasPrefix(resp.Request.URL.Path, "/gitops/renamed-gitops") {
		t.Fatalf("planned fault did not occur: the old URL is not redirected (ended at %s)", resp.Request.URL)
	}
	id := h.send(h.q.onboarding, `{"tenant_id":"tenant-2","tenant_tier":"basic","release_version":"0.0"}`)
	second := h.outcome(id)
	if second["message"] != "tenant change pushed" {
		t.Fatalf("after the rename: %v", second)
	}
	if len(h.logs.lines("message", "the git server says the repository moved; using the new URL (update GIT_REPO_URL)")) == 0 {
		t.Error("the worker did not say the repository moved")
	}
	for _, line := range []map[string]any{first, second} {
		sha, _ := line["commit"].(string)
		c, err := g.GetCommit("renamed-gitops", sha)
		if err != nil {
			t.Fatalf("Gitea's API does not know commit %s: %v", sha, err)
		}
		msg := c.Commit.Message
		if !strings.Contains(msg, pipeline.TrailerMessageID+": "+line["message_id"].(string)) || !strings.Contains(msg, pipeline.TrailerQueue+": ") {
			t.Errorf("commit %s as Gitea shows it has no trailers:\n%s", sha, msg)
		}
	}
	if _, err := os.Stat(g.RepoPath(repoName)); err != nil {
		t.Fatal(err)
	}
}
