package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/inventory"
	"github.com/tenant-worker/tenant-worker/internal/results"
)

// cli runs the tenant-worker binary with the harness's queues and
// repository in its environment, as a person at a terminal would after
// `make run` (stdout and stderr are pipes here, so no progress is shown).
func (h *harness) cli(resultsQueue string, args ...string) (stdout, stderr string, code int) {
	h.t.Helper()
	tokenFile := filepath.Join(h.t.TempDir(), "git-token")
	if err := os.WriteFile(tokenFile, []byte(h.token+"\n"), 0o600); err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command(workerBinary(h.t), args...)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL_SQS=" + sqsEndpoint,
		"ONBOARDING_QUEUE=" + queueName(h.q.onboarding), // by name, like tenant-control.sh
		"OFFBOARDING_QUEUE=" + queueName(h.q.offboarding),
		"DEPLOYMENT_QUEUE=" + queueName(h.q.deployment),
		"RESULTS_QUEUE=" + resultsQueue,
		"GIT_REPO_URL=" + h.git.RepoURL(repoName),
		"GIT_TOKEN_FILE=" + tokenFile,
	}
	cmd.Env = append(cmd.Env, h.cliEnv...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatal(err)
	}
	if strings.Contains(out.String()+errOut.String(), h.token) {
		h.t.Fatalf("the token is in the output of %v", args)
	}
	return out.String(), errOut.String(), code
}

// TestCLI: a person onboards a tenant with `send --wait`, sees why a bad
// message is refused, previews a change with `plan` and lists tenants.
func TestCLI(t *testing.T) {
	h := newHarness(t, true)
	resultsURL := h.withResults()
	h.start()

	// send --wait: the message id, then the outcome with the commit.
	out, errOut, code := h.cli(queueName(resultsURL), "send", "onboarding", "--tenant-id", "tenant-1", "--tier", "premium", "--release", "0.0", "--wait")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], "applied: onboarding tenant-1 premium in commit "+h.head()) {
		t.Fatalf("send --wait: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if errOut != "" {
		t.Errorf("progress shown on a pipe: %q", errOut)
	}
	if h.file("tenants/premium/tenant-1.yaml") == "<absent>" {
		t.Error("the tenant file is not on the branch")
	}

	// An onboarding to another tier than the tenant's waits for the
	// offboarding of the move: held, exit 3, saying what it waits for.
	out, errOut, code = h.cli(queueName(resultsURL), "send", "onboarding", "--tenant-id", "tenant-1", "--tier", "basic", "--release", "0.0", "--wait", "--json")
	var ev results.Event
	if err := json.Unmarshal([]byte(strings.Split(strings.TrimSpace(out), "\n")[1]), &ev); err != nil || code != 3 ||
		ev.Outcome != "held" || !strings.Contains(ev.Error, "is in tier premium") {
		t.Errorf("send of a tenant already in another tier: exit %d, %s (%v)\n%s", code, out, err, errOut)
	}

	// An offboarding from another tier than the tenant's: held too (an
	// onboarding to that tier sent before it may still come), exit 3.
	out, errOut, code = h.cli(queueName(resultsURL), "send", "offboarding", "--tenant-id", "tenant-1", "--tier", "advanced", "--wait", "--json")
	ev = results.Event{}
	if err := json.Unmarshal([]byte(strings.Split(strings.TrimSpace(out), "\n")[1]), &ev); err != nil || code != 3 ||
		ev.Outcome != "held" || !strings.Contains(ev.Error, "is in tier premium, not advanced") {
		t.Errorf("offboarding from another tier than the tenant's: exit %d, %s (%v)\n%s", code, out, err, errOut)
	}

	// A refusal by the worker: exit 1 and the reason.
	out, errOut, code = h.cli(queueName(resultsURL), "send", "onboarding", "--tenant-id", "tenant-1", "--tier", "gold", "--release", "0.0", "--wait", "--json")
	ev = results.Event{}
	if err := json.Unmarshal([]byte(strings.Split(strings.TrimSpace(out), "\n")[1]), &ev); err != nil || code != 1 ||
		ev.Outcome != "rejected" || ev.Reason != "unknown_tier" {
		t.Errorf("onboarding to a tier the repository lacks: exit %d, %s (%v)\n%s", code, out, err, errOut)
	}

	// A bad message is refused before sending: nothing reaches the queue.
	_, errOut, code = h.cli(queueName(resultsURL), "send", "onboarding", "--tenant-id", "../etc", "--tier", "premium", "--release", "0.0")
	if code != 2 || !strings.Contains(errOut, "nothing sent") {
		t.Errorf("bad send: exit %d, %s", code, errOut)
	}
	if n := h.queueCount(h.q.onboarding); n != 0 {
		t.Errorf("%d messages in the queue after a refused send", n)
	}

	// plan: the diff, and nothing pushed.
	head := h.head()
	out, errOut, code = h.cli("", "plan", "onboarding", "--tenant-id", "tenant-2", "--tier", "advanced", "--release", "1.0")
	if code != 0 || !strings.Contains(out, "+++ b/application-plane/production/tenants/advanced/tenant-2.yaml") ||
		!strings.Contains(out, "+  - tenant-2.yaml") || !strings.Contains(out, "Adding new tenant tenant-2 in tier advanced") {
		t.Errorf("plan: exit %d\n%s\n%s", code, out, errOut)
	}
	if h.head() != head {
		t.Error("plan pushed")
	}
	out, _, code = h.cli("", "plan", "onboarding", "--tenant-id", "tenant-1", "--tier", "premium", "--release", "0.0")
	if code != 0 || !strings.HasPrefix(out, "nothing to change") {
		t.Errorf("plan of a done change: exit %d %s", code, out)
	}
	out, _, code = h.cli("", "plan", "offboarding", "--tenant-id", "tenant-1", "--tier", "advanced")
	if code != 3 || !strings.HasPrefix(out, "held:") {
		t.Errorf("plan of a held change: exit %d %s", code, out)
	}
	_, errOut, code = h.cli("", "plan", "deployment", "--tenant-id", "tenant-1", "--tier", "gold", "--release", "1.0")
	if code != 1 || !strings.Contains(errOut, "unknown_tier") {
		t.Errorf("plan of a refused change: exit %d %s", code, errOut)
	}

	// tenants: table and JSON.
	out, _, code = h.cli("", "tenants")
	if code != 0 || !strings.Contains(out, "TIER") || !regexpMatch(`premium\s+tenant-1\s+"?0\.0\.x"?\s+consumer=0\.1 producer=0\.1\s+ok`, out) {
		t.Errorf("tenants: exit %d\n%s", code, out)
	}
	out, _, code = h.cli("", "tenants", "--json", "--tier", "premium")
	var inv inventory.Inventory
	if err := json.Unmarshal([]byte(out), &inv); err != nil || code != 0 || len(inv.Tenants) != 1 || inv.Tenants[0].ID != "tenant-1" {
		t.Errorf("tenants --json: exit %d %v\n%s", code, err, out)
	}

	// Every subcommand has --help.
	for _, c := range []string{"send", "plan", "tenants", "run"} {
		if out, _, code := h.cli("", c, "--help"); code != 0 || !strings.Contains(out, "Usage: tenant-worker "+c) {
			t.Errorf("%s --help: exit %d\n%s", c, code, out)
		}
	}
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }
