package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/credentials"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gate"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/group"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/publish"
	"github.com/tenant-worker/tenant-worker/internal/publisher"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/queuedepth"
	"github.com/tenant-worker/tenant-worker/internal/readiness"
	"github.com/tenant-worker/tenant-worker/internal/results"
	"github.com/tenant-worker/tenant-worker/internal/runs"
	"github.com/tenant-worker/tenant-worker/internal/served"
	"github.com/tenant-worker/tenant-worker/internal/worker"
)

// errStopped is what the assembly returns when ctx ends while it waits for
// the repository or a queue: a clean stop, not a failure.
var errStopped = errors.New("stopped while starting")

// parts are the worker's long-running parts, built on the repository and
// queues found, not yet started.
type parts struct {
	*base
	repo      *gitrepo.Repo
	queues    []*queue.Queue
	retention time.Duration
	pipeline  *pipeline.Pipeline
	worker    *worker.Worker
	consumers []*queue.Consumer
	depths    *queuedepth.Watcher
	// follower and served follow the cluster; nil without cluster access.
	follower *readiness.Follower
	served   *served.Watcher
	// publisher publishes the shard folders; nil without ARTIFACT_URL.
	publisher *publisher.Loop
	// closers release what the parts hold, last first.
	closers []func()
}

// close releases what the parts hold.
func (ps *parts) close() {
	for i := len(ps.closers) - 1; i >= 0; i-- {
		ps.closers[i]()
	}
}

// assemble finds the repository and the queues (retrying until they are
// there, errStopped when ctx ends first) and builds the parts on them. On
// an error it releases what it took.
func (b *base) assemble(ctx context.Context) (_ *parts, err error) {
	log := zerolog.Ctx(ctx)
	o := b.o
	ps := &parts{base: b}
	defer func() {
		if err != nil {
			ps.close()
		}
	}()
	if ps.repo, err = b.openRepo(ctx); err != nil {
		return nil, err
	}
	// The queues first: the ledger keeps what the longest retention of
	// them could still deliver.
	if ps.queues, ps.retention, err = b.resolveQueues(ctx); err != nil {
		return nil, err
	}
	cluster, err := fluxClient(o)
	if err != nil {
		return nil, err
	}
	if cluster != nil {
		ps.closers = append(ps.closers, cluster.Close)
	} else {
		log.Info().Str("readiness", o.Readiness).Msg("no cluster access (READINESS off, or no KUBECONFIG and not in a pod): no readiness events")
	}
	artifactPub, err := artifacts(o)
	if err != nil {
		return nil, fmt.Errorf("ARTIFACT_URL: %w", err)
	}
	if err := ps.buildPipeline(ctx, artifactPub, cluster != nil); err != nil {
		return nil, err
	}
	pub, err := b.resultsPublisher(ctx)
	if err != nil {
		return nil, err
	}
	ps.worker = worker.New(ps.pipeline, b.m, b.rec, pub, b.g)
	ps.buildConsumers(ctx)
	b.notReady.Store(nil)
	if cluster != nil {
		ps.followCluster(ctx, cluster)
	}
	return ps, nil
}

// openRepo opens the clone, trying again until it opens or ctx ends.
func (b *base) openRepo(ctx context.Context) (*gitrepo.Repo, error) {
	log := zerolog.Ctx(ctx)
	o := b.o
	var repo *gitrepo.Repo
	err := retry(ctx, "open the GitOps repository", func() error {
		var err error
		creds := b.c.Credentials
		if creds == nil {
			creds = credentials.Static(o.GitUsername, b.c.Token)
		}
		ro := RepoOptions(o, creds)
		ro.Signer = b.c.Signer
		ro.OnMoved = func(from, to string) {
			log.Warn().Str("from", from).Str("to", to).Msg("the git server says the repository moved; using the new URL (update GIT_REPO_URL)")
		}
		repo, err = gitrepo.Open(ctx, ro)
		if err != nil {
			b.setStatus("repository: %v", err)
		}
		return err
	})
	if err != nil {
		return nil, errStopped
	}
	log.Info().Str("repo", o.GitRepoURL).Str("branch", o.GitBranch).Str("head", repo.Head().String()).
		Str("ledger_branch", o.GitLedgerBranch).Str("ledger_head", repo.LedgerHead().String()).Msg("repository ready")
	return repo, nil
}

