package app

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	wconfig "github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/readiness"
	"github.com/tenant-worker/tenant-worker/internal/runs"
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
func follower(ctx context.Context, o wconfig.Options, c *flux.Client, p *pipeline.Pipeline, w *worker.Worker, m *metrics.Metrics) *readiness.Follower {
	log := zerolog.Ctx(ctx)
	return readiness.New(c, readiness.Options{
		Timeout:     o.ReadyTimeout,
		NoReconcile: !o.FluxReconcile,
		Sync: func(ctx context.Context) (string, error) {
			h, err := p.Sync(ctx)
			return h.String(), err
		},
		OnStage: w.Stage,
		OnDone:  func(e readiness.Event) { w.Done(ctx, e) },
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

// historyDepth bounds the commits a restarted worker reads back to find
// the changes it was following.
const historyDepth = 1000

// rebuild hands the follower the worker's commits of the last READY_TIMEOUT
// that changed what Flux applies, read back from the branch: the changes a
// stopped worker was following get their readiness events after a restart
// (or again, if it had sent them: events are at least once).
func rebuild(ctx context.Context, o wconfig.Options, repo *gitrepo.Repo, f *readiness.Follower) {
	log := zerolog.Ctx(ctx)
	commits, err := repo.Recent(ctx, time.Now().Add(-o.ReadyTimeout), historyDepth)
	if err != nil {
		log.Warn().Err(err).Msg("could not read the recent commits; changes pushed before this start get no readiness event")
		return
	}
	l := gitops.Layout{Root: o.GitopsRoot}
	var order []string
	var targets []readiness.Target
	for i := len(commits) - 1; i >= 0; i-- {
		c := commits[i]
		order = append(order, c.Hash.String())
		tr := pipeline.Trailers(c.Message)
		id := tr[pipeline.TrailerMessageID]
		if id == "" || !l.Touches(c.Changed) {
			continue // someone else's commit, or a ledger record
		}
		targets = append(targets, readiness.Target{
			MessageID: id, Queue: tr[pipeline.TrailerQueue], Kind: tr[pipeline.TrailerKind],
			Tenant: tr[pipeline.TrailerTenant], Tier: tr[pipeline.TrailerTier],
			Commit: c.Hash.String(), Pushed: c.When, Releases: l.Releases(c.Before, c.Changed),
		})
	}
	if len(order) > 0 {
		f.Pushed(order, targets)
	}
	log.Info().Int("commits", len(commits)).Int("followed", len(targets)).Dur("since", o.ReadyTimeout).
		Msg("following again the changes pushed before this start")
}

// The kinds the templates declare are read again every servedReadEvery
// (from the clone, no network), and checked against the cluster when they
// changed or servedCheckEvery passed (a CRD can change too).
const (
	servedReadEvery  = 10 * time.Second
	servedCheckEvery = time.Minute
)

// watchServed checks, at start, after every change of what the templates
// declare and every minute, that the cluster serves every kind the
// templates and pooled environments declare; what it does not is reported
// on /readyz (through unserved), the status page and a metric, with the fix.
func watchServed(ctx context.Context, c *flux.Client, p *pipeline.Pipeline, l gitops.Layout, m *metrics.Metrics, rec *runs.Recorder, unserved *atomic.Pointer[string]) {
	log := zerolog.Ctx(ctx)
	var lastKinds, lastReport string
	var checked time.Time
	for {
		var refs []gitops.TypeRef
		err := p.Read(ctx, func(r gitops.Reader) error {
			var err error
			refs, err = l.Types(r)
			return err
		})
		kinds := make([]flux.Kind, len(refs))
		var key strings.Builder
		for i, t := range refs {
			kinds[i] = flux.Kind{APIVersion: t.APIVersion, Kind: t.Kind, File: t.File}
			fmt.Fprintf(&key, "%s %s %s\n", t.APIVersion, t.Kind, t.File)
		}
		if err == nil && (key.String() != lastKinds || time.Since(checked) >= servedCheckEvery) {
			var missing []flux.Unserved
			missing, err = c.Unserved(ctx, kinds)
			if err == nil {
				lastKinds, checked = key.String(), time.Now()
				lastReport = reportServed(log, missing, lastReport, m, rec, unserved)
			}
		}
		if err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("could not check the templates' kinds against the cluster")
		}
		t := time.NewTimer(servedReadEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// reportServed publishes what the cluster does not serve and logs it when it
// differs from last; it returns the new report.
func reportServed(log *zerolog.Logger, missing []flux.Unserved, last string, m *metrics.Metrics, rec *runs.Recorder, unserved *atomic.Pointer[string]) string {
	m.UnservedKinds.Set(float64(len(missing)))
	var lines []string
	for _, u := range missing {
		lines = append(lines, u.String())
	}
	text := strings.Join(lines, "; ")
	if text == "" {
		unserved.Store(nil)
		rec.SetWarning("")
	} else {
		s := fmt.Sprintf("the cluster does not serve what the templates render, every such change would fail in Flux: %s", text)
		unserved.Store(&s)
		rec.SetWarning(s)
	}
	if text != last {
		if text == "" {
			log.Info().Msg("the cluster serves every kind the templates render")
		} else {
			log.Error().Str("unserved", text).Msg("the cluster does not serve what the templates render; every such change would fail in Flux")
		}
	}
	return text
}
