package bench

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/crypto/ssh"

	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
)

// settle is the pause between two single onboardings, so that each finds
// its worker idle (the previous message deleted, its result sent).
const settle = 20 * time.Millisecond

// sizeRun is one repository size under measurement: its git server, its
// worker and its queue.
type sizeRun struct {
	res   SizeResult
	dir   string
	srv   *gitserver.Server
	w     *worker
	queue string
	// signed is a second worker, signing every commit, on its own
	// repository and queues.
	signed      *worker
	signedQueue string
}

// watch reports when the worker's branch moves.
func (s *sizeRun) watch() refWatcher { return refWatcher{dir: s.srv.RepoPath("worker.git")} }

// watchSigned reports when the signing worker's branch moves.
func (s *sizeRun) watchSigned() refWatcher { return refWatcher{dir: s.srv.RepoPath("signed.git")} }

func (s *sizeRun) close() {
	for _, w := range []*worker{s.w, s.signed} {
		if w != nil {
			w.stop()
		}
	}
	if s.srv != nil {
		_ = s.srv.Close()
	}
	_ = os.RemoveAll(s.dir)
}

// Run measures every size in opts and returns the results. The sizes are
// measured side by side, interleaved: the i-th floor commit, onboarding and
// reference run of every size follow each other, so that the machine's
// drift over the minutes a run takes (large on a shared virtual machine)
// weighs on every size alike and the ratios between sizes mean something.
func Run(ctx context.Context, opts Options, progress io.Writer) ([]SizeResult, error) {
	api := fauxqs.Client(opts.SQSEndpint)
	var runs []*sizeRun
	defer func() {
		for _, r := range runs {
			r.close()
		}
	}()
	results := func() []SizeResult {
		var out []SizeResult
		for _, r := range runs {
			out = append(out, r.res)
		}
		return out
	}
	for _, n := range opts.Sizes {
		fmt.Fprintf(progress, "bench: seeding %d tenants, starting its worker\n", n)
		r, err := setupSize(ctx, opts, api, n)
		if r != nil {
			runs = append(runs, r)
		}
		if err != nil {
			return nil, fmt.Errorf("%d tenants: %w", n, err)
		}
	}

	fmt.Fprintf(progress, "bench: floor, %d commits per size\n", opts.Floor)
	if err := floors(ctx, runs, opts.Floor); err != nil {
		return results(), err
	}
	fmt.Fprintf(progress, "bench: %d single onboardings per size\n", opts.Onboard)
	if err := onboardings(ctx, api, runs, opts.Onboard); err != nil {
		return results(), err
	}
	fmt.Fprintf(progress, "bench: intent check, %d onboardings per size\n", max(opts.Onboard, 20))
	if err := intentCosts(ctx, runs, max(opts.Onboard, 20)); err != nil {
		return results(), err
	}
	if opts.RefScript != "" && opts.Reference > 0 {
		fmt.Fprintf(progress, "bench: reference steps, %d per size\n", opts.Reference)
		if err := references(opts, runs); err != nil {
			return results(), err
		}
	}
	for _, r := range runs {
		if r.res.Tenants == opts.BacklogAt && opts.Backlog > 0 {
			fmt.Fprintf(progress, "bench: backlog of %d at %d tenants\n", opts.Backlog, r.res.Tenants)
			if err := backlog(ctx, api, r, opts.Backlog); err != nil {
				return results(), err
			}
		}
		r.res.PeakRSSMB = peakRSS(r.w.cmd.Process.Pid)
	}
	return results(), nil
}

