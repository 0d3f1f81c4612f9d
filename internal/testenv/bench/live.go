package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/testenv/controlplane"
	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
)

// LiveResult is the time to live at one size: from SendMessage to the
// tenant's HelmRelease Ready in a real control plane with Flux, with the
// worker's reconcile request and without it (Flux's 1-minute interval, as
// the reference runs).
type LiveResult struct {
	Tenants  int   `json:"tenants"`
	Request  Stats `json:"with_reconcile_request"`
	Interval Stats `json:"flux_interval"`
	// IntervalOverRequest is how many times longer the interval path's p50
	// is.
	IntervalOverRequest float64 `json:"interval_p50_over_request_p50"`
	// TenantsApply is how long kustomize-controller took to apply the
	// tenants Kustomization during the runs: the layout's cost.
	TenantsApply Stats `json:"tenants_kustomization_apply"`
	// KustomizeFlags were added to kustomize-controller's (none: Flux's
	// defaults).
	KustomizeFlags []string `json:"kustomize_controller_flags,omitempty"`
	// Shards is the shard folders per tier, each applied by a Kustomization
	// of its own from the worker's ExternalArtifact (0: the platform's one
	// tenants Kustomization); TenantsApply is then the shard Kustomizations'.
	Shards int `json:"shard_kustomizations_per_tier,omitempty"`
}

// LiveOptions shape the time-to-live run.
type LiveOptions struct {
	Sizes []int
	// Request and Interval are the onboardings measured per size with and
	// without the reconcile request.
	Request, Interval int
	Binary            string
	SQSEndpoint       string
	WorkDir           string
	// KustomizeFlags are added to kustomize-controller's.
	KustomizeFlags []string
	// Shards lays the tenants out in that many shard folders per tier, each
	// applied by a Kustomization of its own from an ExternalArtifact the
	// worker publishes (ARTIFACT_URL); 0 is the platform's layout. Only the
	// reconcile-request runs are measured then: nothing waits for Flux's
	// interval.
	Shards int
}

// RunLive measures the time to live at each size, one control plane per
// size (the platform's objects, n premium tenants installed first).
func RunLive(ctx context.Context, o LiveOptions, progress io.Writer) ([]LiveResult, error) {
	var out []LiveResult
	for _, n := range o.Sizes {
		r, err := liveSize(ctx, o, n, progress)
		if err != nil {
			return out, fmt.Errorf("time to live at %d tenants: %w", n, err)
		}
		out = append(out, r)
		// Each size's row as soon as it is measured: a long run stopped
		// half way keeps what it measured.
		fmt.Fprintf(progress, "bench (live): %d tenants: request p50 %.0f ms p95 %.0f ms; interval p50 %.0f ms p95 %.0f ms; tenants apply p50 %.0f ms\n",
			n, r.Request.P50, r.Request.P95, r.Interval.P50, r.Interval.P95, r.TenantsApply.P50)
	}
	return out, nil
}