// resolveQueue finds the queue name, trying again until it is there or ctx
// ends; what ("queue", "results queue") names it in the log and the
// not-ready status.
func (b *base) resolveQueue(ctx context.Context, what, name string) (*queue.Queue, error) {
	var q *queue.Queue
	err := retry(ctx, "find "+what+" "+name, func() error {
		var err error
		q, err = queue.Resolve(ctx, b.api, name)
		if err != nil {
			b.setStatus("%s %s: %v", what, name, err)
		}
		return err
	})
	if err != nil {
		return nil, errStopped
	}
	return q, nil
}

// resolveQueues finds the queue of every kind, in message.Kinds' order, and
// their longest retention.
func (b *base) resolveQueues(ctx context.Context) ([]*queue.Queue, time.Duration, error) {
	queues := make([]*queue.Queue, len(message.Kinds))
	var retention time.Duration
	for i, kind := range message.Kinds {
		q, err := b.resolveQueue(ctx, "queue", b.o.Queue(kind))
		if err != nil {
			return nil, 0, err
		}
		queues[i] = q
		retention = max(retention, q.Retention)
	}
	return queues, retention, nil
}

// resultsPublisher publishes the result events on RESULTS_QUEUE; nil
// without it.
func (b *base) resultsPublisher(ctx context.Context) (worker.Publisher, error) {
	if b.o.ResultsQueue == "" {
		return nil, nil
	}
	rq, err := b.resolveQueue(ctx, "results queue", b.o.ResultsQueue)
	if err != nil {
		return nil, err
	}
	zerolog.Ctx(ctx).Info().Str("queue", rq.Name).Str("url", rq.URL).Msg("publishing result events")
	return results.NewPublisher(b.api, rq.URL, rq.FIFO()), nil
}

// buildPipeline builds the pipeline on the clone, with the publisher's
// loop and its listener when artifactPub is set (closing the listener
// given when it is not), and closes the gate when the git server cannot
// push atomically.
func (ps *parts) buildPipeline(ctx context.Context, artifactPub *publish.Publisher, releases bool) error {
	o := ps.o
	var observer pipeline.Observer = metrics.PipelineObserver{M: ps.m, OnStep: func(jobs []pipeline.Job, step pipeline.Step) {
		ids := make([]string, len(jobs))
		for i, j := range jobs {
			ids[i] = j.MessageID
		}
		ps.rec.Update(ids, func(r *runs.Run) { r.Step = string(step) })
	}}
	artifactLn := ps.c.ArtifactListener
	switch {
	case artifactPub == nil && artifactLn != nil:
		_ = artifactLn.Close() // nothing to serve: refuse connections from now on
	case artifactPub != nil:
		pushes := publisher.NewPushes()
		observer = pushes.Observe(observer)
		if artifactLn == nil {
			var err error
			if artifactLn, err = net.Listen("tcp", o.ArtifactAddr); err != nil {
				return fmt.Errorf("ARTIFACT_ADDR: %w", err)
			}
			// Closed on every return, also one before its server starts
			// (the server's own close of it, at shutdown, comes first
			// otherwise).
			ps.closers = append(ps.closers, func() { _ = artifactLn.Close() })
		}
		ps.publisher = &publisher.Loop{Publisher: artifactPub, Listener: artifactLn, URL: o.ArtifactURL, Pushes: pushes}
	}
	ps.pipeline = pipeline.New(ps.repo, pipeline.Options{
		Layout: gitops.Layout{Root: o.GitopsRoot}, MaxAttempts: o.PushAttempts, Retention: ps.retention, Hold: o.Hold, Releases: releases,
		Observer: observer,
	})
	if ps.publisher != nil {
		ps.publisher.Branch = ps.pipeline
		artifactPub.BuildWith(rebuildFrom(ps.pipeline))
		artifactPub.CheckHeadWith(func(ctx context.Context) (string, error) {
			h, err := ps.repo.RemoteHead(ctx)
			return h.String(), err
		})
	}
	// The ledger moves with the branch in one atomic push: a server that
	// cannot do that would leave one moved without the other. Found at
	// start, as at a push, it is a pause with its cause, not an exit: the
	// consumers wait at the gate, and a probe opens it once the server
	// can (a failure to ask is the pause of its own cause).
	if err := ps.pipeline.CanPushAtomic(ctx); err != nil {
		cause, ok := worker.FaultOf(err)
		if !ok {
			cause = gate.GitUnreachable
		}
		ps.g.Close(cause, fmt.Errorf("%s: %w", o.GitRepoURL, err), ps.pipeline.CanPushAtomic)
	}
	return nil
}

