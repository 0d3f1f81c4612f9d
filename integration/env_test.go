// Package integration runs the worker against real servers on loopback:
// fauxqs (an SQS emulator from npm, or TEST_SQS_ENDPOINT such as LocalStack)
// and git's own smart-HTTP server.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/tenant-worker/tenant-worker/internal/app"
	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/logging"
	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitea"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

// token is the git token of every test server; no output may contain it.
const token = "tok-7f3a9c1e-never-print-me"

var sqsEndpoint string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		sqsEndpoint = os.Getenv("TEST_SQS_ENDPOINT")
		if sqsEndpoint == "" {
			srv, err := fauxqs.Start(0)
			if err != nil {
				fmt.Fprintln(os.Stderr, "integration tests need fauxqs:", err)
				return 1
			}
			defer srv.Close()
			sqsEndpoint = srv.Endpoint
		}
		return m.Run()
	}())
}

func sqsClient() *sqs.Client { return fauxqs.Client(sqsEndpoint) }

var queueSeq atomic.Int64

// queues are one test's three queues and their dead-letter queues.
type queues struct {
	onboarding, offboarding, deployment string // URLs
	dlq                                 map[string]string
}

// createQueues makes fresh queues, with dead-letter queues (redrive after 5
// receives) when withDLQ.
func createQueues(t *testing.T, api *sqs.Client, withDLQ bool) queues {
	maxReceives := 0
	if withDLQ {
		maxReceives = 5
	}
	return createQueuesOpts(t, api, fauxqs.QueueOptions{MaxReceiveCount: maxReceives})
}

// createQueuesOpts makes fresh queues shaped by o.
func createQueuesOpts(t *testing.T, api *sqs.Client, o fauxqs.QueueOptions) queues {
	t.Helper()
	prefix := fmt.Sprintf("t%d-%d", time.Now().UnixNano()%1e9, queueSeq.Add(1))
	q := queues{dlq: map[string]string{}}
	for _, kind := range []string{"onboarding", "offboarding", "deployment"} {
		url, dlq, err := fauxqs.CreateQueue(context.Background(), api, prefix+"-"+kind, o)
		if err != nil {
			t.Fatal(err)
		}
		if dlq != "" {
			q.dlq[kind] = dlq
		}
		switch kind {
		case "onboarding":
			q.onboarding = url
		case "offboarding":
			q.offboarding = url
		default:
			q.deployment = url
		}
	}
	return q
}

// syncBuffer collects the worker's log lines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// naming returns the log lines, as written, that contain text anywhere.
func (s *syncBuffer) naming(text string) []string {
	var out []string
	for _, l := range strings.Split(s.String(), "\n") {
		if strings.Contains(l, text) {
			out = append(out, l)
		}
	}
	return out
}

// lines returns the JSON log lines with field key equal to value.
func (s *syncBuffer) lines(key, value string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(s.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && fmt.Sprint(m[key]) == value {
			out = append(out, m)
		}
	}
	return out
}

// harness is one worker with its own git server and queues.
type harness struct {
	t        *testing.T
	api      *sqs.Client
	git      gitServer
	token    string // the git token the worker is given
	q        queues
	logs     *syncBuffer
	httpAddr string
	cloneDir string
	stop     func()
	// tune, if set, adjusts the worker's settings before start.
	tune func(*config.Options)
	// cliEnv is added to the environment of every cli call.
	cliEnv []string
	// onStall, if set, reports what the workers were doing when a wait
	// for their outcomes timed out.
	onStall func()
}

const repoName = "gitops.git"

// gitServer is what the tests need of a git server: git's own smart-HTTP
// server (gitserver) or real Gitea. Both put a hook before every request.
type gitServer interface {
	RepoURL(name string) string
	RepoPath(name string) string
	Output(name string, args ...string) (string, error)
	WriteFile(name, branch, path, content, msg string) error
	SetHook(h gitserver.Hook)
	Rename(name, newName string) error
	CreateRepo(name, branch string, seed fs.FS) (string, error)
}

// server names a kind of git server for tests that run on each.
type server string

const (
	httpBackend server = "http-backend"
	giteaServer server = "gitea"
)

// servers are the git servers the end-to-end flows run against.
var servers = []server{httpBackend, giteaServer}

// onEachServer runs test as a subtest once per git server.
func onEachServer(t *testing.T, test func(t *testing.T, s server)) {
	for _, s := range servers {
		t.Run(string(s), func(t *testing.T) { test(t, s) })
	}
}

func newHarness(t *testing.T, withDLQ bool) *harness {
	return newHarnessOn(t, httpBackend, withDLQ)
}

