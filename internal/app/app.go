// Package app wires the worker together in one place: settings, SQS client,
// clone, pipeline, consumers and the HTTP endpoints.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	wconfig "github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/credentials"
	"github.com/tenant-worker/tenant-worker/internal/gate"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/httpserver"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/results"
	"github.com/tenant-worker/tenant-worker/internal/runs"
	"github.com/tenant-worker/tenant-worker/internal/signing"
	"github.com/tenant-worker/tenant-worker/internal/status"
	"github.com/tenant-worker/tenant-worker/internal/worker"
)

// Config is what Run needs.
type Config struct {
	Options wconfig.Options
	// Credentials authenticate every git call; when nil, Token is sent.
	Credentials credentials.Provider
	// Token is a fixed git token, already read from GIT_TOKEN or its file.
	Token  string
	Logger zerolog.Logger
	// Listener, if set, serves the HTTP endpoints instead of Options.HTTPAddr.
	Listener net.Listener
	// ArtifactListener, if set, serves the shard folders' archives instead
	// of Options.ArtifactAddr (which ARTIFACT_URL still names); closed
	// unused when the worker publishes none.
	ArtifactListener net.Listener
	// SQS, if set, replaces the client built from the AWS environment.
	SQS queue.API
	// Version is shown on the status page.
	Version string
	// Signer, if set, signs every commit the worker writes.
	Signer signing.Signer
}

