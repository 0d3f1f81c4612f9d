// Package app wires the worker together in one place: settings, SQS client,
// clone, pipeline, consumers and the HTTP endpoints.
package app

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/rs/zerolog"

	wconfig "github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/credentials"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/group"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/signing"
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
//
// It reads as assembly, then run: the base (SQS client, metrics, run
// history, gate, HTTP endpoints) first; then, as one group with one
// cancellation, the endpoints (served from the start, through the waits
// for the repository and the queues, until every other part has stopped)
// and the worker: its parts are built on the repository and queues found
// (assemble), then run as a group of their own (parts.run). The first
// failure of a part stops every other and is returned.
func Run(ctx context.Context, c Config) error {
	ctx = c.Logger.WithContext(ctx)
	// The listeners given are Run's to close on every return: a return
	// before their servers start must not leave the caller's ports taken
	// (a server's own close of one at shutdown makes this one a no-op).
	for _, l := range []net.Listener{c.Listener, c.ArtifactListener} {
		if l != nil {
			defer l.Close()
		}
	}
	b, err := newBase(ctx, c)
	if err != nil {
		return err
	}
	return group.Run(ctx,
		group.Part{Run: b.serveHTTP, Last: true},
		group.Part{Run: b.start, Essential: true},
	)
}

// start assembles the worker's parts and runs them until ctx ends; nil
// when ctx ends while it waits for the repository or a queue.
func (b *base) start(ctx context.Context) error {
	ps, err := b.assemble(ctx)
	if errors.Is(err, errStopped) {
		return nil // ctx ended while starting: a clean stop
	}
	if err != nil {
		return err
	}
	defer ps.close()
	return ps.run(ctx)
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
