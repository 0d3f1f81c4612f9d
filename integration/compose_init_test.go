package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tenant-worker/tenant-worker/internal/testenv/gitea"
)

// TestComposeInitScripts runs docker-compose.yaml's init steps as written,
// without Docker: deploy/compose/gitea-init.sh with the built Gitea's CLI,
// then deploy/compose/init.sh against its API and fauxqs (as the compose
// file's worker sees them). They used to stop at the repository creation
// (a write:repository token gets 403 from POST /user/repos). Then the
// worker starts with the compose settings and applies a message; the
// worker's token may push but not create repositories; the admin's
// one-time password is gone; a second run of both scripts changes nothing.
// The SSH variant (docker-compose.ssh.yaml) too: init makes a deploy key
// and pins Gitea's host key, and a worker pushes with them.
func TestComposeInitScripts(t *testing.T) {
	t.Parallel()
	g, err := gitea.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	bin, err := gitea.Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	secrets, setup := filepath.Join(dir, "secrets"), filepath.Join(dir, "setup")
	for _, d := range []string{secrets, setup} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// fauxqs is shared by the test run: the compose queue names are only
	// used here.
	env := append(os.Environ(),
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"GITEA_WORK_DIR="+g.WorkPath(), "SECRETS_DIR="+secrets, "SETUP_DIR="+setup,
		"TEMPLATES_DIR="+filepath.Join("..", "templates"),
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_DEFAULT_REGION=us-east-1",
		"AWS_ENDPOINT_URL="+sqsEndpoint, "GITEA_URL="+g.URL, "GIT_TOKEN_FILE="+filepath.Join(secrets, "git-token"),
		// docker-compose.ssh.yaml's settings of init, on this Gitea.
		"GIT_SSH_KEY_FILE="+filepath.Join(secrets, "ssh-key"), "GIT_KNOWN_HOSTS_FILE="+filepath.Join(secrets, "known_hosts"),
		"GITEA_SSH_HOST=127.0.0.1", fmt.Sprintf("GITEA_SSH_PORT=%d", g.SSHPort),
	)
	run := func(script string) string {
		t.Helper()
		cmd := exec.Command("sh", filepath.Join("..", "deploy", "compose", script))
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return string(out)
	}
	run("gitea-init.sh")
	if _, err := os.Stat(filepath.Join(setup, "admin-password")); err != nil {
		t.Fatalf("gitea-init.sh left no password for init.sh: %v", err)
	}
	if out := run("init.sh"); !strings.Contains(out, "queues and repository ready") {
		t.Fatalf("init.sh: %s", out)
	}
	if _, err := os.Stat(filepath.Join(setup, "admin-password")); !errors.Is(err, os.ErrNotExist) {
		t.Error("init.sh left the admin's password behind")
	}
	tok, err := os.ReadFile(filepath.Join(secrets, "git-token"))
	if err != nil {
		t.Fatal(err)
	}
	workerToken := strings.TrimSpace(string(tok))
	var apiErr *gitea.APIError
	if err := g.API(http.MethodPost, "/user/repos", workerToken, map[string]any{"name": "not-allowed"}, nil); !errors.As(err, &apiErr) || apiErr.Status != http.StatusForbidden {
		t.Errorf("the worker's token may create repositories: %v", err)
	}

	// The worker, with docker-compose.yaml's settings.
	queue := func(name string) string {
		out, err := sqsClient().GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatalf("init.sh did not create %s: %v", name, err)
		}
		return aws.ToString(out.QueueUrl)
	}
	for _, q := range []string{"argoworkflows-offboarding-queue", "argoworkflows-deployment-queue", "tenant-worker-results",
		"argoworkflows-onboarding-queue-dlq"} {
		queue(q)
	}
	// The worker with docker-compose.yaml's settings (a token), then with
	// docker-compose.ssh.yaml's (the deploy key and known_hosts init made).
	onboarding := queue("argoworkflows-onboarding-queue")
	for i, variant := range [][]string{
		{"GIT_REPO_URL=" + g.URL + "/admin/eks-saas-gitops.git", "GIT_TOKEN_FILE=" + filepath.Join(secrets, "git-token")},
		{fmt.Sprintf("GIT_REPO_URL=ssh://git@127.0.0.1:%d/admin/eks-saas-gitops.git", g.SSHPort),
			"GIT_SSH_KEY_FILE=" + filepath.Join(secrets, "ssh-key"), "GIT_KNOWN_HOSTS_FILE=" + filepath.Join(secrets, "known_hosts")},
	} {
		cmd := exec.Command(workerBinary(t), "run")
		cmd.Env = append([]string{
			"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
			"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_ENDPOINT_URL_SQS=" + sqsEndpoint,
			"GIT_USERNAME=admin", "GITOPS_ROOT=application-plane/production",
			"RESULTS_QUEUE=tenant-worker-results", "HTTP_ADDR=127.0.0.1:0", "SQS_WAIT_TIME=1s",
		}, variant...)
		logs := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() { _ = cmd.Process.Kill(); <-done }
		t.Cleanup(stop)
		if _, err := sqsClient().SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl:    aws.String(onboarding),
			MessageBody: aws.String(fmt.Sprintf(`{"tenant_id":"tenant-%d","tenant_tier":"premium","release_version":"0.0"}`, i+1)),
		}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for len(logs.lines("message", "tenant change pushed")) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the compose worker (%s) applied nothing:\n%s", variant[0], tail(logs.String(), 4000))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if strings.Contains(logs.String(), workerToken) {
			t.Fatal("the worker printed its token")
		}
		stop()
	}

	// Again: both scripts are idempotent.
	run("gitea-init.sh")
	if out := run("init.sh"); !strings.Contains(out, "queues and repository ready") {
		t.Fatalf("init.sh, second run: %s", out)
	}
}
