package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// workerBinary builds cmd/tenant-worker once per test run.
func workerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tenant-worker-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "tenant-worker")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/tenant-worker").CombinedOutput()
		if err != nil {
			buildErr = err
			binPath = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build tenant-worker: %v\n%s", buildErr, binPath)
	}
	return binPath
}

// process is the worker binary running as a child process.
type process struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan error
}

// startBinary runs `tenant-worker run` configured only through the
// environment, as a Deployment would; its logs become h.logs.
func (h *harness) startBinary(extraEnv ...string) *process {
	h.t.Helper()
	p := h.spawn(nil, extraEnv...)
	h.logs = p.logs
	return p
}

// spawn starts a worker process whose logs also go to shared (if set), and
// waits until it consumes its queues.
func (h *harness) spawn(shared *syncBuffer, extraEnv ...string) *process {
	h.t.Helper()
	return h.spawnIn(h.cloneDir, shared, extraEnv...)
}

// spawnIn is spawn with the clone kept in cloneDir ("" keeps it in memory).
func (h *harness) spawnIn(cloneDir string, shared *syncBuffer, extraEnv ...string) *process {
	h.t.Helper()
	p, err := h.launch(cloneDir, shared, extraEnv...)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// launch starts a worker process as spawnIn does and reports a failure to
// start as an error, so that goroutines other than the test's may call it.
func (h *harness) launch(cloneDir string, shared *syncBuffer, extraEnv ...string) (*process, error) {
	return h.launchProcess(false, cloneDir, shared, extraEnv...)
}

// startUnready starts the worker binary as startBinary does, without
// waiting for it to consume its queues (it may never: a test of a worker
// that cannot open its repository).
func (h *harness) startUnready(extraEnv ...string) *process {
	h.t.Helper()
	p, err := h.launchProcess(true, h.cloneDir, nil, extraEnv...)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// launchProcess is launch, waiting for the worker to consume its queues
// unless noWait.
func (h *harness) launchProcess(noWait bool, cloneDir string, shared *syncBuffer, extraEnv ...string) (*process, error) {
	tokenFile := filepath.Join(h.t.TempDir(), "git-token")
	if err := os.WriteFile(tokenFile, []byte(h.token+"\n"), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(workerBinary(h.t), "run")
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "LOG_LEVEL=debug",
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL_SQS=" + sqsEndpoint,
		"ONBOARDING_QUEUE=" + queueName(h.q.onboarding),
		"OFFBOARDING_QUEUE=" + h.q.offboarding,
		"DEPLOYMENT_QUEUE=" + h.q.deployment,
		"GIT_REPO_URL=" + h.git.RepoURL(repoName),
		"GIT_TOKEN_FILE=" + tokenFile,
		"GIT_CLONE_DIR=" + cloneDir,
		"HTTP_ADDR=127.0.0.1:0",
		"SQS_WAIT_TIME=1s", "RETRY_DELAY=1s", "MAX_RETRY_DELAY=2s", "SHUTDOWN_GRACE=5s",
	}, extraEnv...)
	p := &process{cmd: cmd, logs: &syncBuffer{}, done: make(chan error, 1)}
	var out io.Writer = p.logs
	if shared != nil {
		out = io.MultiWriter(p.logs, shared)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.done <- cmd.Wait() }()
	h.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	if noWait {
		return p, nil
	}
	deadline := time.Now().Add(time.Minute) // a safety net, as the harness's outcome
	for len(p.logs.lines("message", "consuming queue")) < 3 {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("worker did not start:\n%s", p.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p, nil
}

// stopped waits for the process to exit and returns its error.
func (p *process) stopped(timeout time.Duration) (error, bool) {
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err, true
	case <-time.After(timeout):
		return nil, false
	}
}

func TestBinaryConfiguredByEnvironment(t *testing.T) {
	h := newHarness(t, true)
	p := h.startBinary()
	line := h.outcome(h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`))
	if line["message"] != "tenant change pushed" || line["commit"] != h.head() {
		t.Fatalf("outcome: %v", line)
	}
	for _, field := range []string{"message_id", "queue", "tenant", "tier", "commit", "time", "level"} {
		if _, ok := line[field]; !ok {
			t.Errorf("log line lacks %q: %v", field, line)
		}
	}
	// SIGTERM: stop receiving, finish, exit 0.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err, ok := p.stopped(15 * time.Second); !ok || err != nil {
		t.Fatalf("exit after SIGTERM: %v (exited: %v)\n%s", err, ok, p.logs.String())
	}
	if len(p.logs.lines("message", "stopped")) != 1 {
		t.Fatalf("no clean stop logged:\n%s", p.logs.String())
	}
	if strings.Contains(p.logs.String(), token) {
		t.Fatal("the binary printed the git token")
	}
	assertNoToken(t, h)
}

func TestBinaryRefusesBadSettings(t *testing.T) {
	cmd := exec.Command(workerBinary(t), "run")
	cmd.Env = []string{"GIT_REPO_URL=https://admin:" + token + "@gitea/x.git", "SQS_MAX_MESSAGES=0"}
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 2 {
		t.Fatalf("exit code %d, want 2\n%s", code, out)
	}
	if !strings.Contains(string(out), "must not hold credentials") || !strings.Contains(string(out), "SQS_MAX_MESSAGES") {
		t.Fatalf("output:\n%s", out)
	}
	if strings.Contains(string(out), token) {
		t.Fatal("error output shows the token from the URL")
	}
}

func TestShutdownReleasesWhatItCannotFinish(t *testing.T) {
	h := newHarness(t, true)
	p := h.startBinary("SHUTDOWN_GRACE=1s", "SQS_VISIBILITY_TIMEOUT=60s")
	stall := make(chan struct{})
	defer close(stall)
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") {
			<-stall // the push hangs until the test ends
		}
		return true
	})
	id := h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`)
	h.waitFor("the push to start", 10*time.Second, func() bool {
		return h.queueCount(h.q.onboarding) == 1 && len(p.logs.lines("message", "repository ready")) == 1 && strings.Contains(p.logs.String(), "")
	})
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err, ok := p.stopped(10 * time.Second); !ok || err != nil {
		t.Fatalf("exit after SIGTERM: %v (exited: %v)\n%s", err, ok, p.logs.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %s with a 1s grace", d)
	}
	// The message is visible again at once, not after its 60s timeout.
	out, err := h.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(h.q.onboarding), WaitTimeSeconds: 2,
	})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageId) != id {
		t.Fatalf("message not released on shutdown: %v %v\n%s", out, err, p.logs.String())
	}
}