func setupSize(ctx context.Context, opts Options, api *sqs.Client, n int) (*sizeRun, error) {
	dir, err := os.MkdirTemp(opts.WorkDir, fmt.Sprintf("size-%d-", n))
	if err != nil {
		return nil, err
	}
	r := &sizeRun{res: SizeResult{Tenants: n}, dir: dir}
	if r.srv, err = gitserver.Start(dir+"/git", "127.0.0.1:0", ""); err != nil {
		return r, err
	}
	for _, name := range []string{"worker.git", "signed.git", "floor.git", "reference.git"} {
		if err := seedRepo(r.srv, name, n); err != nil {
			return r, fmt.Errorf("seed %s: %w", name, err)
		}
	}
	queues := func() ([]string, error) {
		var qs []string
		for _, kind := range []string{"onboarding", "offboarding", "deployment"} {
			q, _, err := fauxqs.CreateQueue(ctx, api, fmt.Sprintf("bench-%d-%d-%s", n, time.Now().UnixNano()%1e9, kind), fauxqs.QueueOptions{})
			if err != nil {
				return nil, err
			}
			qs = append(qs, q)
		}
		return qs, nil
	}
	plain, err := queues()
	if err != nil {
		return r, err
	}
	r.queue = plain[0]
	if r.w, err = startWorker(opts.Binary, r.srv.RepoURL("worker.git"), opts.SQSEndpint, plain); err != nil {
		return r, err
	}
	signed, err := queues()
	if err != nil {
		return r, err
	}
	r.signedQueue = signed[0]
	keyFile, err := writeSigningKey(dir)
	if err != nil {
		return r, err
	}
	if r.signed, err = startWorker(opts.Binary, r.srv.RepoURL("signed.git"), opts.SQSEndpint, signed, "GIT_SIGNING_KEY_FILE="+keyFile); err != nil {
		return r, err
	}
	return r, nil
}

// writeSigningKey writes a new ed25519 OpenSSH key for the signing worker.
func writeSigningKey(dir string) (string, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, "bench")
	if err != nil {
		return "", err
	}
	name := filepath.Join(dir, "signing-key")
	return name, os.WriteFile(name, pem.EncodeToMemory(block), 0o600)
}

// floors measures the floor at every size, interleaved.
func floors(ctx context.Context, runs []*sizeRun, n int) error {
	var fs []*floorRepo
	for _, r := range runs {
		f, err := openFloor(ctx, r.srv.RepoURL("floor.git"), "")
		if err != nil {
			return fmt.Errorf("floor at %d tenants: %w", r.res.Tenants, err)
		}
		fs = append(fs, f)
	}
	ds := make([][]time.Duration, len(runs))
	for i := range n {
		for j, f := range fs {
			d, err := f.commit(ctx, i)
			if err != nil {
				return fmt.Errorf("floor at %d tenants: %w", runs[j].res.Tenants, err)
			}
			ds[j] = append(ds[j], d)
		}
	}
	for j, r := range runs {
		r.res.Floor = stats(ds[j])
	}
	return nil
}

// onboardings sends n single onboardings to the worker of every size, and
// as many to its signing twin, interleaved (which of the two goes first
// alternates), each timed from SendMessage to the branch moving.
func onboardings(ctx context.Context, api *sqs.Client, runs []*sizeRun, n int) error {
	ds := make([][]time.Duration, len(runs))
	signed := make([][]time.Duration, len(runs))
	one := func(i int, r *sizeRun, queue string, watch refWatcher, w *worker) (time.Duration, error) {
		old := watch.head()
		body := fmt.Sprintf(`{"tenant_id":"bench-%d","tenant_tier":"premium","release_version":"0.0"}`, i)
		start := time.Now()
		if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(body)}); err != nil {
			return 0, err
		}
		if _, err := watch.waitMove(old, 60*time.Second); err != nil {
			return 0, fmt.Errorf("onboarding %d at %d tenants: %w\n%s", i, r.res.Tenants, err, w.tail())
		}
		d := time.Since(start)
		time.Sleep(settle)
		return d, nil
	}
	for i := range n {
		for j, r := range runs {
			for k := range 2 {
				if (i+k)%2 == 0 {
					d, err := one(i, r, r.queue, r.watch(), r.w)
					if err != nil {
						return err
					}
					ds[j] = append(ds[j], d)
				} else {
					d, err := one(i, r, r.signedQueue, r.watchSigned(), r.signed)
					if err != nil {
						return err
					}
					signed[j] = append(signed[j], d)
				}
			}
		}
	}
	for j, r := range runs {
		r.res.Worker = stats(ds[j])
		r.res.WorkerOverFloor = r.res.Worker.P50 / r.res.Floor.P50
		r.res.Signed = stats(signed[j])
		r.res.SignedOverWorker = r.res.Signed.P50 / r.res.Worker.P50
	}
	return nil
}