// newHarnessOn makes a harness whose repository is on the given server.
func newHarnessOn(t *testing.T, s server, withDLQ bool) *harness {
	t.Helper()
	h := &harness{t: t, api: sqsClient(), logs: &syncBuffer{}, cloneDir: filepath.Join(t.TempDir(), "clone")}
	switch s {
	case giteaServer:
		g, err := gitea.Start(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		h.git, h.token = g, g.Token
	default:
		srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", token)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		h.git, h.token = srv, token
	}
	if _, err := h.git.CreateRepo(repoName, "main", templates.FS); err != nil {
		t.Fatal(err)
	}
	h.q = createQueues(t, h.api, withDLQ)
	return h
}

// httpBackend is the harness's server as git's smart-HTTP server, for tests
// that need what only it offers (a token change, acting after git answered).
func (h *harness) httpBackend() *gitserver.Server {
	h.t.Helper()
	srv, ok := h.git.(*gitserver.Server)
	if !ok {
		h.t.Fatal("this test needs git's smart-HTTP server")
	}
	return srv
}

// gitea is the harness's server as Gitea.
func (h *harness) gitea() *gitea.Server {
	h.t.Helper()
	g, ok := h.git.(*gitea.Server)
	if !ok {
		h.t.Fatal("this test needs Gitea")
	}
	return g
}

// start runs the worker in this process until the test ends, and waits
// until it is ready.
func (h *harness) start() {
	h.t.Helper()
	h.launchInProcess()
	h.waitFor("worker ready", time.Minute, func() bool { // a safety net, as outcome's
		return h.httpGet("/readyz") == "ready\n"
	})
}

// launchInProcess runs the worker in this process until the test ends.
func (h *harness) launchInProcess() {
	h.t.Helper()
	opts := config.Default()
	opts.OnboardingQueue, opts.OffboardingQueue, opts.DeploymentQueue = h.q.onboarding, h.q.offboarding, h.q.deployment
	opts.GitRepoURL = h.git.RepoURL(repoName)
	opts.GitCloneDir = h.cloneDir
	opts.WaitTime = time.Second
	opts.RetryDelay = time.Second
	opts.MaxRetryDelay = 2 * time.Second
	opts.VisibilityTimeout = 30 * time.Second
	opts.ShutdownGrace = 5 * time.Second
	opts.QueueStatsEvery = 250 * time.Millisecond
	if h.tune != nil {
		h.tune(&opts)
	}
	if err := opts.Validate(); err != nil {
		h.t.Fatal(err)
	}
	log, err := logging.New(h.logs, "debug", "json", h.token)
	if err != nil {
		h.t.Fatal(err)
	}
	// The archives' port, when the worker publishes (ARTIFACT_URL), is
	// taken before the worker starts, so that a failure to take it is the
	// test's. Without ARTIFACT_URL the worker serves none: the default
	// address (:8081), the same for every test, is left alone.
	var artifactLn net.Listener
	if opts.ArtifactURL != "" {
		if artifactLn, err = net.Listen("tcp", opts.ArtifactAddr); err != nil {
			h.t.Fatalf("ARTIFACT_ADDR: %v", err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	h.httpAddr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, app.Config{Options: opts, Token: h.token, Logger: log, Listener: ln, ArtifactListener: artifactLn, SQS: h.api})
	}()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					h.t.Errorf("worker: %v", err)
				}
			case <-time.After(30 * time.Second):
				h.t.Error("worker did not stop within 30s")
			}
		})
	}
	h.t.Cleanup(h.stop)
}

