package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitea"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
)

// GiteaResult is what was measured against real Gitea at one size.
type GiteaResult struct {
	Tenants int   `json:"tenants"`
	Worker  Stats `json:"worker_latency"`
	// CLIPush is a one-file commit and `git push` with the git command line
	// from a warm clone: what any client pays Gitea per push.
	CLIPush Stats `json:"git_cli_push"`
	// Floor is the go-git floor (object-level commit, go-git push).
	Floor           Stats   `json:"floor"`
	Reference       Stats   `json:"reference"`
	WorkerOverCLI   float64 `json:"worker_p50_over_cli_p50"`
	WorkerP99OverCL float64 `json:"worker_p99_over_cli_p99"`
	ReferenceRatio  float64 `json:"reference_p50_over_worker_p50"`
	Throughput      float64 `json:"backlog_changes_per_second,omitempty"`
	ThroughputRatio float64 `json:"reference_per_tenant_over_backlog_per_tenant,omitempty"`
	PeakRSSMB       float64 `json:"worker_peak_rss_mb"`
}

// giteaSize is one size on the shared Gitea.
type giteaSize struct {
	res   GiteaResult
	w     *worker
	queue string
	cli   string // the git CLI's warm clone
	floor *floorRepo
}

// RunGitea measures the worker against real Gitea (built by make gitea):
// at every size, single onboardings, the git CLI's push and the go-git
// floor, the reference's steps, and the backlog at opts.BacklogAt, the
// sizes interleaved as in Run.
func RunGitea(ctx context.Context, opts Options, progress io.Writer) ([]GiteaResult, error) {
	dir, err := os.MkdirTemp(opts.WorkDir, "gitea-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	g, err := gitea.Start(dir)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	api := fauxqs.Client(opts.SQSEndpint)
	var sizes []*giteaSize
	defer func() {
		for _, s := range sizes {
			s.w.stop()
		}
	}()
	results := func() []GiteaResult {
		var out []GiteaResult
		for _, s := range sizes {
			out = append(out, s.res)
		}
		return out
	}
	name := func(kind string, n int) string { return fmt.Sprintf("%s-%d", kind, n) }
	for _, n := range opts.Sizes {
		fmt.Fprintf(progress, "bench (gitea): seeding %d tenants, starting its worker\n", n)
		for _, kind := range []string{"worker", "floor", "cli", "reference"} {
			if err := seedRepo(g, name(kind, n), n); err != nil {
				return results(), fmt.Errorf("seed %s on gitea: %w", name(kind, n), err)
			}
		}
		var queues []string
		for _, kind := range []string{"onboarding", "offboarding", "deployment"} {
			q, _, err := fauxqs.CreateQueue(ctx, api, fmt.Sprintf("bench-gitea-%d-%d-%s", n, time.Now().UnixNano()%1e9, kind), fauxqs.QueueOptions{})
			if err != nil {
				return results(), err
			}
			queues = append(queues, q)
		}
		s := &giteaSize{res: GiteaResult{Tenants: n}, queue: queues[0], cli: filepath.Join(dir, name("cli", n))}
		if s.w, err = startWorker(opts.Binary, g.DirectURL(name("worker", n)), opts.SQSEndpint, queues,
			"GIT_USERNAME="+gitea.Owner, "GIT_TOKEN="+g.Token); err != nil {
			return results(), err
		}
		sizes = append(sizes, s)
		if err := gitserver.Git("", "clone", "-q", g.CredentialURL(name("cli", n)), s.cli); err != nil {
			return results(), err
		}
		if s.floor, err = openFloor(ctx, g.DirectURL(name("floor", n)), g.Token); err != nil {
			return results(), err
		}
	}

	fmt.Fprintf(progress, "bench (gitea): git CLI push and go-git floor, %d per size\n", opts.Floor)
	cli := make([][]time.Duration, len(sizes))
	floor := make([][]time.Duration, len(sizes))
	for i := range opts.Floor {
		for j, s := range sizes {
			d, err := cliPush(s.cli, i)
			if err != nil {
				return results(), fmt.Errorf("git CLI push at %d tenants: %w", s.res.Tenants, err)
			}
			cli[j] = append(cli[j], d)
			if d, err = s.floor.commit(ctx, i); err != nil {
				return results(), fmt.Errorf("floor at %d tenants: %w", s.res.Tenants, err)
			}
			floor[j] = append(floor[j], d)
		}
	}
	fmt.Fprintf(progress, "bench (gitea): %d single onboardings per size\n", opts.Onboard)
	ds := make([][]time.Duration, len(sizes))
	for i := range opts.Onboard {
		for j, s := range sizes {
			watch := refWatcher{dir: g.RepoPath(name("worker", s.res.Tenants))}
			old := watch.head()
			body := fmt.Sprintf(`{"tenant_id":"bench-%d","tenant_tier":"premium","release_version":"0.0"}`, i)
			start := time.Now()
			if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(s.queue), MessageBody: aws.String(body)}); err != nil {
				return results(), err
			}
			if _, err := watch.waitMove(old, 60*time.Second); err != nil {
				return results(), fmt.Errorf("onboarding %d at %d tenants on gitea: %w\n%s", i, s.res.Tenants, err, s.w.tail())
			}
			ds[j] = append(ds[j], time.Since(start))
			time.Sleep(settle)
		}
	}
	ref := make([][]time.Duration, len(sizes))
	if opts.RefScript != "" && opts.Reference > 0 {
		fmt.Fprintf(progress, "bench (gitea): reference steps, %d per size\n", opts.Reference)
		for i := range opts.Reference {
			for j, s := range sizes {
				d, err := reference(opts.RefScript, g.CredentialURL(name("reference", s.res.Tenants)), dir, i)
				if err != nil {
					return results(), err
				}
				ref[j] = append(ref[j], d)
			}
		}
	}
	for j, s := range sizes {
		s.res.Worker, s.res.CLIPush, s.res.Floor, s.res.Reference = stats(ds[j]), stats(cli[j]), stats(floor[j]), stats(ref[j])
		s.res.WorkerOverCLI = s.res.Worker.P50 / s.res.CLIPush.P50
		s.res.WorkerP99OverCL = s.res.Worker.P99 / s.res.CLIPush.P99
		if s.res.Reference.P50 > 0 {
			s.res.ReferenceRatio = s.res.Reference.P50 / s.res.Worker.P50
		}
	}
	for _, s := range sizes {
		if s.res.Tenants == opts.BacklogAt && opts.Backlog > 0 {
			fmt.Fprintf(progress, "bench (gitea): backlog of %d at %d tenants\n", opts.Backlog, s.res.Tenants)
			r := &sizeRun{res: SizeResult{Tenants: s.res.Tenants, Reference: s.res.Reference}, w: s.w, queue: s.queue}
			if err := backlog(ctx, api, r, opts.Backlog); err != nil {
				return results(), err
			}
			s.res.Throughput, s.res.ThroughputRatio = r.res.Throughput, r.res.ThroughputRatio
		}
		s.res.PeakRSSMB = peakRSS(s.w.cmd.Process.Pid)
	}
	return results(), nil
}

