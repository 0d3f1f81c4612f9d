package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tenant-worker/tenant-worker/deploy"
	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/publish"
	"github.com/tenant-worker/tenant-worker/internal/testenv/controlplane"
	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

// LiveResult is the time to live at one size: from SendMessage to the
// tenant's HelmRelease Ready in a real control plane with Flux, with the
// worker's reconcile request and without it (Flux's 1-minute interval, as
// the reference runs).
type LiveResult struct {
	Tenants  int   `json:"tenants"`
	Request  Stats `json:"with_reconcile_request"`
	Interval Stats `json:"flux_interval"`
	// Pushed and Created split Request: from SendMessage to the branch
	// moving (the worker's part), and to the HelmRelease existing (then
	// kustomize-controller applied it; the rest, to Ready, is
	// helm-controller's).
	Pushed  Stats `json:"request_pushed"`
	Created Stats `json:"request_helmrelease_created"`
	// Helm is each sample's time from its HelmRelease existing to Ready:
	// helm-controller's part alone.
	Helm Stats `json:"request_helm_controller"`
	// IntervalOverRequest is how many times longer the interval path's p50
	// is.
	IntervalOverRequest float64 `json:"interval_p50_over_request_p50"`
	// TenantsApply is how long kustomize-controller took to apply the
	// tenants Kustomization during the runs: the layout's cost.
	TenantsApply Stats `json:"tenants_kustomization_apply"`
	// KustomizeFlags were added to kustomize-controller's, HelmFlags to
	// helm-controller's (none: Flux's defaults).
	KustomizeFlags []string `json:"kustomize_controller_flags,omitempty"`
	HelmFlags      []string `json:"helm_controller_flags,omitempty"`
	// Layout is how the tenants are applied (LayoutOne, LayoutTiers,
	// LayoutShards, LayoutArtifacts); with any but LayoutOne, TenantsApply
	// is the shard Kustomizations'.
	Layout string `json:"layout"`
	// Shards is the shard folders per tier, each applied by a Kustomization
	// of its own (0: the platform's one tenants Kustomization).
	Shards int `json:"shard_kustomizations_per_tier,omitempty"`
	// ReleaseInterval is the tenants' HelmRelease interval when not the
	// templates' 1m0s.
	ReleaseInterval string `json:"helmrelease_interval,omitempty"`
	// TimedOut is the sample, if any, that was not Ready within the
	// sample timeout: it ended the run, and is not in Request.
	TimedOut *TimedOut `json:"timed_out,omitempty"`
	// ShardInterval is the interval of the shard Kustomizations when not
	// the tenants Kustomization's.
	ShardInterval string `json:"shard_kustomization_interval,omitempty"`
	// Stages are, with the reconcile request, the time from SendMessage to
	// each stage of the change's way to live (Stages), by stage.
	Stages map[string]Stats `json:"request_stages,omitempty"`
	// CPU is the processor time each control-plane component used per
	// onboarding during the reconcile-request runs, in milliseconds: the
	// components' time over the runs, divided by the onboardings.
	CPU map[string]float64 `json:"cpu_ms_per_change,omitempty"`
}

// TimedOut is how far a sample got before the sample timeout, in
// milliseconds from SendMessage; zero for a stage it did not reach.
type TimedOut struct {
	Sample    int     `json:"sample"`
	PushedMS  float64 `json:"pushed_ms"`
	CreatedMS float64 `json:"helmrelease_made_ms"`
	AfterMS   float64 `json:"timeout_ms"`
}

// defaultSampleTimeout bounds one sample unless LiveOptions.SampleTimeout
// says otherwise: a tenant not Ready by then ends its run (a control plane
// that far behind would not catch up).
const defaultSampleTimeout = 5 * time.Minute