func (h *harness) httpGet(path string) string {
	resp, err := http.Get("http://" + h.httpAddr + path)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// send puts body on a queue and returns the message id.
func (h *harness) send(queueURL, body string) string {
	h.t.Helper()
	out, err := h.api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(body)})
	if err != nil {
		h.t.Fatal(err)
	}
	return aws.ToString(out.MessageId)
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func (h *harness) waitFor(what string, timeout time.Duration, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out after %s waiting for %s\nworker log:\n%s", timeout, what, tail(h.logs.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// finished reports whether the worker logged a final outcome for message id.
func (h *harness) finished(id string) bool {
	for _, l := range h.logs.lines("message_id", id) {
		switch l["message"] {
		case "tenant change pushed", "already carried out; nothing to push", "already carried out; recorded in the ledger",
			"already applied by an earlier delivery of this message", staleLine, "message rejected":
			return true
		}
	}
	return false
}

// inFlight reports whether the worker has message id in hand (its status
// API lists it in flight).
func (h *harness) inFlight(id string) bool { return inFlightAt(h.httpAddr, id) }

// inFlightAt is inFlight for the worker serving addr.
func inFlightAt(addr, id string) bool { return slices.Contains(inHandAt(addr), id) }

// staleLine is the worker's log message for a stale message.
const staleLine = "stale: messages sent after it undo what it asks; recorded, nothing to change"

const heldLine = "held in the ledger until a message sent before it arrives"

// outcome waits for the worker's log line about message id and returns it.
// The wait is a safety net, not a speed target: with the tests side by
// side on 2 cores, a lost race's second push to Gitea took over 20 s
// (2026-12-07), so it is a minute.
func (h *harness) outcome(id string) map[string]any {
	h.t.Helper()
	var line map[string]any
	h.waitFor("outcome of message "+id, time.Minute, func() bool {
		for _, l := range h.logs.lines("message_id", id) {
			switch l["message"] {
			case "tenant change pushed", "already carried out; nothing to push", "already carried out; recorded in the ledger",
				"already applied by an earlier delivery of this message", staleLine, "message rejected", heldLine:
				line = l
				return true
			}
		}
		return false
	})
	return line
}

// git runs a git command against the bare repository.
func (h *harness) gitOut(args ...string) string {
	h.t.Helper()
	out, err := h.git.Output(repoName, args...)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// file returns a file on the remote branch, or "<absent>".
func (h *harness) file(path string) string {
	out, err := h.git.Output(repoName, "show", "main:"+templates.Root+"/"+path)
	if err != nil {
		return "<absent>"
	}
	return out
}

func (h *harness) head() string { return strings.TrimSpace(h.gitOut("rev-parse", "main")) }

// queueCount returns visible plus in-flight plus delayed messages of a queue.
func (h *harness) queueCount(url string) int {
	h.t.Helper()
	out, err := h.api.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	n := 0
	for _, k := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
		var v int
		fmt.Sscan(out.Attributes[k], &v)
		n += v
	}
	return n
}

// deadLetters drains a dead-letter queue: body to reason.
func (h *harness) deadLetters(url string, want int) map[string]types.Message {
	h.t.Helper()
	got := map[string]types.Message{}
	copies := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < want {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out after 30s waiting for %d dead letters: %s\nworker log:\n%s",
				want, h.dlqReport(url, copies), tail(h.logs.String(), 4000))
		}
		h.takeDead(url, 1, got, copies)
	}
	return got
}

// takeDead is one receive from a dead-letter queue, waiting up to wait
// seconds: each message it brings is kept in got and counted in copies,
// by source message id, and deleted. It reports how many it brought. A
// message handed to a receive whose answer never arrives is invisible for
// the receive's visibility timeout: that is kept short, so such a loss on
// the test's side delays the read, not fails it.
func (h *harness) takeDead(url string, wait int32, got map[string]types.Message, copies map[string]int) int {
	h.t.Helper()
	out, err := h.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: wait, VisibilityTimeout: 2,
		MessageAttributeNames: []string{"All"},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, m := range out.Messages {
		id := aws.ToString(m.MessageAttributes["source_message_id"].StringValue)
		got[id] = m
		copies[id]++
		_, _ = h.api.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
	}
	return len(out.Messages)
}

// dlqReport says what a read of a dead-letter queue found (copies per
// source message id) and what the queue holds now.
func (h *harness) dlqReport(url string, copies map[string]int) string {
	a, err := h.api.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	now := fmt.Sprint(err)
	if err == nil {
		now = fmt.Sprintf("visible %s, in flight %s, delayed %s", a.Attributes["ApproximateNumberOfMessages"],
			a.Attributes["ApproximateNumberOfMessagesNotVisible"], a.Attributes["ApproximateNumberOfMessagesDelayed"])
	}
	return fmt.Sprintf("read %d distinct source ids (copies: %v); the queue now: %s", len(copies), copies, now)
}

// drainDLQ reads everything in a dead-letter queue: source message id to
// reason. It returns once the queue holds nothing, in flight included, so
// that what a receive whose answer was lost took is read once it is
// visible again (takeDead), not missed.
func (h *harness) drainDLQ(url string) map[string]string {
	h.t.Helper()
	got := map[string]types.Message{}
	copies := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	wait := int32(0) // none while receives bring messages
	for {
		if h.takeDead(url, wait, got, copies) > 0 {
			wait = 0
			continue
		}
		if h.queueCount(url) == 0 {
			break
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("a dead-letter queue still holds messages after 30s: %s", h.dlqReport(url, copies))
		}
		wait = 1 // what is in flight comes back within the visibility timeout
	}
	reasons := make(map[string]string, len(got))
	for id, m := range got {
		reasons[id] = aws.ToString(m.MessageAttributes["reason"].StringValue)
	}
	return reasons
}
