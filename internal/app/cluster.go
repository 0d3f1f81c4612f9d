package app

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/rs/zerolog"

	wconfig "github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/publish"
	"github.com/tenant-worker/tenant-worker/internal/readiness"
	"github.com/tenant-worker/tenant-worker/internal/worker"
)

// fluxClient returns the client of the cluster Flux runs in, or nil when
// readiness is off or the worker has no cluster access.
func fluxClient(o wconfig.Options) (*flux.Client, error) {
	if o.Readiness == "off" {
		return nil, nil
	}
	cfg, err := flux.LoadConfig(o.Kubeconfig)
	if err != nil || cfg == nil {
		return nil, err
	}
	return flux.New(cfg, flux.Options{Namespace: o.FluxNamespace, GitRepository: o.FluxGitRepository, Kustomizations: o.Kustomizations()})
}

// follower follows every pushed change into the cluster and reports
// through the worker (run history, metrics, result events).
func follower(ctx context.Context, o wconfig.Options, c *flux.Client, repo *gitrepo.Repo, w *worker.Worker, m *metrics.Metrics) *readiness.Follower {
	log := zerolog.Ctx(ctx)
	l := gitops.Layout{Root: o.GitopsRoot}
	var record readiness.Record
	if o.ReadinessRecord != "" {
		// Kept twice as long as a restarted worker reads back: replicas'
		// clocks differ.
		record = c.NewRecord(o.FluxNamespace, o.ReadinessRecord, 2*o.ReadyTimeout)
	}
	return readiness.New(c, readiness.Options{
		Timeout:     o.ReadyTimeout,
		NoReconcile: !o.FluxReconcile,
		History: func(ctx context.Context, since time.Time, depth int) ([]readiness.Commit, error) {
			return history(ctx, l, repo, since, depth)
		},
		Record:  record,
		OnStage: w.Stage,
		Shard: func(p string) string {
			if tier, shard, ok := l.ShardOf(p); ok {
				return publish.Name(tier, shard)
			}
			return ""
		},
		OnDone: func(e readiness.Event) {
			// The outcome is recorded as published: publish it even when
			// the worker is stopping.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishGrace)
			defer cancel()
			w.Done(pctx, e)
		},
		OnReconcile: func(err error) {
			if err != nil {
				m.ReconcileRequests.WithLabelValues(metrics.RequestFailed).Inc()
				return
			}
			m.ReconcileRequests.WithLabelValues(metrics.RequestSent).Inc()
		},
		OnRead: func(err error) {
			m.ClusterReadErrors.Inc()
			log.Warn().Err(err).Msg("could not read Flux's objects")
		},
		OnPending: func(n int) { m.ReadinessPending.Set(float64(n)) },
	})
}

// publishGrace bounds the publication of a readiness event once recorded.
const publishGrace = 10 * time.Second

// historyDepth bounds the commits a restarted worker reads back to find
// the changes it was following.
const historyDepth = 1000

// history reads the branch's commits since since (at most depth), oldest
// first, with the change each of the worker's own carries: its message id,
// queue, kind, tenant and tier from the commit's trailers, the
// HelmReleases from what it changed. A ledger record, or a commit of
// someone else, carries none.
func history(ctx context.Context, l gitops.Layout, repo *gitrepo.Repo, since time.Time, depth int) ([]readiness.Commit, error) {
	commits, err := repo.Recent(ctx, since, depth)
	if err != nil {
		return nil, fmt.Errorf("read the branch since %s: %w", since.UTC().Format(time.RFC3339), err)
	}
	out := make([]readiness.Commit, 0, len(commits))
	for i := len(commits) - 1; i >= 0; i-- {
		c := commits[i]
		rc := readiness.Commit{Hash: c.Hash.String()}
		tr := pipeline.Trailers(c.Message)
		if id := tr[pipeline.TrailerMessageID]; id != "" && l.Touches(c.Changed) {
			rc.Change = &readiness.Target{
				MessageID: id, Queue: tr[pipeline.TrailerQueue], Kind: tr[pipeline.TrailerKind],
				Tenant: tr[pipeline.TrailerTenant], Tier: tr[pipeline.TrailerTier],
				Commit: c.Hash.String(), Pushed: c.When, Releases: l.Releases(c.Before, c.Changed),
				Paths: slices.Sorted(maps.Keys(c.Changed)),
			}
			// A worker's commit does not change the layout (only `layout
			// migrate` does): the one before it is the change's.
			if cl, err := l.Of(c.Before); err == nil {
				rc.Change.OwnShards = cl.ShardKustomizations
			}
		}
		out = append(out, rc)
	}
	return out, nil
}

// rebuild hands the follower the worker's commits of the last READY_TIMEOUT
// that changed what Flux applies, read back from the branch: the changes a
// stopped worker was following get their readiness events after a restart.
// Those whose outcome the readiness record holds (published before the
// restart, by this replica or another) are not followed again; those a
// later commit replaced are decided superseded from the history alone.
func rebuild(ctx context.Context, o wconfig.Options, repo *gitrepo.Repo, f *readiness.Follower) {
	log := zerolog.Ctx(ctx)
	commits, err := history(ctx, gitops.Layout{Root: o.GitopsRoot}, repo, time.Now().Add(-o.ReadyTimeout), historyDepth)
	if err != nil {
		log.Warn().Err(err).Msg("could not read the recent commits; changes pushed before this start get no readiness event")
		return
	}
	n := f.Resume(ctx, commits)
	log.Info().Int("commits", len(commits)).Int("followed", n).Dur("since", o.ReadyTimeout).
		Msg("following again the changes pushed before this start whose readiness event is not recorded")
}
