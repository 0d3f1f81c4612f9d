// Package group runs the worker's long-running parts (loops, servers) as
// one: one cancellation for all of them, and one error, the first a part
// fails with.
package group

import (
	"context"
	"errors"
	"sync"
)

// Part is one long-running part of a group.
type Part struct {
	// Run runs the part until its context ends. An error it returns
	// stops the group, and Run returns it as it is: it says itself what
	// failed. One it returns once the group's context has ended, or the
	// context.Canceled of a group that is stopping, is taken for its
	// stop.
	Run func(ctx context.Context) error
	// Essential stops the group when the part returns, with nil too: the
	// group has no point without it. A part that is not essential may
	// return nil early and leave the others running.
	Essential bool
	// Last parts run until every other part has returned: their context
	// ends only then. The endpoints that report on the others stay up
	// while those finish.
	Last bool
}

// Loop is a part of run, a loop that stops only when its context ends
// and has no failure of its own (it logs and tries again).
func Loop(run func(ctx context.Context)) Part {
	return Part{Run: func(ctx context.Context) error {
		run(ctx)
		return nil
	}}
}

// Run starts every part and waits for all of them. The group stops when
// ctx ends, when a part fails or when an essential part returns: the
// context of every part ends (that of the last parts once the others have
// returned), and Run returns, once all have, the first failure, or nil
// when there was none.
func Run(ctx context.Context, parts ...Part) error {
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	// The last parts keep ctx's values, not its end: theirs is ended by
	// the group.
	lctx, stopLast := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLast()

	var (
		mu    sync.Mutex
		first error
	)
	ended := func(p Part, err error) {
		stopping := gctx.Err() != nil && errors.Is(err, context.Canceled)
		if err != nil && ctx.Err() == nil && !stopping {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
			stop()
		}
		if p.Essential {
			stop()
		}
	}
	var others, last sync.WaitGroup
	for _, p := range parts {
		pctx, wg := gctx, &others
		if p.Last {
			pctx, wg = lctx, &last
		}
		wg.Go(func() { ended(p, p.Run(pctx)) })
	}
	others.Wait()
	// Every other part may have returned early, nil: the last ones run
	// until the group stops.
	<-gctx.Done()
	stopLast()
	last.Wait()
	mu.Lock()
	defer mu.Unlock()
	return first
}