// The layouts the time to live is measured in.
const (
	// LayoutOne is the platform's: one tenants Kustomization applies every
	// tenant on each new revision of the GitRepository.
	LayoutOne = "one"
	// LayoutTiers gives each tier's folder a Kustomization of its own, of
	// the same GitRepository (one shard folder per tier).
	LayoutTiers = "tiers"
	// LayoutShards gives each shard folder (a stable hash of the tenant id)
	// a Kustomization of its own, of the same GitRepository.
	LayoutShards = "shards"
	// LayoutArtifacts gives each shard folder a Kustomization of its own,
	// from the ExternalArtifact the worker publishes of that folder alone.
	LayoutArtifacts = "artifacts"
	// LayoutOneTuned is LayoutOne with TunedKustomizeFlags added to
	// kustomize-controller's, so that one run measures today's layout with
	// Flux's defaults and tuned.
	LayoutOneTuned = "one-tuned"
)

// TunedKustomizeFlags raise kustomize-controller's concurrent server-side
// applies, and its client rate limit (50 requests/s, burst 300) where it
// has one: Flux's controllers turn that limit off against an API server
// with Priority and Fairness (every cluster since Kubernetes 1.20, and the
// control plane here), so there only --concurrent-ssa counts.
var TunedKustomizeFlags = []string{"--kube-api-qps=1000", "--kube-api-burst=2000", "--concurrent-ssa=8"}

// Layouts are the layouts RunLive knows, in the order of the table.
var Layouts = []string{LayoutOne, LayoutOneTuned, LayoutTiers, LayoutShards, LayoutArtifacts}

// oneKustomization reports whether layout applies every tenant with the
// platform's one tenants Kustomization.
func oneKustomization(layout string) bool { return layout == LayoutOne || layout == LayoutOneTuned }

// liveTiers are the tiers the tenants are dealt to in turn, installed and
// onboarded alike.
var liveTiers = []string{"premium", "basic"}

// LiveOptions shape the time-to-live run.
type LiveOptions struct {
	Sizes []int
	// Request is the onboardings measured with the reconcile request: one
	// count for every size, or one per size (the i-th for Sizes[i]).
	Request []int
	// Interval is the onboardings measured per size without it.
	Interval    int
	Binary      string
	SQSEndpoint string
	WorkDir     string
	// KustomizeFlags are added to kustomize-controller's, HelmFlags to
	// helm-controller's (as deploy/flux ships them by default).
	KustomizeFlags []string
	HelmFlags      []string
	// Layouts are measured one after the other at each size (LayoutOne
	// when empty). Only LayoutOne is measured at Flux's interval.
	Layouts []string
	// Shards is the shard folders per tier of LayoutShards and
	// LayoutArtifacts.
	Shards int
	// SampleTimeout bounds one sample (defaultSampleTimeout when 0): today's
	// layout at 2,000 tenants takes minutes per change.
	SampleTimeout time.Duration
	// ReleaseInterval, when set, is the tenants' HelmRelease interval (the
	// tier templates' 1m0s when empty): how often helm-controller
	// reconciles each installed tenant, and source-controller its chart.
	ReleaseInterval string
	// ShardInterval, when set, is the interval of the Kustomizations of
	// every layout but LayoutOne (when zero: the tenants Kustomization's,
	// 1m, for the bench's own; ARTIFACT_INTERVAL's default for the
	// worker's): how often each applies its folder again when nothing
	// changed.
	ShardInterval time.Duration
}

// Check says what in o RunLive would refuse, so that a caller can refuse
// it before the runs that come first.
func (o LiveOptions) Check() error {
	for _, l := range o.Layouts {
		if !slices.Contains(Layouts, l) {
			return fmt.Errorf("no layout %q: the layouts are %s", l, strings.Join(Layouts, ", "))
		}
		if !oneKustomization(l) && l != LayoutTiers && o.Shards < 1 {
			return fmt.Errorf("layout %s needs shard folders (-live-shards)", l)
		}
	}
	if len(o.Request) != 1 && len(o.Request) != len(o.Sizes) {
		return fmt.Errorf("%d sample counts (-live-request) for %d sizes (-live-sizes): give one, or one per size", len(o.Request), len(o.Sizes))
	}
	return nil
}

