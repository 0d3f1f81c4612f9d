package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/tenant-worker/tenant-worker/internal/fauxqs"
	"github.com/tenant-worker/tenant-worker/internal/gitserver"
)

// Run measures every size in opts and returns the results.
func Run(ctx context.Context, opts Options, progress io.Writer) ([]SizeResult, error) {
	api := fauxqs.Client(opts.SQSEndpint)
	var results []SizeResult
	for _, n := range opts.Sizes {
		fmt.Fprintf(progress, "bench: %d tenants\n", n)
		r, err := runSize(ctx, opts, api, n, progress)
		if err != nil {
			return results, fmt.Errorf("%d tenants: %w", n, err)
		}
		results = append(results, r)
	}
	return results, nil
}

func runSize(ctx context.Context, opts Options, api *sqs.Client, n int, progress io.Writer) (SizeResult, error) {
	res := SizeResult{Tenants: n}
	dir, err := os.MkdirTemp(opts.WorkDir, fmt.Sprintf("size-%d-", n))
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	srv, err := gitserver.Start(dir+"/git", "127.0.0.1:0", "")
	if err != nil {
		return res, err
	}
	defer srv.Close()
	for _, name := range []string{"worker.git", "floor.git", "reference.git"} {
		if err := seedRepo(srv, name, n); err != nil {
			return res, fmt.Errorf("seed %s: %w", name, err)
		}
	}

	if res.Floor, err = floor(ctx, srv.RepoURL("floor.git"), opts.Floor); err != nil {
		return res, fmt.Errorf("floor: %w", err)
	}
	fmt.Fprintf(progress, "  floor p50 %.1f ms\n", res.Floor.P50)

	var queues []string
	for _, kind := range []string{"onboarding", "offboarding", "deployment"} {
		q, _, err := fauxqs.CreateQueue(ctx, api, fmt.Sprintf("bench-%d-%d-%s", n, time.Now().UnixNano()%1e9, kind), fauxqs.QueueOptions{})
		if err != nil {
			return res, err
		}
		queues = append(queues, q)
	}
	queue := queues[0]
	w, err := startWorker(opts.Binary, srv.RepoURL("worker.git"), opts.SQSEndpint, queues)
	if err != nil {
		return res, err
	}
	defer w.stop()

	watch := refWatcher{srv: srv, name: "worker.git"}
	var ds []time.Duration
	for i := 0; i < opts.Onboard; i++ {
		old := watch.head()
		body := fmt.Sprintf(`{"tenant_id":"bench-%d","tenant_tier":"premium","release_version":"0.0"}`, i)
		start := time.Now()
		if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(body)}); err != nil {
			return res, err
		}
		if _, err := watch.waitMove(old, 60*time.Second); err != nil {
			return res, fmt.Errorf("onboarding %d: %w\n%s", i, err, w.tail())
		}
		ds = append(ds, time.Since(start))
	}
	res.Worker = stats(ds)
	res.WorkerOverFloor = res.Worker.P50 / res.Floor.P50
	fmt.Fprintf(progress, "  worker p50 %.1f ms, p99 %.1f ms\n", res.Worker.P50, res.Worker.P99)

	if opts.RefScript != "" && opts.Reference > 0 {
		if res.Reference, err = reference(opts.RefScript, srv.RepoURL("reference.git"), dir, opts.Reference); err != nil {
			return res, err
		}
		res.ReferenceRatio = res.Reference.P50 / res.Worker.P50
		fmt.Fprintf(progress, "  reference p50 %.1f ms\n", res.Reference.P50)
	}

	if n == opts.BacklogAt && opts.Backlog > 0 {
		before := w.pushed()
		start := time.Now()
		for i := 0; i < opts.Backlog; i += 10 {
			var entries []types.SendMessageBatchRequestEntry
			for j := i; j < min(i+10, opts.Backlog); j++ {
				entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)),
					MessageBody: aws.String(fmt.Sprintf(`{"tenant_id":"backlog-%d","tenant_tier":"basic","release_version":"0.0"}`, j))})
			}
			if _, err := api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: entries}); err != nil {
				return res, err
			}
		}
		deadline := time.Now().Add(10 * time.Minute)
		for w.pushed()-before < opts.Backlog {
			if time.Now().After(deadline) {
				return res, fmt.Errorf("backlog: %d of %d applied in 10 minutes", w.pushed()-before, opts.Backlog)
			}
			time.Sleep(10 * time.Millisecond)
		}
		res.Throughput = float64(opts.Backlog) / time.Since(start).Seconds()
		if path := os.Getenv("BENCH_WORKER_LOG"); path != "" {
			w.mu.Lock()
			_ = os.WriteFile(path, w.logs.Bytes(), 0o644)
			w.mu.Unlock()
		}
		if res.Reference.P50 > 0 {
			res.ThroughputRatio = res.Reference.P50 / (1000 / res.Throughput)
		}
		fmt.Fprintf(progress, "  backlog %.1f changes/s\n", res.Throughput)
	}
	res.PeakRSSMB = peakRSS(w.cmd.Process.Pid)
	return res, nil
}

// worker is the tenant-worker binary running as a child process.
type worker struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
}

func (w *worker) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.Write(p)
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

func (w *worker) stop() {
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

func startWorker(binary, repoURL, endpoint string, queues []string) (*worker, error) {
	w := &worker{}
	w.cmd = exec.Command(binary, "run")
	w.cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_ENDPOINT_URL_SQS=" + endpoint,
		"ONBOARDING_QUEUE=" + queues[0], "OFFBOARDING_QUEUE=" + queues[1], "DEPLOYMENT_QUEUE=" + queues[2],
		"GIT_REPO_URL=" + repoURL, "HTTP_ADDR=127.0.0.1:0", "SQS_WAIT_TIME=20s",
	}
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

// WriteJSON writes the results under dir, named by the time.
func WriteJSON(dir string, results []SizeResult) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s/%s.json", dir, time.Now().UTC().Format("20060102T150405Z"))
	b, err := json.MarshalIndent(map[string]any{"time": time.Now().UTC(), "results": results}, "", "  ")
	if err != nil {
		return "", err
	}
	return name, os.WriteFile(name, append(b, '\n'), 0o644)
}

// Table renders the results for a terminal and the README.
func Table(results []SizeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| tenants | worker p50 | p95 | p99 | floor p50 | floor p99 | p50/floor | p99/floor | reference p50 | reference/worker | backlog /s | RSS MB |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		backlog := "-"
		if r.Throughput > 0 {
			backlog = fmt.Sprintf("%.0f (%.0fx ref)", r.Throughput, r.ThroughputRatio)
		}
		fmt.Fprintf(&b, "| %d | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.2f | %.2f | %.0f ms | %.1fx | %s | %.0f |\n",
			r.Tenants, r.Worker.P50, r.Worker.P95, r.Worker.P99, r.Floor.P50, r.Floor.P99, r.WorkerOverFloor,
			r.Worker.P99/max(r.Floor.P99, 0.001), r.Reference.P50, r.ReferenceRatio, backlog, r.PeakRSSMB)
	}
	return b.String()
}