// cliPush times a one-file commit and `git push` from the warm clone dir.
func cliPush(dir string, i int) (time.Duration, error) {
	start := time.Now()
	file := filepath.Join(dir, "application-plane", "production", "tenants", "premium", fmt.Sprintf("cli-%d.yaml", i))
	if err := os.WriteFile(file, []byte(fmt.Sprintf("cli %d\n", i)), 0o644); err != nil {
		return 0, err
	}
	for _, args := range [][]string{{"add", file}, {"commit", "-q", "-m", "cli"}, {"push", "-q", "origin", "main"}} {
		if err := gitserver.Git(dir, args...); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// GiteaTable renders the Gitea results.
func GiteaTable(results []GiteaResult) string {
	var b []byte
	b = fmt.Appendf(b, "| tenants (Gitea) | worker p50 | p95 | p99 | git CLI push p50 | p99 | worker/CLI p50 | worker/CLI p99 | go-git floor p50 | reference p50 | reference/worker | backlog /s | RSS MB |\n")
	b = fmt.Appendf(b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		backlog := "-"
		if r.Throughput > 0 {
			backlog = fmt.Sprintf("%.0f (%.0fx ref)", r.Throughput, r.ThroughputRatio)
		}
		b = fmt.Appendf(b, "| %d | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.2f | %.2f | %.0f ms | %.0f ms | %.1fx | %s | %.0f |\n",
			r.Tenants, r.Worker.P50, r.Worker.P95, r.Worker.P99, r.CLIPush.P50, r.CLIPush.P99, r.WorkerOverCLI, r.WorkerP99OverCL,
			r.Floor.P50, r.Reference.P50, r.ReferenceRatio, backlog, r.PeakRSSMB)
	}
	return string(b)
}