// RunLive measures the time to live at each size in each layout, one
// control plane per size and layout (the platform's objects, n tenants of
// premium and basic installed first).
func RunLive(ctx context.Context, o LiveOptions, progress io.Writer) ([]LiveResult, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	layouts := o.Layouts
	if len(layouts) == 0 {
		layouts = []string{LayoutOne}
	}
	var out []LiveResult
	for i, n := range o.Sizes {
		for _, l := range layouts {
			r, err := liveSize(ctx, o, n, o.Request[min(i, len(o.Request)-1)], l, progress)
			if err != nil {
				return out, fmt.Errorf("time to live at %d tenants, layout %s: %w", n, l, err)
			}
			out = append(out, r)
			// Each row as soon as it is measured: a long run stopped half
			// way keeps what it measured.
			fmt.Fprintf(progress, "bench (live): %d tenants, layout %s: request p50 %.0f ms p95 %.0f ms (pushed p50 %.0f ms, HelmRelease made p50 %.0f ms); interval p50 %.0f ms p95 %.0f ms; apply p50 %.0f ms; CPU per change %s\n",
				n, l, r.Request.P50, r.Request.P95, r.Pushed.P50, r.Created.P50, r.Interval.P50, r.Interval.P95, r.TenantsApply.P50, cpuSummary(r.CPU))
		}
	}
	return out, nil
}

// laid is the tenant layout of a bench layout.
func laid(layout string, shards int) gitops.Layout {
	switch layout {
	case LayoutTiers:
		return gitops.Layout{Root: templates.Root, Shards: 1, ShardKustomizations: true}
	case LayoutShards, LayoutArtifacts:
		return gitops.Layout{Root: templates.Root, Shards: shards, ShardKustomizations: true}
	}
	return gitops.Layout{Root: templates.Root}
}

// liveTenant is the id and tier of the i-th tenant onboarded in a run.
func liveTenant(reconcile bool, i int) (id, tier string) {
	return fmt.Sprintf("live-%v-%d", reconcile, i), liveTiers[i%len(liveTiers)]
}