func liveSize(ctx context.Context, o LiveOptions, n int, progress io.Writer) (LiveResult, error) {
	res := LiveResult{Tenants: n, KustomizeFlags: o.KustomizeFlags, Shards: o.Shards}
	flags := o.KustomizeFlags
	if o.Shards > 0 {
		flags = append(slices.Clone(flags), "--feature-gates=ExternalArtifact=true")
		o.Interval = 0
	}
	dir, err := os.MkdirTemp(o.WorkDir, "live-bench-")
	if err != nil {
		return res, err
	}
	if os.Getenv("BENCH_KEEP") == "" {
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintf(progress, "bench (live): keeping %s (BENCH_KEEP)\n", dir)
	}
	const token = "bench-live-token"
	srv, err := gitserver.Start(filepath.Join(dir, "git"), "127.0.0.1:0", token)
	if err != nil {
		return res, err
	}
	defer srv.Close()
	if err := seedRepoLaid(srv, "live.git", n, gitops.Layout{Shards: o.Shards, ShardKustomizations: o.Shards > 0}); err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "bench (live): %d tenants: starting a control plane with Flux and installing them\n", n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cp, err := controlplane.Start(ctx, filepath.Join(dir, "cluster"), controlplane.Options{ControllerManager: true, Flux: true, KustomizeFlags: flags})
	if err != nil {
		return res, err
	}
	defer cp.Close()
	cp.StartStandIn(ctx)
	if _, err := cp.InstallPlatform(ctx, filepath.Join(dir, "platform"), controlplane.PlatformOptions{
		RepoURL: srv.RepoURL("live.git"), Username: "git", Password: token,
	}); err != nil {
		return res, err
	}
	api := fauxqs.Client(o.SQSEndpoint)
	var queues []string
	for _, kind := range []string{"onboarding", "offboarding", "deployment"} {
		q, _, err := fauxqs.CreateQueue(ctx, api, fmt.Sprintf("bench-live-%d-%d-%s", n, time.Now().UnixNano()%1e9, kind), fauxqs.QueueOptions{})
		if err != nil {
			return res, err
		}
		queues = append(queues, q)
	}
	// With shard Kustomizations, the worker publishes the folders (and
	// makes their Kustomizations) from its start: it is the one measured.
	var artifacts []string
	var publisher *worker
	if o.Shards > 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return res, err
		}
		addr := ln.Addr().String()
		ln.Close()
		artifacts = []string{"ARTIFACT_ADDR=" + addr, "ARTIFACT_URL=http://" + addr}
		if publisher, err = startWorker(o.Binary, srv.RepoURL("live.git"), o.SQSEndpoint, queues, append([]string{"GIT_TOKEN=" + token,
			"KUBECONFIG=" + cp.Kubeconfig, "FLUX_RECONCILE=true"}, artifacts...)...); err != nil {
			return res, err
		}
		defer publisher.stop()
	}
	start := time.Now()
	if err := waitReleasesReady(ctx, cp, n+1, 30*time.Minute); err != nil { // the tenants and pool-1
		return res, err
	}
	fmt.Fprintf(progress, "bench (live): %d tenants installed by Flux in %s\n", n, time.Since(start).Round(time.Second))

	// The applies of the install itself are not the runs'.
	logPath := filepath.Join(dir, "cluster", "kustomize-controller.log")
	before, _ := tenantsApplies(logPath, 0, o.Shards > 0)
	applyFrom := len(before)
	for _, mode := range []struct {
		name      string
		reconcile bool
		count     int
		stats     *Stats
	}{{"with the reconcile request", true, o.Request, &res.Request}, {"at Flux's interval", false, o.Interval, &res.Interval}} {
		if mode.count == 0 {
			continue
		}
		w := publisher
		if w == nil {
			if w, err = startWorker(o.Binary, srv.RepoURL("live.git"), o.SQSEndpoint, queues, "GIT_TOKEN="+token,
				"KUBECONFIG="+cp.Kubeconfig, fmt.Sprintf("FLUX_RECONCILE=%v", mode.reconcile)); err != nil {
				return res, err
			}
		}
		fmt.Fprintf(progress, "bench (live): %d tenants: %d onboardings %s\n", n, mode.count, mode.name)
		var ds []time.Duration
		for i := range mode.count {
			id := fmt.Sprintf("live-%v-%d", mode.reconcile, i)
			if !mode.reconcile {
				// A message comes at any moment of Flux's interval. Sent
				// right after the previous one was ready, just after a
				// fetch, every sample would wait nearly a whole interval:
				// the phases are spread evenly over it instead.
				if err := sleep(ctx, phase(i, mode.count, fluxInterval)); err != nil {
					w.stop()
					return res, err
				}
			}
			sent := time.Now()
			if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queues[0]),
				MessageBody: aws.String(fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":"premium","release_version":"0.0"}`, id))}); err != nil {
				w.stop()
				return res, err
			}
			if err := waitReleaseReady(ctx, cp, id+"-premium", 5*time.Minute); err != nil {
				w.stop()
				return res, fmt.Errorf("%s: %w\nworker log:\n%s", id, err, w.tail())
			}
			ds = append(ds, time.Since(sent))
		}
		w.stop()
		*mode.stats = stats(ds)
	}
	if res.Request.P50 > 0 {
		res.IntervalOverRequest = res.Interval.P50 / res.Request.P50
	}
	applies, err := tenantsApplies(logPath, applyFrom, o.Shards > 0)
	if err == nil {
		res.TenantsApply = stats(applies)
	}
	return res, nil
}