// Run runs the worker until ctx is done, then finishes the messages in hand
// (within the shutdown grace) and returns nil.
func Run(ctx context.Context, c Config) error {
	log := c.Logger
	ctx = log.WithContext(ctx)
	o := c.Options
	// The listeners given are Run's to close on every return: a return
	// before their servers start must not leave the caller's ports taken
	// (a server's own close of one at shutdown makes this one a no-op).
	for _, l := range []net.Listener{c.Listener, c.ArtifactListener} {
		if l != nil {
			defer l.Close()
		}
	}

	api := c.SQS
	if api == nil {
		awsCfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return fmt.Errorf("load AWS configuration: %w", err)
		}
		api = sqs.NewFromConfig(awsCfg)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)

	// notReady holds why the worker is not ready; nil once it is.
	var notReady atomic.Pointer[string]
	// unserved says which kinds of the templates the cluster does not serve.
	var unserved atomic.Pointer[string]
	setStatus := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		notReady.Store(&s)
	}
	setStatus("starting")
	rec := runs.New(o.RunHistory)
	// The gate stops the consumers while git or the repository is at fault.
	g := gate.New(func(f *gate.Fault) {
		for _, c := range gate.Causes {
			m.Paused.WithLabelValues(string(c)).Set(0)
		}
		if f == nil {
			rec.SetPause(nil)
			log.Info().Msg("resuming: the fault is gone; receiving messages again")
			return
		}
		m.Paused.WithLabelValues(string(f.Cause)).Set(1)
		rec.SetPause(&runs.Pause{Cause: string(f.Cause), Error: f.Error, Since: f.Since})
		log.Warn().Str("cause", string(f.Cause)).Str("error", f.Error).Msg("pausing: git or the repository is at fault; no messages are received until a probe finds it gone")
	})
	g.ClassifyWith(worker.FaultOf)
	ready := func() error {
		if s := notReady.Load(); s != nil {
			return errors.New(*s)
		}
		if f := g.Fault(); f != nil {
			return fmt.Errorf("paused since %s: %s: %s", f.Since.UTC().Format(time.RFC3339), f.Cause, f.Error)
		}
		if s := unserved.Load(); s != nil {
			return errors.New(*s)
		}
		return nil
	}
	ln := c.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", o.HTTPAddr); err != nil {
			return fmt.Errorf("listen on HTTP_ADDR %s: %w", o.HTTPAddr, err)
		}
	}
	ui := status.Handler(rec, status.Info{Repository: o.GitRepoURL, Branch: o.GitBranch, Version: c.Version, Outcomes: worker.Outcomes})
	srv := httpserver.New(o.HTTPAddr, httpserver.Handler(reg, ready, ui))
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("HTTP server stopped")
		}
	}()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg("serving the status page, /api/runs, /metrics, /healthz and /readyz")
	if c.Signer != nil {
		log.Info().Str("format", string(c.Signer.Format())).Str("fingerprint", c.Signer.Fingerprint()).Msg("signing every commit")
	}
	if k, ok := c.Credentials.(interface{ Fingerprint() string }); ok {
		// An SSH deploy key: the fingerprint the git server shows for it.
		log.Info().Str("fingerprint", k.Fingerprint()).Msg("authenticating with an SSH deploy key")
	}

	var repo *gitrepo.Repo
	err := retry(ctx, "open the GitOps repository", func() error {
		var err error
		creds := c.Credentials
		if creds == nil {
			creds = credentials.Static(o.GitUsername, c.Token)
		}
		ro := RepoOptions(o, creds)
		ro.Signer = c.Signer
		ro.OnMoved = func(from, to string) {
			log.Warn().Str("from", from).Str("to", to).Msg("the git server says the repository moved; using the new URL (update GIT_REPO_URL)")
		}
		repo, err = gitrepo.Open(ctx, ro)
		if err != nil {
			setStatus("repository: %v", err)
		}
		return err
	})
	if err != nil {
		return nil // ctx ended while starting: a clean stop
	}
	log.Info().Str("repo", o.GitRepoURL).Str("branch", o.GitBranch).Str("head", repo.Head().String()).
		Str("ledger_branch", o.GitLedgerBranch).Str("ledger_head", repo.LedgerHead().String()).Msg("repository ready")

	// The queues first: the ledger keeps what the longest retention of
	// them could still deliver.
	queues := make([]*queue.Queue, len(message.Kinds))
	var retention time.Duration
	for i, kind := range message.Kinds {
		err := retry(ctx, "find queue "+o.Queue(kind), func() error {
			var err error
			queues[i], err = queue.Resolve(ctx, api, o.Queue(kind))
			if err != nil {
				setStatus("queue %s: %v", o.Queue(kind), err)
			}
			return err
		})
		if err != nil {
			return nil
		}
		retention = max(retention, queues[i].Retention)
	}

	cluster, err := fluxClient(o)
	if err != nil {
		return err
	}
	if cluster != nil {
		defer cluster.Close()
	}
	if cluster == nil {
		log.Info().Str("readiness", o.Readiness).Msg("no cluster access (READINESS off, or no KUBECONFIG and not in a pod): no readiness events")
	}
	artifactPub, err := artifacts(o)
	if err != nil {
		return fmt.Errorf("ARTIFACT_URL: %w", err)
	}
	var observer pipeline.Observer = metrics.PipelineObserver{M: m, OnStep: func(jobs []pipeline.Job, step pipeline.Step) {
		ids := make([]string, len(jobs))
		for i, j := range jobs {
			ids[i] = j.MessageID
		}
		rec.Update(ids, func(r *runs.Run) { r.Step = string(step) })
	}}
	pushed := make(chan struct{}, 1)
	artifactLn := c.ArtifactListener
	switch {
	case artifactPub == nil && artifactLn != nil:
		_ = artifactLn.Close() // nothing to serve: refuse connections from now on
	case artifactPub != nil:
		observer = pushSignal{observer, pushed}
		if artifactLn == nil {
			if artifactLn, err = net.Listen("tcp", o.ArtifactAddr); err != nil {
				return fmt.Errorf("ARTIFACT_ADDR: %w", err)
			}
			// Closed on every return, also one before its server starts
			// (the server's own close of it, at shutdown, comes first
			// otherwise).
			defer artifactLn.Close()
		}
	}
	p := pipeline.New(repo, pipeline.Options{
		Layout: gitops.Layout{Root: o.GitopsRoot}, MaxAttempts: o.PushAttempts, Retention: retention, Hold: o.Hold, Releases: cluster != nil,
		Observer: observer,
	})
	// The ledger moves with the branch in one atomic push: a server that
	// cannot do that would leave one moved without the other. Found at
	// start, as at a push, it is a pause with its cause, not an exit: the
	// consumers wait at the gate, and a probe opens it once the server
	// can (a failure to ask is the pause of its own cause).
	if err := p.CanPushAtomic(ctx); err != nil {
		if cause, ok := worker.FaultOf(err); ok {
			g.Close(cause, fmt.Errorf("%s: %w", o.GitRepoURL, err), p.CanPushAtomic)
		} else {
			g.Close(gate.GitUnreachable, fmt.Errorf("%s: %w", o.GitRepoURL, err), p.CanPushAtomic)
		}
	}

	var pub worker.Publisher
	if o.ResultsQueue != "" {
		var rq *queue.Queue
		err := retry(ctx, "find results queue "+o.ResultsQueue, func() error {
			var err error
			rq, err = queue.Resolve(ctx, api, o.ResultsQueue)
			if err != nil {
				setStatus("results queue %s: %v", o.ResultsQueue, err)
			}
			return err
		})
		if err != nil {
			return nil
		}
		pub = results.NewPublisher(api, rq.URL, rq.FIFO())
		log.Info().Str("queue", rq.Name).Str("url", rq.URL).Msg("publishing result events")
	}
	w := worker.New(p, m, rec, pub, g)

	consumers := make([]*queue.Consumer, len(queues))
	for i, q := range queues {
		kind := message.Kinds[i]
		m.InitQueue(q.Name, worker.Outcomes)
		rec.AddQueue(q.Name)
		log.Info().Str("queue", q.Name).Str("url", q.URL).Str("dead_letter_queue", q.DeadLetterURL).
			Dur("retention", q.Retention).Str("kind", string(kind)).Msg("consuming queue")
		observe := func(op string, err error) { m.SQSErrors.WithLabelValues(q.Name, op).Inc() }
		consumers[i] = queue.NewConsumer(api, q, w.Handler(kind, q.Name), queue.Options{
			WaitTime: o.WaitTime, MaxMessages: o.MaxMessages, MaxBatch: o.MaxBatch, VisibilityTimeout: o.VisibilityTimeout,
			RetryDelay: o.RetryDelay, MaxRetryDelay: o.MaxRetryDelay, ShutdownGrace: o.ShutdownGrace,
			Hold: g.Wait,
		}, observe)
	}
	notReady.Store(nil)

	var wg sync.WaitGroup
	wg.Go(func() { watchDepths(ctx, api, queues, m, rec, o.QueueStatsEvery) })
	wg.Go(func() {
		g.Watch(ctx, gate.Backoff{First: min(500*time.Millisecond, o.ProbeMaxDelay), Max: o.ProbeMaxDelay}, func(f gate.Fault, err error) {
			if err == nil {
				m.Probes.WithLabelValues(metrics.ProbePassed).Inc()
				return
			}
			m.Probes.WithLabelValues(metrics.ProbeFailed).Inc()
			rec.SetPause(&runs.Pause{Cause: string(f.Cause), Error: err.Error(), Since: f.Since, Probes: f.Probes})
			log.Info().Str("cause", string(f.Cause)).Err(err).Msg("still paused: the fault is still there")
		})
	})
	if cluster != nil {
		f := follower(ctx, o, cluster, repo, w, m)
		w.Follow(f)
		rebuild(ctx, o, repo, f)
		wg.Go(func() { f.Run(ctx) })
		wg.Go(func() { watchServed(ctx, cluster, p, gitops.Layout{Root: o.GitopsRoot}, m, rec, &unserved) })
		log.Info().Str("namespace", o.FluxNamespace).Str("git_repository", o.FluxGitRepository).Strs("kustomizations", o.Kustomizations()).
			Bool("reconcile_requests", o.FluxReconcile).Dur("timeout", o.ReadyTimeout).Msg("following each pushed change into the cluster")
	}
	if artifactPub != nil {
		artifactPub.BuildWith(rebuildFrom(p))
		artifactPub.CheckHeadWith(func(ctx context.Context) (string, error) {
			h, err := repo.RemoteHead(ctx)
			return h.String(), err
		})
		wg.Go(func() { servePublisher(ctx, o, artifactLn, artifactPub, p, pushed) })
	}
	for _, c := range consumers {
		wg.Go(func() { c.Run(ctx) })
	}
	wg.Go(func() { w.EndHolds(ctx, holdCheck(o.Hold, retention)) })
	<-ctx.Done()
	log.Info().Msg("shutting down: no new messages; finishing the ones in hand")
	wg.Wait()
	log.Info().Msg("stopped")
	return nil
}

// holdCheck is how often the holds that ran out are looked for: a
// twentieth of the hold, between a second and a minute.
func holdCheck(hold, retention time.Duration) time.Duration {
	if hold <= 0 || hold > retention {
		hold = retention
	}
	return min(max(hold/20, time.Second), time.Minute)
}

// retry calls fn until it succeeds or ctx ends, backing off up to 30 s. A
// worker that starts before its git server or queues must wait, not exit.
func retry(ctx context.Context, what string, fn func() error) error {
	log := zerolog.Ctx(ctx)
	delay := time.Second
	for {
		err := fn()
		if err == nil {
			return nil
		}
		log.Error().Err(err).Dur("retry_in", delay).Msgf("could not %s", what)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(delay*2, 30*time.Second)
	}
}

// RepoOptions are the clone settings of o, with its credentials.
func RepoOptions(o wconfig.Options, creds credentials.Provider) gitrepo.Options {
	return gitrepo.Options{
		URL: o.GitRepoURL, Branch: o.GitBranch, LedgerBranch: o.GitLedgerBranch, Credentials: creds, Dir: o.GitCloneDir,
		AuthorName: o.GitAuthorName, AuthorEmail: o.GitAuthorEmail, Timeout: o.GitTimeout,
	}
}
