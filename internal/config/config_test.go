package config

import (
	"flag"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func bind(t *testing.T, env map[string]string, args ...string) (Options, error) {
	t.Helper()
	o := Default()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.Bind(fs, func(k string) string { return env[k] })
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.Validate()
}

func TestEnvAndFlags(t *testing.T) {
	o, err := bind(t, map[string]string{
		"GIT_REPO_URL": "http://127.0.0.1:3000/admin/gitops.git", "GIT_BRANCH": "prod",
		"SQS_VISIBILITY_TIMEOUT": "5m", "ONBOARDING_QUEUE": "https://sqs.eu-west-1.amazonaws.com/1/q",
	}, "--git-branch", "flagged")
	if err != nil {
		t.Fatal(err)
	}
	if o.GitBranch != "flagged" {
		t.Errorf("flag did not win over env: %q", o.GitBranch)
	}
	if o.VisibilityTimeout != 5*time.Minute || o.OnboardingQueue != "https://sqs.eu-west-1.amazonaws.com/1/q" {
		t.Errorf("env not applied: %+v", o)
	}
	if o.DeploymentQueue != "argoworkflows-deployment-queue" || o.GitopsRoot != "application-plane/production" {
		t.Errorf("defaults lost: %+v", o)
	}
}

func TestValidateReportsEverything(t *testing.T) {
	_, err := bind(t, map[string]string{
		"GIT_REPO_URL": "https://admin:secret@gitea/x.git", "SQS_MAX_MESSAGES": "11", "GIT_TIMEOUT": "soon",
		"GITOPS_ROOT": "../etc", "LOG_FORMAT": "xml", "GIT_TOKEN": "a", "GIT_TOKEN_FILE": "/f",
	})
	if err == nil {
		t.Fatal("bad settings accepted")
	}
	for _, want := range []string{"must not hold credentials", "SQS_MAX_MESSAGES", "GIT_TIMEOUT", "GITOPS_ROOT",
		"LOG_FORMAT", "not both"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Error("error repeats the password from the URL")
	}
	if _, err := bind(t, nil); err == nil || !strings.Contains(err.Error(), "GIT_REPO_URL is required") {
		t.Fatalf("missing GIT_REPO_URL: %v", err)
	}
}

func TestCredentials(t *testing.T) {
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte("abc123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token := func(o Options) (string, []string, error) {
		var seen []string
		creds, err := o.Credentials(func(s string) { seen = append(seen, s) })
		if err != nil {
			return "", seen, err
		}
		auth, err := creds.Auth()
		if err != nil || auth == nil {
			return "", seen, err
		}
		return auth.(*githttp.BasicAuth).Password, seen, nil
	}
	if tok, seen, err := token(Options{GitTokenFile: f}); err != nil || tok != "abc123" || len(seen) != 1 || seen[0] != "abc123" {
		t.Fatalf("token file: %q %v %v", tok, seen, err)
	}
	if tok, _, _ := token(Options{GitToken: " env-token "}); tok != "env-token" {
		t.Fatalf("GIT_TOKEN: %q", tok)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	_ = os.WriteFile(empty, nil, 0o600)
	if _, _, err := token(Options{GitTokenFile: empty}); err == nil {
		t.Fatal("empty token file accepted")
	}
}

// TestSSHSettings: an SSH GIT_REPO_URL (either form) needs a key and a
// known_hosts file, takes no token, and SSH settings need an SSH URL.
func TestSSHSettings(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string // "" accepts
	}{
		{map[string]string{"GIT_REPO_URL": "ssh://git@gitea:2222/saas/gitops.git", "GIT_SSH_KEY_FILE": "/k", "GIT_KNOWN_HOSTS_FILE": "/kh"}, ""},
		{map[string]string{"GIT_REPO_URL": "git@gitea:saas/gitops.git", "GIT_SSH_KEY_FILE": "/k", "GIT_KNOWN_HOSTS_FILE": "/kh"}, ""},
		{map[string]string{"GIT_REPO_URL": "ssh://git@gitea/saas/gitops.git", "GIT_SSH_KEY_FILE": "/k"}, "GIT_KNOWN_HOSTS_FILE"},
		{map[string]string{"GIT_REPO_URL": "git@gitea:saas/gitops.git", "GIT_KNOWN_HOSTS_FILE": "/kh"}, "GIT_SSH_KEY_FILE"},
		{map[string]string{"GIT_REPO_URL": "ssh://git@gitea/x.git", "GIT_SSH_KEY_FILE": "/k", "GIT_KNOWN_HOSTS_FILE": "/kh", "GIT_TOKEN": "t0k3n"}, "for HTTP(S) URLs"},
		{map[string]string{"GIT_REPO_URL": "https://gitea/x.git", "GIT_SSH_KEY_FILE": "/k"}, "need an ssh://"},
		{map[string]string{"GIT_REPO_URL": "ssh://git:pw@gitea/x.git", "GIT_SSH_KEY_FILE": "/k", "GIT_KNOWN_HOSTS_FILE": "/kh"}, "must not hold credentials"},
	} {
		_, err := bind(t, c.env)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v refused: %v", c.env, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: want an error about %q, got %v", c.env, c.want, err)
		}
	}
}

