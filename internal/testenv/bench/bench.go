// Package bench measures the worker against the same local git smart-HTTP
// server and fauxqs: end-to-end latency of single onboardings, throughput
// with a backlog, the reference platform's own steps, the floor (one
// object-level commit and a go-git push from a warm in-memory clone), and
// the worker's peak memory.
package bench

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing/fstest"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

// Options say what to measure.
type Options struct {
	Sizes      []int  // tenants already in the repository
	Onboard    int    // single onboardings per size (at least 200 for the report)
	Floor      int    // floor commits per size
	Reference  int    // reference onboardings per size
	Backlog    int    // messages in the backlog run
	BacklogAt  int    // the size the backlog run uses
	Binary     string // the tenant-worker binary
	RefScript  string // reference-onboard.sh; empty skips the reference
	SQSEndpint string
	WorkDir    string
}

// Stats are latency percentiles in milliseconds.
type Stats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
}

func stats(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) float64 {
		i := int(p*float64(len(s))+0.5) - 1
		return float64(s[max(0, min(i, len(s)-1))].Microseconds()) / 1000
	}
	return Stats{N: len(s), P50: at(0.50), P95: at(0.95), P99: at(0.99)}
}

// SizeResult is what was measured at one repository size.
type SizeResult struct {
	Tenants         int     `json:"tenants"`
	Worker          Stats   `json:"worker_latency"`
	Floor           Stats   `json:"floor"`
	Reference       Stats   `json:"reference"`
	WorkerOverFloor float64 `json:"worker_p50_over_floor_p50"`
	ReferenceRatio  float64 `json:"reference_p50_over_worker_p50"`
	Throughput      float64 `json:"backlog_changes_per_second,omitempty"`
	ThroughputRatio float64 `json:"reference_per_tenant_over_backlog_per_tenant,omitempty"`
	PeakRSSMB       float64 `json:"worker_peak_rss_mb"`
	// Signed is the latency of a second worker that signs every commit
	// (ed25519 SSH key), measured interleaved with Worker.
	Signed           Stats   `json:"signed_worker_latency"`
	SignedOverWorker float64 `json:"signed_p50_over_worker_p50"`
	// Intent is the time the intent check takes per onboarding (in
	// process, everything but the push), and IntentShare its p50 over the
	// worker's single-message p50.
	Intent      Stats   `json:"intent_check"`
	IntentShare float64 `json:"intent_p50_over_worker_p50"`
}

// seedRepo makes a bare repository holding the reference tree plus n
// premium tenants, as ../shared/bench/seed-repo.sh does.
func seedRepo(srv repoCreator, name string, n int) error {
	return seedRepoLaid(srv, name, n, gitops.Layout{})
}

// seedRepoLaid is seedRepo with the tenant files laid out as to says (its
// Shards and ShardKustomizations), as `tenant-worker layout migrate` moves
// them.
func seedRepoLaid(srv repoCreator, name string, n int, to gitops.Layout) error {
	return seedRepoWith(srv, name, n, seedSpec{Layout: to})
}

// seedSpec shapes a seeded repository beyond its size.
type seedSpec struct {
	// Layout is where the tenant files are (its Shards and
	// ShardKustomizations).
	Layout gitops.Layout
	// Tiers take the tenants in turn (premium alone when empty).
	Tiers []string
	// ReleaseInterval, when set, replaces the tier templates' HelmRelease
	// interval (1m0s) before any tenant is rendered from them.
	ReleaseInterval string
}