// references times the reference's steps at every size, interleaved.
func references(opts Options, runs []*sizeRun) error {
	ds := make([][]time.Duration, len(runs))
	for i := range opts.Reference {
		for j, r := range runs {
			d, err := reference(opts.RefScript, r.srv.RepoURL("reference.git"), r.dir, i)
			if err != nil {
				return err
			}
			ds[j] = append(ds[j], d)
		}
	}
	for j, r := range runs {
		r.res.Reference = stats(ds[j])
		r.res.ReferenceRatio = r.res.Reference.P50 / r.res.Worker.P50
	}
	return nil
}

// backlog sends n onboardings at once and measures how fast they are
// applied.
func backlog(ctx context.Context, api *sqs.Client, r *sizeRun, n int) error {
	before := r.w.pushed()
	start := time.Now()
	for i := 0; i < n; i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j := i; j < min(i+10, n); j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)),
				MessageBody: aws.String(fmt.Sprintf(`{"tenant_id":"backlog-%d","tenant_tier":"basic","release_version":"0.0"}`, j))})
		}
		if _, err := api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(r.queue), Entries: entries}); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(10 * time.Minute)
	for r.w.pushed()-before < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("backlog: %d of %d applied in 10 minutes", r.w.pushed()-before, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.res.Throughput = float64(n) / time.Since(start).Seconds()
	if r.res.Reference.P50 > 0 {
		r.res.ThroughputRatio = r.res.Reference.P50 / (1000 / r.res.Throughput)
	}
	return nil
}

// worker is the tenant-worker binary running as a child process.
type worker struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	// scanned is how much of logs mark has read; marks holds when each log
	// line whose message markedMessages names arrived, by message.
	scanned int
	marks   map[string][]time.Time
	stopped sync.Once
}

func (w *worker) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.logs.Write(p)
	w.mark(time.Now())
	return n, err
}

// The worker's log messages whose times the bench keeps: the outcome of
// each message (internal/worker), and the start of each consumer.
const (
	logApplied     = "tenant change pushed"
	logRecorded    = "already carried out; recorded in the ledger"
	logNothing     = "already carried out; nothing to push"
	logRedelivered = "already applied by an earlier delivery of this message"
	logStale       = "stale: messages sent after it undo what it asks; recorded, nothing to change"
	logHeld        = "held in the ledger until a message sent before it arrives"
	logRejected    = "message rejected"
	logConsuming   = "consuming queue"
)

// outcomes are the log messages that end a message's handling (a failure
// that SQS redelivers is not one).
var outcomes = []string{logApplied, logRecorded, logNothing, logRedelivered, logStale, logHeld, logRejected}

var markedMessages = map[string]bool{logConsuming: true}

func init() {
	for _, m := range outcomes {
		markedMessages[m] = true
	}
}

// mark notes the arrival time of every complete log line not read yet
// whose message is one of markedMessages (a write may end mid-line).
func (w *worker) mark(now time.Time) {
	b := w.logs.Bytes()
	for {
		i := bytes.IndexByte(b[w.scanned:], '\n')
		if i < 0 {
			return
		}
		line := b[w.scanned : w.scanned+i]
		w.scanned += i + 1
		if m := logMessage(line); markedMessages[m] {
			if w.marks == nil {
				w.marks = map[string][]time.Time{}
			}
			w.marks[m] = append(w.marks[m], now)
		}
	}
}

// logMessage is the "message" field of a JSON log line (zerolog writes it
// last), or "".
func logMessage(line []byte) string {
	const key = `"message":"`
	i := bytes.LastIndex(line, []byte(key))
	if i < 0 {
		return ""
	}
	rest := line[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// count is how many log lines with one of the messages ms arrived so far
// (each one of markedMessages).
func (w *worker) count(ms ...string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range ms {
		n += len(w.marks[m])
	}
	return n
}

// times is when each log line with message m arrived, in order.
func (w *worker) times(m string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.marks[m])
}

func (w *worker) pushed() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.logs.String(), `"message":"tenant change pushed"`)
}