// TestArtifactInterval: ARTIFACT_INTERVAL takes 0 (the tenants
// Kustomization's) or a whole interval Flux can write; a negative or
// sub-second one is refused at start, naming the setting.
func TestArtifactInterval(t *testing.T) {
	for v, ok := range map[string]bool{"": true, "0": true, "0s": true, "1s": true, "10m": true, "1.5s": true,
		"-5m": false, "500us": false, "1ns": false, "999ms": false, "10": false} {
		o, err := bind(t, map[string]string{"GIT_REPO_URL": "http://gitea:3000/admin/gitops.git",
			"ARTIFACT_URL": "http://tenant-worker.tenant-worker.svc:8081", "ARTIFACT_INTERVAL": v})
		if ok && err != nil || !ok && (err == nil || !strings.Contains(err.Error(), "ARTIFACT_INTERVAL")) {
			t.Errorf("ARTIFACT_INTERVAL=%q: interval %s, error %v", v, o.ArtifactInterval, err)
		}
	}
}

// TestRunHistoryHoldsABatch: a history smaller than a batch would drop some
// of a batch's runs as soon as it finishes; the defaults hold one, and a
// setting that does not is refused with both numbers.
func TestRunHistoryHoldsABatch(t *testing.T) {
	url := map[string]string{"GIT_REPO_URL": "http://127.0.0.1:3000/admin/gitops.git"}
	if o, err := bind(t, url); err != nil || o.RunHistory < o.MaxBatch {
		t.Fatalf("defaults: RUN_HISTORY %d, MAX_BATCH %d: %v", o.RunHistory, o.MaxBatch, err)
	}
	// RUN_HISTORY set alone below the default batch (valid before the
	// default went from 500 to 1,000) brings the batch down to it.
	url["RUN_HISTORY"] = "500"
	if o, err := bind(t, url); err != nil || o.MaxBatch != 500 {
		t.Errorf("RUN_HISTORY 500 alone: MAX_BATCH %d, %v; want 500", o.MaxBatch, err)
	}
	url["RUN_HISTORY"], url["MAX_BATCH"] = "200", "500"
	_, err := bind(t, url)
	if err == nil || !strings.Contains(err.Error(), "RUN_HISTORY (200) must be at least MAX_BATCH (500)") {
		t.Errorf("RUN_HISTORY 200 with MAX_BATCH 500: %v", err)
	}
	url["MAX_BATCH"] = "200"
	if _, err := bind(t, url); err != nil {
		t.Errorf("RUN_HISTORY 200 with MAX_BATCH 200: %v", err)
	}
	// A MAX_BATCH of 1,000 set with a lower RUN_HISTORY is what was asked
	// for, and refused: not lowered as the default is.
	url["RUN_HISTORY"], url["MAX_BATCH"] = "500", "1000"
	if o, err := bind(t, url); err == nil || !strings.Contains(err.Error(), "RUN_HISTORY (500) must be at least MAX_BATCH (1000)") {
		t.Errorf("RUN_HISTORY 500 with MAX_BATCH 1000: batch %d, %v", o.MaxBatch, err)
	}
	// 0 is the default, said out loud; with the default RUN_HISTORY it is
	// the limit.
	url["MAX_BATCH"] = "0"
	delete(url, "RUN_HISTORY")
	if o, err := bind(t, url); err != nil || o.MaxBatch != MaxBatchLimit {
		t.Errorf("MAX_BATCH 0: batch %d, %v; want %d", o.MaxBatch, err, MaxBatchLimit)
	}
	// Never below a receive.
	url["MAX_BATCH"], url["RUN_HISTORY"], url["SQS_MAX_MESSAGES"] = "0", "4", "10"
	if o, err := bind(t, url); err == nil || !strings.Contains(err.Error(), "RUN_HISTORY (4) must be at least MAX_BATCH (10)") {
		t.Errorf("RUN_HISTORY 4, SQS_MAX_MESSAGES 10: batch %d, %v", o.MaxBatch, err)
	}
}

// TestMaxBatchBounds: MAX_BATCH runs from SQS_MAX_MESSAGES to 1,000, and
// a value outside is refused with the bounds.
func TestMaxBatchBounds(t *testing.T) {
	for _, tt := range []struct {
		max, batch string
		ok         bool
	}{{"10", "1000", true}, {"10", "1001", false}, {"10", "10", true}, {"10", "9", false}, {"2", "2", true}, {"10", "0", true}, {"10", "-1", false}} {
		url := map[string]string{"GIT_REPO_URL": "http://127.0.0.1:3000/admin/gitops.git",
			"SQS_MAX_MESSAGES": tt.max, "MAX_BATCH": tt.batch, "RUN_HISTORY": "1000"}
		_, err := bind(t, url)
		if tt.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "or SQS_MAX_MESSAGES to 1000, not "+tt.batch) {
			t.Errorf("SQS_MAX_MESSAGES %s, MAX_BATCH %s: %v", tt.max, tt.batch, err)
		}
	}
}