// TestStopStrandsNothing: SIGTERM reaches a worker whose long poll on the
// deployment queue is in flight, and a message is sent once the worker has
// begun to shut down. SQS hands it to that poll; the worker must make it
// visible again at once rather than work on it or leave it invisible for
// its 120 s visibility timeout. An SQS tap between the worker and the
// server says when the poll is in flight and proves it brought the message.
func TestStopStrandsNothing(t *testing.T) {
	h := newHarness(t, true)
	tap := newReceiveTap(t, h.q.deployment)
	p := h.startBinary("SQS_WAIT_TIME=20s", "SQS_VISIBILITY_TIMEOUT=120s", "SHUTDOWN_GRACE=30s",
		"AWS_ENDPOINT_URL_SQS="+tap.URL)
	select {
	case <-tap.polling:
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker never long-polled the deployment queue\n%s", p.logs.String())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the worker to begin its shutdown", 20*time.Second, func() bool {
		return strings.Contains(p.logs.String(), "shutting down")
	})
	id := h.send(h.q.deployment, `{"tenant_tier":"basic","release_version":"1.0"}`)
	if err, ok := p.stopped(40 * time.Second); !ok || err != nil {
		t.Fatalf("exit after SIGTERM: %v (exited: %v)\n%s", err, ok, p.logs.String())
	}
	if !tap.delivered(id) {
		t.Fatalf("planned fault did not occur: SQS never handed %s to the worker's poll\n%s", id, p.logs.String())
	}
	out, err := h.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(h.q.deployment), WaitTimeSeconds: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageId) != id {
		t.Fatalf("the message handed to the stopping worker is not visible again: %v %v\n%s", out, err, p.logs.String())
	}
	if n := out.Messages[0].Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]; n != "2" {
		t.Fatalf("receive count %s, want 2 (the worker's poll, then this one)", n)
	}
	if strings.Contains(p.logs.String(), `"message_id":"`+id+`"`) {
		t.Fatalf("the worker worked on a message after SIGTERM\n%s", p.logs.String())
	}
}

// receiveTap is a reverse proxy in front of SQS that watches one queue's
// long polls: polling is closed when the first is in flight, and delivered
// says whether a poll's answer carried a given message id.
type receiveTap struct {
	*httptest.Server
	polling chan struct{}
	once    sync.Once
	mu      sync.Mutex
	answers []byte
}

func newReceiveTap(t *testing.T, queueURL string) *receiveTap {
	target, err := url.Parse(sqsEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	tap := &receiveTap{polling: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	tap.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") != "AmazonSQS.ReceiveMessage" {
			proxy.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var in struct {
			QueueUrl        string
			WaitTimeSeconds int
		}
		_ = json.Unmarshal(body, &in)
		if !strings.HasSuffix(in.QueueUrl, path.Base(queueURL)) || in.WaitTimeSeconds == 0 {
			proxy.ServeHTTP(w, r)
			return
		}
		tap.once.Do(func() { close(tap.polling) })
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		tap.mu.Lock()
		tap.answers = append(tap.answers, rec.Body.Bytes()...)
		tap.mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(tap.Close)
	return tap
}

func (t *receiveTap) delivered(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Contains(t.answers, []byte(`"`+id+`"`))
}
