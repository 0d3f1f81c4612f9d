package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	wconfig "github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/gate"
	"github.com/tenant-worker/tenant-worker/internal/httpserver"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/runs"
	"github.com/tenant-worker/tenant-worker/internal/status"
	"github.com/tenant-worker/tenant-worker/internal/worker"
)

// base is what the worker has before it finds its repository and queues:
// the SQS client, the metrics, the run history, the gate and the HTTP
// endpoints, which say meanwhile what the worker waits for.
type base struct {
	c   Config
	o   wconfig.Options
	api queue.API
	m   *metrics.Metrics
	rec *runs.Recorder
	// g stops the consumers while git or the repository is at fault.
	g *gate.Gate

	// notReady holds why the worker is not ready; nil once it is.
	notReady atomic.Pointer[string]
	// unserved says which kinds of the templates the cluster does not serve.
	unserved atomic.Pointer[string]

	srv *http.Server
	ln  net.Listener
}

// newBase builds the base of c and takes the HTTP port; the endpoints are
// served by serveHTTP.
func newBase(ctx context.Context, c Config) (*base, error) {
	log := zerolog.Ctx(ctx)
	b := &base{c: c, o: c.Options, api: c.SQS}
	if b.api == nil {
		awsCfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("load AWS configuration: %w", err)
		}
		b.api = sqs.NewFromConfig(awsCfg)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b.m = metrics.New(reg)
	b.setStatus("starting")
	b.rec = runs.New(b.o.RunHistory)
	b.g = gate.New(func(f *gate.Fault) { b.gateChanged(log, f) })
	b.g.ClassifyWith(worker.FaultOf)

	b.ln = c.Listener
	if b.ln == nil {
		var err error
		if b.ln, err = net.Listen("tcp", b.o.HTTPAddr); err != nil {
			return nil, fmt.Errorf("listen on HTTP_ADDR %s: %w", b.o.HTTPAddr, err)
		}
	}
	ui := status.Handler(b.rec, status.Info{Repository: b.o.GitRepoURL, Branch: b.o.GitBranch, Version: c.Version, Outcomes: worker.Outcomes})
	b.srv = httpserver.New(b.o.HTTPAddr, httpserver.Handler(reg, b.ready, ui))
	log.Info().Str("addr", b.ln.Addr().String()).Msg("serving the status page, /api/runs, /metrics, /healthz and /readyz")
	if c.Signer != nil {
		log.Info().Str("format", string(c.Signer.Format())).Str("fingerprint", c.Signer.Fingerprint()).Msg("signing every commit")
	}
	if k, ok := c.Credentials.(interface{ Fingerprint() string }); ok {
		// An SSH deploy key: the fingerprint the git server shows for it.
		log.Info().Str("fingerprint", k.Fingerprint()).Msg("authenticating with an SSH deploy key")
	}
	return b, nil
}

// setStatus sets why the worker is not ready.
func (b *base) setStatus(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	b.notReady.Store(&s)
}

// ready is /readyz: nil once started, while the gate is open and the
// cluster serves every kind the templates render.
func (b *base) ready() error {
	if s := b.notReady.Load(); s != nil {
		return errors.New(*s)
	}
	if f := b.g.Fault(); f != nil {
		return fmt.Errorf("paused since %s: %s: %s", f.Since.UTC().Format(time.RFC3339), f.Cause, f.Error)
	}
	if s := b.unserved.Load(); s != nil {
		return errors.New(*s)
	}
	return nil
}

// setUnserved is what /readyz says of the kinds the cluster does not
// serve; "" when it serves them all.
func (b *base) setUnserved(problem string) {
	if problem == "" {
		b.unserved.Store(nil)
		return
	}
	b.unserved.Store(&problem)
}

// gateChanged reports a gate that closes (f, the fault) or opens (nil):
// the metrics, the status page and the log.
func (b *base) gateChanged(log *zerolog.Logger, f *gate.Fault) {
	for _, c := range gate.Causes {
		b.m.Paused.WithLabelValues(string(c)).Set(0)
	}
	if f == nil {
		b.rec.SetPause(nil)
		log.Info().Msg("resuming: the fault is gone; receiving messages again")
		return
	}
	b.m.Paused.WithLabelValues(string(f.Cause)).Set(1)
	b.rec.SetPause(&runs.Pause{Cause: string(f.Cause), Error: f.Error, Since: f.Since})
	log.Warn().Str("cause", string(f.Cause)).Str("error", f.Error).Msg("pausing: git or the repository is at fault; no messages are received until a probe finds it gone")
}

// watchGate probes the closed gate until ctx ends, and opens it when a
// probe passes.
func (b *base) watchGate(ctx context.Context) {
	log := zerolog.Ctx(ctx)
	b.g.Watch(ctx, gate.Backoff{First: min(500*time.Millisecond, b.o.ProbeMaxDelay), Max: b.o.ProbeMaxDelay}, func(f gate.Fault, err error) {
		if err == nil {
			b.m.Probes.WithLabelValues(metrics.ProbePassed).Inc()
			return
		}
		b.m.Probes.WithLabelValues(metrics.ProbeFailed).Inc()
		b.rec.SetPause(&runs.Pause{Cause: string(f.Cause), Error: err.Error(), Since: f.Since, Probes: f.Probes})
		log.Info().Str("cause", string(f.Cause)).Err(err).Msg("still paused: the fault is still there")
	})
}

// serveHTTP serves the endpoints until ctx ends, then shuts them down
// (within 5 s for the requests in flight), which closes the listener. A
// server that stops by itself is logged, not a failure: the worker goes
// on without its endpoints.
func (b *base) serveHTTP(ctx context.Context) error {
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := b.srv.Serve(b.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			zerolog.Ctx(ctx).Error().Err(err).Msg("HTTP server stopped")
		}
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = b.srv.Shutdown(sctx)
	<-served // at once: Shutdown closed the listener
	return nil
}
