// Package served checks that the cluster serves every kind the templates
// and pooled environments declare (a CRD missing, or of another version,
// fails every change that renders it, in Flux): at start, after every
// change of what the templates declare and every minute.
package served

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/runs"
)

// The kinds the templates declare are read again every ReadEvery (from
// the clone, no network), and checked against the cluster when they
// changed or CheckEvery passed (a CRD can change too).
const (
	ReadEvery  = 10 * time.Second
	CheckEvery = time.Minute
)

// Cluster says which of kinds it does not serve (flux.Client).
type Cluster interface {
	Unserved(ctx context.Context, kinds []flux.Kind) ([]flux.Unserved, error)
}

// Templates reads the branch the templates are on (pipeline.Pipeline).
type Templates interface {
	Read(ctx context.Context, fn func(r gitops.Reader) error) error
}

// Watcher checks the kinds of Layout's templates, read from Templates,
// against Cluster, and reports what the cluster does not serve, with its
// fix: in Metrics, on the status page (Runs' warning), in the log when it
// changes, and to OnReport. A Watcher serves one Run at a time.
type Watcher struct {
	Cluster   Cluster
	Templates Templates
	Layout    gitops.Layout
	Metrics   *metrics.Metrics
	Runs      *runs.Recorder
	// OnReport, if set, hears after every check what the cluster does
	// not serve, as /readyz shows it, or "" when it serves every kind.
	OnReport func(problem string)

	lastKinds, lastReport string
	checked               time.Time
}

// Run checks every ReadEvery until ctx ends. A read of the templates or of
// the cluster that fails is logged and tried again.
func (w *Watcher) Run(ctx context.Context) {
	log := zerolog.Ctx(ctx)
	for {
		if err := w.check(ctx); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("could not check the templates' kinds against the cluster")
		}
		t := time.NewTimer(ReadEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// check reads the templates' kinds and, when they changed or CheckEvery
// passed, asks the cluster about them and reports.
func (w *Watcher) check(ctx context.Context) error {
	var refs []gitops.TypeRef
	err := w.Templates.Read(ctx, func(r gitops.Reader) error {
		var err error
		refs, err = w.Layout.Types(r)
		return err
	})
	if err != nil {
		return fmt.Errorf("read the templates' kinds: %w", err)
	}
	kinds := make([]flux.Kind, len(refs))
	var key strings.Builder
	for i, t := range refs {
		kinds[i] = flux.Kind{APIVersion: t.APIVersion, Kind: t.Kind, File: t.File}
		fmt.Fprintf(&key, "%s %s %s\n", t.APIVersion, t.Kind, t.File)
	}
	if key.String() == w.lastKinds && time.Since(w.checked) < CheckEvery {
		return nil
	}
	missing, err := w.Cluster.Unserved(ctx, kinds)
	if err != nil {
		return fmt.Errorf("ask the cluster which kinds it serves: %w", err)
	}
	w.lastKinds, w.checked = key.String(), time.Now()
	w.report(zerolog.Ctx(ctx), missing)
	return nil
}

// report publishes what the cluster does not serve and logs it when it
// differs from the last report.
func (w *Watcher) report(log *zerolog.Logger, missing []flux.Unserved) {
	w.Metrics.UnservedKinds.Set(float64(len(missing)))
	var lines []string
	for _, u := range missing {
		lines = append(lines, u.String())
	}
	text := strings.Join(lines, "; ")
	var problem string
	if text != "" {
		problem = fmt.Sprintf("the cluster does not serve what the templates render, every such change would fail in Flux: %s", text)
	}
	w.Runs.SetWarning(problem)
	if w.OnReport != nil {
		w.OnReport(problem)
	}
	if text != w.lastReport {
		if text == "" {
			log.Info().Msg("the cluster serves every kind the templates render")
		} else {
			log.Error().Str("unserved", text).Msg("the cluster does not serve what the templates render; every such change would fail in Flux")
		}
	}
	w.lastReport = text
}
