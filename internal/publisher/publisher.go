// Package publisher runs the publishing of the shard folders
// (internal/publish): it serves their archives on ARTIFACT_ADDR and
// publishes the branch after every push of this worker and every
// PublishEvery, until its context ends.
package publisher

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/publish"
)

// PublishEvery is how often the branch is published again without a push
// of this worker (another replica's push, a commit of someone else, an
// object deleted in the cluster is not seen by any other means).
const PublishEvery = 30 * time.Second

// maxHistory bounds the commits since the last publish whose changes are
// looked at; past it, every folder is written once.
const maxHistory = 64

// maxSuperseded bounds the publishes started again at once because the
// branch moved meanwhile; past it, the next push or tick publishes.
const maxSuperseded = 5

// applyingRetry is how often the Kustomizations of the folders held while
// they apply the archive before (publish.ErrApplying) are read again; the
// branch is published again once one is done.
const applyingRetry = time.Second

// shutdownGrace bounds the requests for archives in flight at the end.
const shutdownGrace = 5 * time.Second

// Branch is how the loop reads the branch: the pipeline, which holds the
// clone and its lock.
type Branch interface {
	// Sync fetches the branch.
	Sync(ctx context.Context) (plumbing.Hash, error)
	// ReadSince hands fn the commits since since, at most max.
	ReadSince(ctx context.Context, since string, max int, fn func(chain []*gitrepo.Snapshot, complete bool) error) error
}

// Loop serves Publisher's archives on Listener and publishes the branch
// read through Branch after every push Pushes signals and every
// PublishEvery.
type Loop struct {
	Publisher *publish.Publisher
	Branch    Branch
	Listener  net.Listener
	// URL is where the archives are fetched from (ARTIFACT_URL), for the
	// log.
	URL    string
	Pushes Pushes
}

// Run serves and publishes until ctx ends, then stops serving (within 5 s
// for the requests in flight). It closes the listener. A publish that
// fails is logged and tried again; a server that stops is logged.
func (l *Loop) Run(ctx context.Context) {
	log := zerolog.Ctx(ctx)
	srv := &http.Server{Handler: l.Publisher, ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(l.Listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("artifact server stopped")
		}
	})
	defer func() {
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		_ = srv.Shutdown(shut)
		wg.Wait()
	}()
	log.Info().Str("addr", l.Listener.Addr().String()).Str("url", l.URL).Msg("serving the shard folders' archives")
	tick := time.NewTicker(PublishEvery)
	defer tick.Stop()
	fetch := true // at start and on each tick: the branch may have moved without this worker
	superseded := 0
	for {
		err := l.publish(ctx, fetch)
		if errors.Is(err, publish.ErrSuperseded) && superseded < maxSuperseded && ctx.Err() == nil {
			// Another replica pushed (and publishes) a newer commit: fetch
			// it and publish it at once, rather than leave this replica's
			// objects a tick behind.
			log.Info().Err(err).Msg("a newer commit is on the branch; publishing it")
			superseded++
			fetch = true
			continue
		}
		superseded = 0
		var done bool
		if fetch, done = l.wait(ctx, err, tick.C); done {
			return
		}
	}
}

// publish publishes the branch, fetched first when fetch is set.
func (l *Loop) publish(ctx context.Context, fetch bool) error {
	log := zerolog.Ctx(ctx)
	pub := l.Publisher
	if fetch {
		// What this clone holds may be older than the branch: a publish
		// of it could make again what a newer commit took away. Without
		// the fetch nothing is published until the next tick (the head
		// check would refuse most of it anyway).
		if _, err := l.Branch.Sync(ctx); err != nil {
			if ctx.Err() == nil {
				log.Warn().Err(err).Msg("could not fetch the branch to publish it; publishing nothing until the next try")
			}
			return err
		}
		pub.Forget() // read every object again: one deleted or written elsewhere is made right
	}
	return l.Branch.ReadSince(ctx, pub.Last(), maxHistory, func(chain []*gitrepo.Snapshot, complete bool) error {
		// What the branch went through since the last publish: the
		// folders any of it changed are written even if they look
		// published, so that an older publish in flight is refused.
		h := publish.NewHistory(chain, complete)
		snap := chain[len(chain)-1]
		folders, err := pub.Publish(ctx, snap, snap.Commit.String(), h)
		for _, f := range folders {
			if f.Changed {
				log.Info().Str("external_artifact", f.Name).Str("revision", f.Revision).Str("commit", snap.Commit.String()).Msg("shard folder published")
			}
		}
		return err
	})
}

// wait logs err, the last publish's, and waits for the next publish: a
// push, a tick (fetch is then set), or, while a folder waits for its
// Kustomization's apply (publish.ErrApplying), that apply's end. done is
// set when ctx ended.
func (l *Loop) wait(ctx context.Context, err error, tick <-chan time.Time) (fetch, done bool) {
	log := zerolog.Ctx(ctx)
	var soon <-chan time.Time
	var retry *time.Timer
	switch {
	case err == nil || ctx.Err() != nil:
	case errors.Is(err, publish.ErrApplying):
		retry = time.NewTimer(applyingRetry)
		defer retry.Stop()
		soon = retry.C
		if errs := others(err, publish.ErrApplying); errs != nil {
			log.Warn().Err(errs).Msg("could not publish the shard folders; trying again")
		} else {
			log.Debug().Err(err).Msg("a shard folder waits for its Kustomization's apply")
		}
	default:
		log.Warn().Err(err).Msg("could not publish the shard folders; trying again")
	}
	for {
		select {
		case <-ctx.Done():
			return false, true
		case <-l.Pushes:
			return false, false
		case <-soon:
			// Read the held folders' Kustomizations, without the
			// repository lock; publish again once one is done.
			if !l.Publisher.Waiting(ctx) {
				return false, false
			}
			retry.Reset(applyingRetry)
		case <-tick:
			return true, false
		}
	}
}

// others is err without its parts that are target, nil when nothing else
// is left (a publish joins one error per folder).
func others(err, target error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			var kept []error
			for _, part := range j.Unwrap() {
				if !errors.Is(part, target) {
					kept = append(kept, part)
				}
			}
			return errors.Join(kept...)
		}
	}
	if errors.Is(err, target) {
		return nil
	}
	return err
}

// Pushes signals the loop each push of the pipeline; one signal waits at
// most.
type Pushes chan struct{}

// NewPushes returns a Pushes for one Loop.
func NewPushes() Pushes { return make(Pushes, 1) }

// Observe returns o, telling p of every push that succeeds too.
func (p Pushes) Observe(o pipeline.Observer) pipeline.Observer { return pushSignal{o, p} }

// pushSignal tells the publisher about every push the pipeline makes.
type pushSignal struct {
	pipeline.Observer
	ch Pushes
}

// Pushed tells the observer, then signals a push that succeeded.
func (s pushSignal) Pushed(r pipeline.PushResult) {
	s.Observer.Pushed(r)
	if r == pipeline.PushSuccess {
		select {
		case s.ch <- struct{}{}:
		default: // one is pending already
		}
	}
}
