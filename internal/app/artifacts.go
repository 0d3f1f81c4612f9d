package app

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/rs/zerolog"
	"k8s.io/client-go/dynamic"

	wconfig "github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/publish"
)

// publishEvery is how often the branch is published again without a push
// of this worker (another replica's push, a commit of someone else, an
// object deleted in the cluster is not seen by any other means).
const publishEvery = 30 * time.Second

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

// artifacts makes the publisher of ARTIFACT_URL, or nil without it.
func artifacts(o wconfig.Options) (*publish.Publisher, error) {
	if o.ArtifactURL == "" {
		return nil, nil
	}
	cfg, err := flux.LoadConfig(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, errors.New("ARTIFACT_URL needs cluster access: KUBECONFIG, or run in a pod")
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var template string
	if ks := o.Kustomizations(); len(ks) > 0 {
		template = ks[0]
	}
	return publish.New(publish.Options{Layout: gitops.Layout{Root: o.GitopsRoot}, Namespace: o.FluxNamespace,
		URL: o.ArtifactURL, Client: dyn, Branch: o.GitBranch, Template: template, Interval: o.ArtifactInterval}), nil
}

// rebuildFrom lets the publisher build again, from p's clone, an archive
// another replica published.
func rebuildFrom(p *pipeline.Pipeline) func(ctx context.Context, commit string, fn func(publish.Source) error) error {
	return func(ctx context.Context, commit string, fn func(publish.Source) error) error {
		h := plumbing.NewHash(commit)
		if h.String() != commit {
			return errors.New("not a commit")
		}
		return p.ReadAt(ctx, h, func(r gitops.Reader) error {
			src, ok := r.(publish.Source)
			if !ok {
				return errors.New("the branch is not a git snapshot")
			}
			return fn(src)
		})
	}
}

// servePublisher serves the archives on ARTIFACT_ADDR and publishes the
// branch after every push (pushed is signalled) and every publishEvery,
// until ctx ends.
func servePublisher(ctx context.Context, o wconfig.Options, ln net.Listener, pub *publish.Publisher, p *pipeline.Pipeline, pushed <-chan struct{}) {
	log := zerolog.Ctx(ctx)
	srv := &http.Server{Handler: pub, ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("artifact server stopped")
		}
	})
	log.Info().Str("addr", ln.Addr().String()).Str("url", o.ArtifactURL).Msg("serving the shard folders' archives")
	tick := time.NewTicker(publishEvery)
	defer tick.Stop()
	fetch := true // at start and on each tick: the branch may have moved without this worker
	superseded := 0
	for {
		var err error
		if fetch {
			// What this clone holds may be older than the branch: a
			// publish of it could make again what a newer commit took
			// away. Without the fetch nothing is published until the next
			// tick (the head check would refuse most of it anyway).
			if _, err = p.Sync(ctx); err != nil && ctx.Err() == nil {
				log.Warn().Err(err).Msg("could not fetch the branch to publish it; publishing nothing until the next try")
			}
			if err == nil {
				pub.Forget() // read every object again: one deleted or written elsewhere is made right
			}
		}
		if err == nil {
			err = p.ReadSince(ctx, pub.Last(), maxHistory, func(chain []*gitrepo.Snapshot, complete bool) error {
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
		var soon <-chan time.Time
		var retry *time.Timer
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, publish.ErrApplying):
			retry = time.NewTimer(applyingRetry)
			soon = retry.C
			if errs := others(err, publish.ErrApplying); errs != nil {
				log.Warn().Err(errs).Msg("could not publish the shard folders; trying again")
			} else {
				log.Debug().Err(err).Msg("a shard folder waits for its Kustomization's apply")
			}
		default:
			log.Warn().Err(err).Msg("could not publish the shard folders; trying again")
		}
		for waiting := true; waiting; {
			waiting = false
			select {
			case <-ctx.Done():
				shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				srv.Shutdown(shut)
				cancel()
				wg.Wait()
				return
			case <-pushed:
				fetch = false
			case <-soon:
				fetch = false
				// Read the held folders' Kustomizations, without the
				// repository lock; publish again once one is done.
				if waiting = pub.Waiting(ctx); waiting {
					retry.Reset(applyingRetry)
				}
			case <-tick.C:
				fetch = true
			}
		}
		if retry != nil {
			retry.Stop()
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

// pushSignal tells the publisher about every push the pipeline makes.
type pushSignal struct {
	pipeline.Observer
	ch chan struct{}
}

func (s pushSignal) Pushed(r pipeline.PushResult) {
	s.Observer.Pushed(r)
	if r == pipeline.PushSuccess {
		select {
		case s.ch <- struct{}{}:
		default: // one is pending already
		}
	}
}
