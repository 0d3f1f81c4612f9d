// Package pipeline carries out one request against the GitOps repository:
// sync the clone, render the change, commit it, validate the committed tree,
// push. One Pipeline
// serves one repository and branch and runs one request at a time; its lock
// stands in for the Argo Workflows mutex of the reference platform.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/validate"
)

// Repository is what the pipeline needs of a clone.
type Repository interface {
	Fetch(ctx context.Context) (plumbing.Hash, error)
	Snapshot(commit plumbing.Hash) (*gitrepo.Snapshot, error)
	Commit(parent plumbing.Hash, files map[string][]byte, msg string) (plumbing.Hash, error)
	Push(ctx context.Context, parent, commit plumbing.Hash) error
}

// State is what the steps of one attempt share.
type State struct {
	Request message.Request
	Base    plumbing.Hash     // the branch head the change is computed on
	Before  *gitrepo.Snapshot // the tree at Base
	Change  gitops.Change
	Commit  plumbing.Hash
	// Done ends the attempt early with success (nothing to push).
	Done bool
}

// Step is one stage of an attempt.
type Step interface {
	Name() string
	Run(ctx context.Context, s *State) error
}

// Result is the outcome of a request that succeeded.
type Result struct {
	// Commit is the pushed commit, or the branch head for a no-op.
	Commit plumbing.Hash
	// Applied is false when the request was already carried out.
	Applied bool
	// Message is the commit message.
	Message string
	// Attempts counts pushes tried (0 for a no-op).
	Attempts int
	// Steps holds the total time spent in each step.
	Steps map[string]time.Duration
}

// Options configure a Pipeline.
type Options struct {
	Layout gitops.Layout
	// MaxAttempts bounds the push attempts of one request after lost races.
	MaxAttempts int
	// RetryDelay is the base of the jittered delay between attempts.
	RetryDelay time.Duration
}

// Pipeline applies requests to one repository and branch, one at a time.
type Pipeline struct {
	repo    Repository
	opts    Options
	steps   []Step
	metrics *metrics.Metrics
	lock    chan struct{}
}

// New builds the pipeline: sync, render, commit, validate, push.
func New(repo Repository, opts Options, m *metrics.Metrics) *Pipeline {
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 5
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = 50 * time.Millisecond
	}
	return &Pipeline{
		repo: repo,
		opts: opts,
		steps: []Step{
			syncStep{repo: repo},
			renderStep{layout: opts.Layout},
			commitStep{repo: repo},
			validateStep{repo: repo, checker: validate.Checker{Layout: opts.Layout}},
			pushStep{repo: repo, metrics: m},
		},
		metrics: m,
		lock:    make(chan struct{}, 1),
	}
}

// Apply carries out req. A reject.Error means the request can never succeed;
// any other error is transient.
func (p *Pipeline) Apply(ctx context.Context, req message.Request) (Result, error) {
	waited := time.Now()
	select {
	case p.lock <- struct{}{}:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("wait for the repository lock: %w", context.Cause(ctx))
	}
	// The lock is a buffered channel released by this defer: it cannot leak
	// past the call, whatever happens inside.
	defer func() { <-p.lock }()
	p.metrics.LockWait.Observe(time.Since(waited).Seconds())

	log := zerolog.Ctx(ctx)
	res := Result{Steps: map[string]time.Duration{}}
	for attempt := 1; ; attempt++ {
		s := &State{Request: req}
		err := p.attempt(ctx, s, res.Steps)
		if s.Change.Message != "" {
			res.Message = s.Change.Message
		}
		if err == nil {
			res.Applied = !s.Done
			res.Commit = s.Commit
			if s.Done {
				res.Commit = s.Base
			} else {
				res.Attempts = attempt
			}
			return res, nil
		}
		if !gitrepo.IsConflict(err) || attempt >= p.opts.MaxAttempts {
			res.Attempts = attempt
			return res, err
		}
		delay := p.opts.RetryDelay*time.Duration(attempt) + rand.N(p.opts.RetryDelay)
		log.Info().Err(err).Int("attempt", attempt).Dur("retry_in", delay).Msg("push lost a race; re-applying on the new head")
		if err := sleep(ctx, delay); err != nil {
			return res, err
		}
	}
}

func (p *Pipeline) attempt(ctx context.Context, s *State, spent map[string]time.Duration) error {
	for _, step := range p.steps {
		start := time.Now()
		err := step.Run(ctx, s)
		d := time.Since(start)
		spent[step.Name()] += d
		p.metrics.StepDuration.WithLabelValues(step.Name()).Observe(d.Seconds())
		if err != nil {
			return err
		}
		if s.Done {
			return nil
		}
	}
	return nil
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return errors.Join(errors.New("interrupted while waiting to retry"), context.Cause(ctx))
	}
}