// buildConsumers builds a consumer of every queue, and the watcher of
// their depths.
func (ps *parts) buildConsumers(ctx context.Context) {
	log := zerolog.Ctx(ctx)
	o := ps.o
	ps.consumers = make([]*queue.Consumer, len(ps.queues))
	for i, q := range ps.queues {
		kind := message.Kinds[i]
		ps.m.InitQueue(q.Name, worker.Outcomes)
		ps.rec.AddQueue(q.Name)
		log.Info().Str("queue", q.Name).Str("url", q.URL).Str("dead_letter_queue", q.DeadLetterURL).
			Dur("retention", q.Retention).Str("kind", string(kind)).Msg("consuming queue")
		observe := func(op string, err error) { ps.m.SQSErrors.WithLabelValues(q.Name, op).Inc() }
		ps.consumers[i] = queue.NewConsumer(ps.api, q, ps.worker.Handler(kind, q.Name), queue.Options{
			WaitTime: o.WaitTime, MaxMessages: o.MaxMessages, MaxBatch: o.MaxBatch, VisibilityTimeout: o.VisibilityTimeout,
			RetryDelay: o.RetryDelay, MaxRetryDelay: o.MaxRetryDelay, ShutdownGrace: o.ShutdownGrace,
			Hold: ps.g.Wait,
		}, observe)
	}
	ps.depths = &queuedepth.Watcher{API: ps.api, Queues: ps.queues, Metrics: ps.m, Runs: ps.rec, Every: o.QueueStatsEvery}
}

// followCluster builds the readiness follower, which the worker reports
// through, hands it the changes pushed before this start, and builds the
// check of the kinds the cluster serves.
func (ps *parts) followCluster(ctx context.Context, cluster *flux.Client) {
	o := ps.o
	ps.follower = follower(ctx, o, cluster, ps.repo, ps.worker, ps.m)
	ps.worker.Follow(ps.follower)
	rebuild(ctx, o, ps.repo, ps.follower)
	ps.served = &served.Watcher{Cluster: cluster, Templates: ps.pipeline, Layout: gitops.Layout{Root: o.GitopsRoot},
		Metrics: ps.m, Runs: ps.rec, OnReport: ps.setUnserved}
	zerolog.Ctx(ctx).Info().Str("namespace", o.FluxNamespace).Str("git_repository", o.FluxGitRepository).Strs("kustomizations", o.Kustomizations()).
		Bool("reconcile_requests", o.FluxReconcile).Dur("timeout", o.ReadyTimeout).Msg("following each pushed change into the cluster")
}

// run runs the parts as one group until ctx ends (nil, once the consumers
// have finished the messages in hand) or one of them fails (its error).
func (ps *parts) run(ctx context.Context) error {
	log := zerolog.Ctx(ctx)
	all := []group.Part{group.Loop(ps.depths.Run), group.Loop(ps.watchGate)}
	if ps.follower != nil {
		all = append(all, group.Loop(ps.follower.Run), group.Loop(ps.served.Run))
	}
	if ps.publisher != nil {
		all = append(all, group.Loop(ps.publisher.Run))
	}
	for _, c := range ps.consumers {
		all = append(all, group.Loop(c.Run))
	}
	every := holdCheck(ps.o.Hold, ps.retention)
	all = append(all,
		group.Loop(func(ctx context.Context) { ps.worker.EndHolds(ctx, every) }),
		group.Loop(func(ctx context.Context) {
			<-ctx.Done()
			log.Info().Msg("shutting down: no new messages; finishing the ones in hand")
		}),
	)
	if err := group.Run(ctx, all...); err != nil {
		return err
	}
	log.Info().Msg("stopped")
	return nil
}
