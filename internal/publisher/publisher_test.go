package publisher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/publish"
)

type fakeBranch struct {
	sync      func() error
	readSince func() error
}

func (b fakeBranch) Sync(context.Context) (plumbing.Hash, error) { return plumbing.ZeroHash, b.sync() }

func (b fakeBranch) ReadSince(context.Context, string, int, func([]*gitrepo.Snapshot, bool) error) error {
	return b.readSince()
}

func TestAPushPublishesWithoutAFetchAndTheEndClosesTheListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var syncs, reads atomic.Int32
	read := make(chan struct{}, 1)
	l := &Loop{
		Publisher: publish.New(publish.Options{}),
		Listener:  ln,
		Pushes:    NewPushes(),
		Branch: fakeBranch{
			sync: func() error { syncs.Add(1); return errors.New("git server down") },
			readSince: func() error {
				reads.Add(1)
				read <- struct{}{}
				return nil
			},
		},
	}
	ctx, cancel := context.WithCancel(zerolog.Nop().WithContext(context.Background()))
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	l.Pushes <- struct{}{}
	select {
	case <-read:
	case <-time.After(5 * time.Second):
		t.Fatal("a push published nothing")
	}
	if syncs.Load() != 1 || reads.Load() != 1 {
		t.Fatalf("%d fetches and %d reads, want 1 and 1 (the fetch at start fails, the push reads the clone)", syncs.Load(), reads.Load())
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
	if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the listener was still open when Run returned (close: %v)", err)
	}
}

func TestOthersDropsTheTargetsParts(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	applying := fmt.Errorf("folder x: %w", publish.ErrApplying)
	if err := others(fmt.Errorf("publish: %w", errors.Join(a, applying, b)), publish.ErrApplying); !errors.Is(err, a) || !errors.Is(err, b) || errors.Is(err, publish.ErrApplying) {
		t.Fatalf("others = %v", err)
	}
	if err := others(errors.Join(applying), publish.ErrApplying); err != nil {
		t.Fatalf("others of the target alone = %v, want nil", err)
	}
	if err := others(applying, publish.ErrApplying); err != nil {
		t.Fatalf("others of an unjoined target = %v, want nil", err)
	}
	if err := others(a, publish.ErrApplying); err != a {
		t.Fatalf("others of another error = %v, want it", err)
	}
}

type countPushes struct {
	pipeline.Observer
	n int
}

func (c *countPushes) Pushed(pipeline.PushResult) { c.n++ }

func TestPushesSignalsSuccessfulPushesOnce(t *testing.T) {
	p := NewPushes()
	inner := &countPushes{}
	o := p.Observe(inner)
	o.Pushed(pipeline.PushSuccess)
	o.Pushed(pipeline.PushSuccess) // one is pending already: not blocked
	if inner.n != 2 || len(p) != 1 {
		t.Fatalf("observer heard %d, %d signals pending", inner.n, len(p))
	}
	<-p
	o.Pushed(pipeline.PushConflict)
	o.Pushed(pipeline.PushError)
	if inner.n != 4 || len(p) != 0 {
		t.Fatalf("a push that failed signalled (%d pending)", len(p))
	}
}