func liveSize(ctx context.Context, o LiveOptions, n, request int, layout string, progress io.Writer) (LiveResult, error) {
	l := laid(layout, o.Shards)
	res := LiveResult{Tenants: n, KustomizeFlags: o.KustomizeFlags, Layout: layout, Shards: l.Shards, ReleaseInterval: o.ReleaseInterval}
	sampleTimeout := cmp.Or(o.SampleTimeout, defaultSampleTimeout)
	flags := o.KustomizeFlags
	switch layout {
	case LayoutArtifacts:
		shipped, err := deploy.KustomizeControllerFlags()
		if err != nil {
			return res, err
		}
		flags = append(slices.Clone(flags), shipped...)
		// helm-controller as deploy/flux's component sets it for this
		// layout, then the run's own flags.
		helm, err := deploy.HelmControllerFlags()
		if err != nil {
			return res, err
		}
		o.HelmFlags = append(helm, o.HelmFlags...)
		res.HelmFlags = o.HelmFlags
	case LayoutOneTuned:
		flags = append(slices.Clone(flags), TunedKustomizeFlags...)
		res.KustomizeFlags = flags
	}
	if layout != LayoutOne {
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
	if err := seedRepoWith(srv, "live.git", n, seedSpec{Layout: gitops.Layout{Shards: l.Shards, ShardKustomizations: l.ShardKustomizations},
		Tiers: liveTiers, ReleaseInterval: o.ReleaseInterval}); err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "bench (live): %d tenants, layout %s: starting a control plane with Flux and installing them\n", n, layout)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cp, err := controlplane.Start(ctx, filepath.Join(dir, "cluster"), controlplane.Options{ControllerManager: true, Flux: true, KustomizeFlags: flags, HelmFlags: o.HelmFlags})
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
	if layout == LayoutTiers || layout == LayoutShards {
		if err := gitKustomizations(ctx, cp, l, n, request, o.ShardInterval); err != nil {
			return res, err
		}
		if o.ShardInterval > 0 {
			res.ShardInterval = o.ShardInterval.String()
		}
	}
	// With artifacts, the worker publishes the folders (and makes their
	// Kustomizations) from its start: it is the one measured.
	var artifacts []string
	var publisher *worker
	if layout == LayoutArtifacts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return res, err
		}
		addr := ln.Addr().String()
		ln.Close()
		artifacts = []string{"ARTIFACT_ADDR=" + addr, "ARTIFACT_URL=http://" + addr}
		if o.ShardInterval > 0 {
			artifacts = append(artifacts, "ARTIFACT_INTERVAL="+o.ShardInterval.String())
			res.ShardInterval = o.ShardInterval.String()
		} else {
			res.ShardInterval = config.Default().ArtifactInterval.String() + " (ARTIFACT_INTERVAL's default)"
		}
		if publisher, err = startWorker(o.Binary, srv.RepoURL("live.git"), o.SQSEndpoint, queues, append([]string{"GIT_TOKEN=" + token,
			"KUBECONFIG=" + cp.Kubeconfig, "FLUX_RECONCILE=true"}, artifacts...)...); err != nil {
			return res, err
		}
		defer publisher.stop()
	}
	start := time.Now()
	// The tenants and pool-1; helm-controller installed about 250 a
	// minute here at 500.
	if err := waitReleasesReady(ctx, cp, n+1, max(30*time.Minute, time.Duration(n)*1500*time.Millisecond)); err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "bench (live): %d tenants installed by Flux in %s\n", n, time.Since(start).Round(time.Second))

	// The applies of the install itself are not the runs'.
	logPath := filepath.Join(dir, "cluster", "kustomize-controller.log")
	before, _ := tenantsApplies(logPath, 0, !oneKustomization(layout))
	applyFrom := len(before)
	for _, mode := range []struct {
		name      string
		reconcile bool
		count     int
		stats     *Stats
	}{{"with the reconcile request", true, request, &res.Request}, {"at Flux's interval", false, o.Interval, &res.Interval}} {
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
		fmt.Fprintf(progress, "bench (live): %d tenants, layout %s: %d onboardings %s\n", n, layout, mode.count, mode.name)
		var ds, pushed, created, helm []time.Duration
		stages := map[string][]time.Duration{}
		sent := 0 // samples sent, a timed-out one included
		refs := refWatcher{dir: srv.RepoPath("live.git")}
		cpuBefore := cp.CPU()
		for i := range mode.count {
			id, tier := liveTenant(mode.reconcile, i)
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
			old := refs.head()
			p := probe{cp: cp, kustomization: "dataplane-tenants"}
			if layout == LayoutArtifacts || layout == LayoutShards || layout == LayoutTiers {
				p.kustomization = publish.Name(tier, l.Shard(id))
			}
			if layout == LayoutArtifacts {
				p.artifact = p.kustomization
				p.was = p.revision(ctx)
			}
			at := time.Now()
			sent++
			out, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queues[0]),
				MessageBody: aws.String(fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q,"release_version":"0.0"}`, id, tier))})
			if err != nil {
				w.stop()
				return res, err
			}
			st, err := waitLive(ctx, refs, p, old, id+"-"+tier, sampleTimeout)
			if r := w.received(ctx, aws.ToString(out.MessageId)); !r.IsZero() {
				st.at[StageReceived] = r
			}
			if err != nil && ctx.Err() == nil && mode.reconcile {
				ms := func(t time.Time) float64 {
					if t.IsZero() {
						return 0
					}
					return float64(t.Sub(at)) / float64(time.Millisecond)
				}
				res.TimedOut = &TimedOut{Sample: i, PushedMS: ms(st.get(StagePushed)), CreatedMS: ms(st.get(StageMade)), AfterMS: float64(sampleTimeout / time.Millisecond)}
				fmt.Fprintf(progress, "bench (live): %d tenants, layout %s: %s: %v (pushed after %.0f ms, HelmRelease made after %.0f ms); the run ends here\n",
					n, layout, id, err, res.TimedOut.PushedMS, res.TimedOut.CreatedMS)
				break
			}
			if err != nil {
				w.stop()
				return res, fmt.Errorf("%s: %w\nworker log:\n%s", id, err, w.tail())
			}
			ds = append(ds, st.get(StageReady).Sub(at))
			pushed, created = append(pushed, st.get(StagePushed).Sub(at)), append(created, st.get(StageMade).Sub(at))
			helm = append(helm, st.get(StageReady).Sub(st.get(StageMade)))
			for _, stage := range Stages {
				if t, ok := st.at[stage]; ok {
					stages[stage] = append(stages[stage], t.Sub(at))
				}
			}
		}
		if mode.reconcile {
			res.CPU = perChange(cpuBefore, cp.CPU(), sent)
			res.Pushed, res.Created, res.Helm = stats(pushed), stats(created), stats(helm)
			res.Stages = map[string]Stats{}
			for stage, ds := range stages {
				res.Stages[stage] = stats(ds)
			}
		}
		w.stop()
		*mode.stats = stats(ds)
	}
	if res.Request.P50 > 0 {
		res.IntervalOverRequest = res.Interval.P50 / res.Request.P50
	}
	applies, err := tenantsApplies(logPath, applyFrom, !oneKustomization(layout))
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

// stageTimes are the moments a sample reached on its way to live, by
// stage (Stages).
type stageTimes struct {
	at map[string]time.Time
}

func (s stageTimes) get(stage string) time.Time { return s.at[stage] }

// waitLive polls, every 20 ms, the branch (until it moves from old) and
// where the change is (p: the shard folder's ExternalArtifact and
// Kustomization, HelmRelease name in flux-system, its Helm storage), until
// the HelmRelease is Ready at its current generation, and returns when
// each stage was first seen.
func waitLive(ctx context.Context, refs refWatcher, p probe, old, name string, timeout time.Duration) (stageTimes, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st := stageTimes{at: map[string]time.Time{}}
	commit := ""
	for {
		now := time.Now()
		if commit == "" {
			if h := refs.head(); h != old {
				commit = h
				st.at[StagePushed] = now
			}
		}
		p.look(ctx, st.at, commit, name, now)
		if _, ok := st.at[StageMade]; ok {
			if _, pushed := st.at[StagePushed]; !pushed {
				st.at[StagePushed] = now // seen in the same round
			}
		}
		if _, ok := st.at[StageReady]; ok {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("HelmRelease %s not ready: %w", name, ctx.Err())
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

// gitKustomizations makes, from the platform's tenants Kustomization, one
// Kustomization of the same GitRepository for each shard folder the n
// installed tenants and the request onboardings fall in: the layouts whose
// Kustomizations all reconcile on each new revision.
func gitKustomizations(ctx context.Context, cp *controlplane.ControlPlane, l gitops.Layout, n, request int, interval time.Duration) error {
	folders := map[string]bool{}
	for i := range n {
		folders[l.TenantDir(liveTiers[i%len(liveTiers)], fmt.Sprintf("seed-%d", i+1))] = true
	}
	for i := range request {
		id, tier := liveTenant(true, i)
		folders[l.TenantDir(tier, id)] = true
	}
	res := cp.Dynamic.Resource(flux.Kustomizations).Namespace(controlplane.Namespace)
	tmpl, err := res.Get(ctx, "dataplane-tenants", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read the tenants Kustomization: %w", err)
	}
	source, _, _ := unstructured.NestedMap(tmpl.Object, "spec", "sourceRef")
	for _, dir := range slices.Sorted(maps.Keys(folders)) {
		name := publish.Name(path.Base(path.Dir(dir)), path.Base(dir))
		if _, err := res.Create(ctx, publish.FromTemplate(tmpl, name, source, "./"+dir, interval), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("make Kustomization %s: %w", name, err)
		}
	}
	return nil
}

// perChange is the processor time each component used between two
// readings, in milliseconds per change.
func perChange(before, after map[string]time.Duration, changes int) map[string]float64 {
	out := map[string]float64{}
	for name, d := range after {
		out[name] = float64(d-before[name]) / float64(time.Millisecond) / float64(max(changes, 1))
	}
	return out
}

// fluxControllers are the components the table sums as "controllers".
var fluxControllers = []string{"source-controller", "kustomize-controller", "helm-controller"}

// cpuSummary is the API server's, etcd's and Flux's controllers' processor
// time per change.
func cpuSummary(cpu map[string]float64) string {
	var controllers float64
	for _, c := range fluxControllers {
		controllers += cpu[c]
	}
	return fmt.Sprintf("kube-apiserver %.0f ms, etcd %.0f ms, Flux's controllers %.0f ms", cpu["kube-apiserver"], cpu["etcd"], controllers)
}

// LiveTable formats the time-to-live results.
func LiveTable(results []LiveResult) string {
	var b strings.Builder
	fmt.Fprintln(&b, "time to live: SendMessage -> the tenant's HelmRelease Ready (real control plane, Flux 1.x)")
	fmt.Fprintln(&b, "layouts: one = the platform's tenants Kustomization (one-tuned: kustomize-controller tuned); tiers = a Kustomization per tier folder; shards = a Kustomization per")
	fmt.Fprintln(&b, "shard folder, both of the GitRepository; artifacts = a Kustomization per shard folder from the worker's ExternalArtifact")
	fmt.Fprintln(&b, "with the reconcile request: ready p50/p95; p50 of its stages pushed (the worker) and HelmRelease made (kustomize-controller)")
	fmt.Fprintf(&b, "%8s | %-20s | %17s | %6s | %6s | %17s | %17s | %s\n", "tenants", "layout", "ready p50 / p95", "pushed", "made", "apply p50 / p95", "interval p50/p95", "CPU ms per change")
	fmt.Fprintf(&b, "%8s | %-20s | %17s | %6s | %6s | %17s | %17s | %s\n", "", "", "(ms)", "(ms)", "(ms)", "(ms)", "(ms)", "API server / etcd / Flux controllers")
	for _, r := range results {
		if len(r.KustomizeFlags) > 0 {
			fmt.Fprintf(&b, "(kustomize-controller %s)\n", strings.Join(r.KustomizeFlags, " "))
		}
		if len(r.HelmFlags) > 0 {
			fmt.Fprintf(&b, "(helm-controller %s)\n", strings.Join(r.HelmFlags, " "))
		}
		if r.ShardInterval != "" {
			fmt.Fprintf(&b, "(the shard Kustomizations' interval: %s)\n", r.ShardInterval)
		}
		if r.ReleaseInterval != "" {
			fmt.Fprintf(&b, "(the tenants' HelmRelease interval: %s)\n", r.ReleaseInterval)
		}
		if t := r.TimedOut; t != nil {
			fmt.Fprintf(&b, "(sample %d not Ready within %.0f s: pushed after %.0f ms, HelmRelease made after %.0f ms; the row is the samples before it)\n",
				t.Sample, t.AfterMS/1000, t.PushedMS, t.CreatedMS)
		}
		layout := r.Layout
		if r.Shards > 1 {
			layout = fmt.Sprintf("%s (%d/tier)", layout, r.Shards)
		}
		var controllers float64
		for _, c := range fluxControllers {
			controllers += r.CPU[c]
		}
		interval := "-"
		if r.Interval.P50 > 0 {
			interval = fmt.Sprintf("%7.0f / %7.0f", r.Interval.P50, r.Interval.P95)
		}
		fmt.Fprintf(&b, "%8d | %-20s | %7.0f / %7.0f | %6.0f | %6.0f | %7.0f / %7.0f | %17s | %.0f / %.0f / %.0f\n", r.Tenants, layout,
			r.Request.P50, r.Request.P95, r.Pushed.P50, r.Created.P50, r.TenantsApply.P50, r.TenantsApply.P95, interval,
			r.CPU["kube-apiserver"], r.CPU["etcd"], controllers)
	}
	b.WriteString(StageTable(results))
	return b.String()
}

// StageTable is, for each result with stages, the time from SendMessage
// to each stage of the change's way to live, p50 / p95 in ms, and the
// share of the p50 each stage adds.
func StageTable(results []LiveResult) string {
	var b strings.Builder
	for _, r := range results {
		if len(r.Stages) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\nstages, %d tenants, layout %s (HelmRelease interval %s), with the reconcile request: ms from SendMessage\n",
			r.Tenants, r.Layout, cmp.Or(r.ReleaseInterval, "1m0s, the templates'"))
		fmt.Fprintf(&b, "%-12s | %17s | %s\n", "stage", "p50 / p95", "p50 added")
		prev := 0.0
		for _, stage := range Stages {
			st, ok := r.Stages[stage]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "%-12s | %7.0f / %7.0f | %+.0f\n", stage, st.P50, st.P95, st.P50-prev)
			prev = st.P50
		}
	}
	return b.String()
}
