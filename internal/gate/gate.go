// Package gate holds the worker back while the git server or the repository
// is at fault. Receiving messages that can only fail would count a receive
// against each of them, and after the queue's maxReceiveCount SQS moves them
// to the dead-letter queue unapplied. So the consumers wait at a closed gate
// (receive counts stop climbing), and a prober opens it again once the fault
// is gone.
package gate

import (
	"context"
	"sync"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/wait"
)

// Cause says what is at fault, the value of the metric's "cause" label.
type Cause string

// The causes that close the gate.
const (
	// GitUnreachable: the server does not answer, or answers with an error.
	GitUnreachable Cause = "git_unreachable"
	// GitCredentials: the server refuses the credentials (401, 403).
	GitCredentials Cause = "git_credentials"
	// RepositoryBroken: a template does not render, the branch does not
	// build: no message of that kind and tier can pass until someone fixes it.
	RepositoryBroken Cause = "repository_broken"
	// GitUnsupported: the server lacks what the worker needs of it (git's
	// atomic push, to move the ledger branch with the branch).
	GitUnsupported Cause = "git_unsupported"
)

// Causes lists every cause, for pre-initialising metrics.
var Causes = []Cause{GitUnreachable, GitCredentials, RepositoryBroken, GitUnsupported}

// Probe checks whether a fault is gone; nil opens the gate.
type Probe func(ctx context.Context) error

// Fault is why the gate is closed.
type Fault struct {
	Cause Cause     `json:"cause"`
	Error string    `json:"error"`
	Since time.Time `json:"since"`
	// Probes counts the probes that found the fault still there.
	Probes int `json:"probes"`
	probe  Probe
}

// Gate is open unless a fault closed it. The zero value is not usable: use New.
type Gate struct {
	mu     sync.Mutex
	fault  *Fault
	open   chan struct{} // closed while the gate is open
	closed chan struct{} // closed while the gate is closed
	// OnChange, if set, is called (without mu) when the gate opens or
	// closes, for metrics and logs. notify is taken before mu is let go, so
	// the calls come one at a time and in the order of the changes: a
	// close that follows an open is never reported before it.
	onChange func(f *Fault)
	notify   sync.Mutex
	// classify, if set, names the cause of a probe's error: a fault that
	// turns out to be another (git back, but without atomic pushes) is
	// paused for that one from then on.
	classify func(error) (Cause, bool)
}

// ClassifyWith makes the gate name the cause of each failed probe's error
// with fn (before the gate watches).
func (g *Gate) ClassifyWith(fn func(error) (Cause, bool)) { g.classify = fn }

// New returns an open gate. onChange, if not nil, hears of every change:
// the new fault, or nil when the gate opened.
func New(onChange func(f *Fault)) *Gate {
	g := &Gate{open: make(chan struct{}), closed: make(chan struct{}), onChange: onChange}
	close(g.open)
	return g
}

// Close closes the gate for cause, unless it is closed already; probe tells
// when the fault is gone.
func (g *Gate) Close(cause Cause, err error, probe Probe) {
	g.mu.Lock()
	if g.fault != nil {
		g.mu.Unlock()
		return
	}
	f := &Fault{Cause: cause, Error: err.Error(), Since: time.Now(), probe: probe}
	g.fault = f
	g.open = make(chan struct{})
	close(g.closed)
	g.announce(f)
}

// Open opens the gate.
func (g *Gate) Open() {
	g.mu.Lock()
	if g.fault == nil {
		g.mu.Unlock()
		return
	}
	g.fault = nil
	g.closed = make(chan struct{})
	close(g.open)
	g.announce(nil)
}

// announce reports a change (f, nil for open) to onChange, in the order the
// changes were made: it takes the notify lock before it lets g.mu go, which
// the caller holds.
func (g *Gate) announce(f *Fault) {
	g.notify.Lock()
	g.mu.Unlock()
	defer g.notify.Unlock()
	if g.onChange != nil {
		g.onChange(f)
	}
}

func (g *Gate) classifyErr(err error) (Cause, bool) {
	if g.classify == nil {
		return "", false
	}
	return g.classify(err)
}

// Wait returns once the gate is open, or with ctx's error.
func (g *Gate) Wait(ctx context.Context) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Fault returns a copy of why the gate is closed, or nil when it is open.
func (g *Gate) Fault() *Fault {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fault == nil {
		return nil
	}
	f := *g.fault
	return &f
}

// Backoff bounds the pauses between probes.
type Backoff struct{ First, Max time.Duration }

// Watch probes a closed gate, with pauses doubling from b.First to b.Max,
// and opens it when its probe passes; it returns when ctx ends. onProbe,
// if set, hears each probe's result.
func (g *Gate) Watch(ctx context.Context, b Backoff, onProbe func(f Fault, err error)) {
	for {
		g.mu.Lock()
		closed := g.closed
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-closed:
		}
		delay := b.First
		for {
			if wait.Sleep(ctx, delay) != nil {
				return
			}
			g.mu.Lock()
			f := g.fault
			g.mu.Unlock()
			if f == nil {
				break
			}
			err := f.probe(ctx)
			if err != nil {
				g.mu.Lock()
				f.Probes++
				f.Error = err.Error()
				if c, ok := g.classifyErr(err); ok && c != f.Cause && g.fault == f {
					f.Cause = c
					changed := *f
					g.announce(&changed) // lets g.mu go
				} else {
					g.mu.Unlock()
				}
			}
			if onProbe != nil {
				onProbe(*f, err)
			}
			if err == nil {
				g.Open()
				break
			}
			delay = min(delay*2, b.Max)
		}
	}
}