// fluxInterval is the interval of the platform's GitRepository and
// Kustomizations (clusters/production/).
const fluxInterval = time.Minute

// phase is the pause before the i-th of n sends at Flux's interval: the
// sends fall at evenly spread moments of the interval.
func phase(i, n int, interval time.Duration) time.Duration {
	return time.Duration((float64(i) + 0.5) / float64(n) * float64(interval))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// waitReleaseReady polls a HelmRelease in flux-system until it is Ready at
// its current generation.
func waitReleaseReady(ctx context.Context, cp *controlplane.ControlPlane, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := cp.Dynamic.Resource(flux.HelmReleases).Namespace(controlplane.Namespace)
	for {
		hr, err := res.Get(ctx, name, metav1.GetOptions{})
		if err == nil && controlplane.ConditionTrue(hr, "Ready") {
			gen, _, _ := unstructured.NestedInt64(hr.Object, "status", "observedGeneration")
			if gen == hr.GetGeneration() {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("HelmRelease %s not ready: %w", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReleasesReady waits until n HelmReleases in flux-system are Ready.
func waitReleasesReady(ctx context.Context, cp *controlplane.ControlPlane, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := cp.Dynamic.Resource(flux.HelmReleases).Namespace(controlplane.Namespace)
	for {
		list, err := res.List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for i := range list.Items {
				if controlplane.ConditionTrue(&list.Items[i], "Ready") {
					ready++
				}
			}
		}
		if ready >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d HelmReleases ready: %w", ready, n, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// tenantsApplies reads how long each reconciliation of dataplane-tenants
// took from kustomize-controller's log, skipping the first skip.
func tenantsApplies(logPath string, skip int, shards bool) ([]time.Duration, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []time.Duration
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var l struct {
			Msg           string `json:"msg"`
			Kustomization struct {
				Name string `json:"name"`
			} `json:"Kustomization"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		if ours := l.Kustomization.Name == "dataplane-tenants" && !shards ||
			strings.HasPrefix(l.Kustomization.Name, "tenants-") && shards; !ours {
			continue
		}
		rest, ok := strings.CutPrefix(l.Msg, "Reconciliation finished in ")
		if !ok {
			continue
		}
		d, err := time.ParseDuration(strings.SplitN(rest, ",", 2)[0])
		if err == nil {
			out = append(out, d)
		}
	}
	return out[min(skip, len(out)):], sc.Err()
}

// LiveTable formats the time-to-live results.
func LiveTable(results []LiveResult) string {
	var b strings.Builder
	fmt.Fprintln(&b, "time to live: SendMessage -> the tenant's HelmRelease Ready (real control plane, Flux 1.x)")
	fmt.Fprintf(&b, "%8s | %22s | %22s | %9s | %24s\n", "tenants", "request p50 / p95", "interval p50 / p95", "interval/", "tenants Kustomization")
	fmt.Fprintf(&b, "%8s | %22s | %22s | %9s | %24s\n", "", "(ms)", "(ms)", "request", "apply p50 / p95 (ms)")
	for _, r := range results {
		if len(r.KustomizeFlags) > 0 {
			fmt.Fprintf(&b, "(kustomize-controller %s)\n", strings.Join(r.KustomizeFlags, " "))
		}
		if r.Shards > 0 {
			fmt.Fprintf(&b, "(%d shard folders per tier, each applied by a Kustomization of its own from the worker's ExternalArtifact; the apply column is theirs)\n", r.Shards)
		}
		fmt.Fprintf(&b, "%8d | %10.0f / %9.0f | %10.0f / %9.0f | %9.1f | %11.0f / %10.0f\n", r.Tenants,
			r.Request.P50, r.Request.P95, r.Interval.P50, r.Interval.P95, r.IntervalOverRequest, r.TenantsApply.P50, r.TenantsApply.P95)
	}
	return b.String()
}