func (w *worker) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.logs.String()
	return s[max(0, len(s)-2000):]
}

// stop stops the worker, once however often it is called, and appends its
// log to BENCH_WORKER_LOG when that is set.
func (w *worker) stop() { w.stopped.Do(w.stopOnce) }

func (w *worker) stopOnce() {
	_ = w.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = w.cmd.Process.Kill()
	}
	if name := os.Getenv("BENCH_WORKER_LOG"); name != "" {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			w.mu.Lock()
			_, _ = f.Write(w.logs.Bytes())
			w.mu.Unlock()
			_ = f.Close()
		}
	}
}

func startWorker(binary, repoURL, endpoint string, queues []string, env ...string) (*worker, error) {
	w := &worker{}
	w.cmd = exec.Command(binary, "run")
	w.cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_ENDPOINT_URL_SQS=" + endpoint,
		"ONBOARDING_QUEUE=" + queues[0], "OFFBOARDING_QUEUE=" + queues[1], "DEPLOYMENT_QUEUE=" + queues[2],
		"GIT_REPO_URL=" + repoURL, "HTTP_ADDR=127.0.0.1:0", "SQS_WAIT_TIME=20s",
	}
	w.cmd.Env = append(w.cmd.Env, env...)
	// BENCH_WORKER_ENV adds settings to every worker (such as MAX_BATCH=200).
	w.cmd.Env = append(w.cmd.Env, strings.Fields(os.Getenv("BENCH_WORKER_ENV"))...)
	if os.Getenv("BENCH_WORKER_LOG") != "" {
		// The per-batch step durations are logged at debug level; stop
		// appends the log to the file BENCH_WORKER_LOG names.
		w.cmd.Env = append(w.cmd.Env, "LOG_LEVEL=debug")
	}
	w.cmd.Stdout, w.cmd.Stderr = w, w
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		w.mu.Lock()
		ready := strings.Count(w.logs.String(), `"message":"consuming queue"`) == 3
		w.mu.Unlock()
		if ready {
			return w, nil
		}
		if time.Now().After(deadline) {
			w.stop()
			return nil, fmt.Errorf("worker did not start:\n%s", w.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WriteJSON writes the results under dir, named by the time (ledger nil:
// the ledger at volume was not measured).
func WriteJSON(dir string, results []SizeResult, onGitea []GiteaResult, live []LiveResult, ledger *LedgerResult) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s/%s.json", dir, time.Now().UTC().Format("20060102T150405Z"))
	b, err := json.MarshalIndent(map[string]any{"time": time.Now().UTC(), "results": results, "gitea": onGitea, "time_to_live": live, "ledger": ledger}, "", "  ")
	if err != nil {
		return "", err
	}
	return name, os.WriteFile(name, append(b, '\n'), 0o644)
}

// Table renders the results for a terminal and the README.
func Table(results []SizeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| tenants | worker p50 | p95 | p99 | floor p50 | floor p99 | p50/floor | p99/floor | reference p50 | reference/worker | backlog /s | RSS MB | signed p50 | signed/worker | intent p50 | intent/p50 |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		backlog := "-"
		if r.Throughput > 0 {
			backlog = fmt.Sprintf("%.0f (%.0fx ref)", r.Throughput, r.ThroughputRatio)
		}
		fmt.Fprintf(&b, "| %d | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.2f | %.2f | %.0f ms | %.1fx | %s | %.0f | %.0f ms | %.3f | %.1f ms | %.1f%% |\n",
			r.Tenants, r.Worker.P50, r.Worker.P95, r.Worker.P99, r.Floor.P50, r.Floor.P99, r.WorkerOverFloor,
			r.Worker.P99/max(r.Floor.P99, 0.001), r.Reference.P50, r.ReferenceRatio, backlog, r.PeakRSSMB,
			r.Signed.P50, r.SignedOverWorker, r.Intent.P50, 100*r.IntentShare)
	}
	return b.String()
}