// seedRepoWith makes a bare repository holding the reference tree plus n
// tenants as spec says.
func seedRepoWith(srv repoCreator, name string, n int, spec seedSpec) error {
	to, tiers := spec.Layout, spec.Tiers
	if len(tiers) == 0 {
		tiers = []string{"premium"}
	}
	ids := map[string][]string{}
	for i := range n {
		tier := tiers[i%len(tiers)]
		ids[tier] = append(ids[tier], fmt.Sprintf("seed-%d", i+1))
	}
	m, err := templates.MapFS()
	if err != nil {
		return err
	}
	if spec.ReleaseInterval != "" {
		const was = "\n  interval: 1m0s\n"
		for _, tier := range tiers {
			f := m[templates.Root+"/tier-templates/"+tier+"_tenant_template.yaml"]
			if f == nil || !strings.Contains(string(f.Data), was) {
				return fmt.Errorf("the %s template has no HelmRelease interval of 1m0s to replace", tier)
			}
			f.Data = []byte(strings.ReplaceAll(string(f.Data), was, "\n  interval: "+spec.ReleaseInterval+"\n"))
		}
	}
	for _, tier := range tiers {
		if err := templates.AddTenants(m, tier, ids[tier]...); err != nil {
			return err
		}
	}
	var steps []gitops.Layout // none for the tiers' folders
	if to.Shards > 0 {
		steps = append(steps, gitops.Layout{Shards: to.Shards})
	}
	if to.ShardKustomizations {
		steps = append(steps, to)
	}
	for _, step := range steps {
		moved, err := gitops.Layout{Root: templates.Root}.MigrateTo(gitops.FS{FS: m}, step)
		if err != nil {
			return fmt.Errorf("lay out %d shards: %w", to.Shards, err)
		}
		for p, b := range moved {
			if b == nil {
				delete(m, p)
			} else {
				m[p] = &fstest.MapFile{Data: b}
			}
		}
	}
	_, err = srv.CreateRepo(name, "main", m)
	return err
}

// repoCreator is a git server that makes seeded repositories: git's
// smart-HTTP server or Gitea.
type repoCreator interface {
	CreateRepo(name, branch string, seed fs.FS) (string, error)
}

// refWatcher reports when the branch of a bare repository moves, by reading
// its ref file (git updates it in place on every push).
type refWatcher struct {
	dir string // the bare repository
}

func (w refWatcher) head() string {
	b, err := os.ReadFile(filepath.Join(w.dir, "refs", "heads", "main"))
	if err == nil {
		return strings.TrimSpace(string(b))
	}
	out, _ := gitserver.OutputIn(w.dir, "rev-parse", "main")
	return strings.TrimSpace(out)
}

// waitMove polls until the head differs from old, at most timeout.
func (w refWatcher) waitMove(old string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		if h := w.head(); h != old {
			return h, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("branch did not move within %s", timeout)
		}
		time.Sleep(500 * time.Microsecond)
	}
}

// floorRepo measures the floor: one object-level commit of one file and a
// go-git push from a warm in-memory clone, nothing else.
type floorRepo struct {
	repo *gitrepo.Repo
}

func openFloor(ctx context.Context, url, token string) (*floorRepo, error) {
	repo, err := gitrepo.Open(ctx, gitrepo.Options{URL: url, Branch: "main", Token: token, AuthorName: "bench",
		AuthorEmail: "bench@example.com", WalkingPush: true})
	if err != nil {
		return nil, err
	}
	return &floorRepo{repo: repo}, nil
}

// commit times the floor's i-th commit and push.
func (f *floorRepo) commit(ctx context.Context, i int) (time.Duration, error) {
	start := time.Now()
	head := f.repo.Head()
	path := fmt.Sprintf("%s/tenants/premium/floor-%d.yaml", templates.Root, i)
	c, err := f.repo.Commit(head, map[string][]byte{path: []byte(fmt.Sprintf("floor %d\n", i))}, "floor")
	if err != nil {
		return 0, err
	}
	if err := f.repo.Push(ctx, head, c); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// reference times one run of ../shared/bench/reference-onboard.sh against
// the server.
func reference(script, url, work string, i int) (time.Duration, error) {
	start := time.Now()
	cmd := exec.Command("bash", script, url, filepath.Join(work, "ref"), fmt.Sprintf("ref-%d", i), "premium", "0.0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("reference-onboard.sh: %w: %s", err, out)
	}
	return time.Since(start), nil
}

// peakRSS reads a process's peak resident set size in MB.
func peakRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kb float64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb / 1024
		}
	}
	return 0
}
