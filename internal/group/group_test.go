package group

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// untilDone is a part that runs until its context ends and counts the
// parts that did.
func untilDone(stopped *atomic.Int32) Part {
	return Part{Run: func(ctx context.Context) error {
		<-ctx.Done()
		stopped.Add(1)
		return ctx.Err()
	}}
}

// run runs the group in the background and returns its result channel.
func run(ctx context.Context, parts ...Part) <-chan error {
	done := make(chan error, 1)
	go func() { done <- Run(ctx, parts...) }()
	return done
}

func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the group did not return")
		return nil
	}
}

func TestAFailureStopsTheOthersAndIsReturned(t *testing.T) {
	var stopped atomic.Int32
	boom := errors.New("boom")
	fail := make(chan struct{})
	done := run(context.Background(),
		untilDone(&stopped),
		untilDone(&stopped),
		Part{Run: func(ctx context.Context) error { <-fail; return boom }},
		Part{Run: func(ctx context.Context) error { <-ctx.Done(); return errors.New("a later one") }},
	)
	close(fail)
	if err := result(t, done); err != boom {
		t.Fatalf("Run = %v, want the first failure as it is", err)
	}
	if n := stopped.Load(); n != 2 {
		t.Fatalf("%d of 2 parts stopped", n)
	}
}

func TestTheContextsEndStopsAllAndReturnsNil(t *testing.T) {
	var stopped atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := run(ctx,
		untilDone(&stopped),
		Loop(func(ctx context.Context) { <-ctx.Done(); stopped.Add(1) }),
		// A part may fail on its way out: the group was stopping anyway.
		Part{Run: func(ctx context.Context) error { <-ctx.Done(); stopped.Add(1); return errors.New("closed") }},
		Part{Run: func(ctx context.Context) error { <-ctx.Done(); stopped.Add(1); return nil }, Last: true},
	)
	cancel()
	if err := result(t, done); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if n := stopped.Load(); n != 4 {
		t.Fatalf("%d of 4 parts stopped", n)
	}
}

func TestAnEarlyNilLeavesTheOthersRunning(t *testing.T) {
	var stopped atomic.Int32
	returned := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := run(ctx,
		untilDone(&stopped),
		Part{Run: func(ctx context.Context) error { close(returned); return nil }},
		Part{Run: func(ctx context.Context) error { <-ctx.Done(); stopped.Add(1); return nil }, Last: true},
	)
	<-returned
	select {
	case err := <-done:
		t.Fatalf("Run returned %v after a part that is not essential returned nil", err)
	case <-time.After(50 * time.Millisecond):
	}
	if n := stopped.Load(); n != 0 {
		t.Fatalf("%d parts stopped after a part that is not essential returned nil", n)
	}
	cancel()
	if err := result(t, done); err != nil || stopped.Load() != 2 {
		t.Fatalf("Run = %v with %d of 2 parts stopped", err, stopped.Load())
	}
}

func TestAnEssentialPartsReturnStopsTheGroup(t *testing.T) {
	var stopped atomic.Int32
	done := run(context.Background(),
		untilDone(&stopped),
		Part{Run: func(ctx context.Context) error { return nil }, Essential: true},
	)
	if err := result(t, done); err != nil || stopped.Load() != 1 {
		t.Fatalf("Run = %v with %d of 1 part stopped", err, stopped.Load())
	}
}

func TestLastPartsOutlastTheOthers(t *testing.T) {
	finishing := make(chan struct{})
	var lastEndedEarly, othersDone atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := run(ctx,
		Part{Run: func(ctx context.Context) error {
			<-ctx.Done()
			<-finishing // the messages in hand
			othersDone.Store(true)
			return nil
		}},
		Part{Last: true, Run: func(lctx context.Context) error {
			<-lctx.Done()
			if !othersDone.Load() {
				lastEndedEarly.Store(true)
			}
			return nil
		}},
	)
	cancel()
	time.Sleep(20 * time.Millisecond)
	close(finishing)
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	if lastEndedEarly.Load() {
		t.Fatal("a last part's context ended before the others had returned")
	}
}

func TestALastPartsFailureStopsTheOthers(t *testing.T) {
	var stopped atomic.Int32
	boom := errors.New("listen: address in use")
	done := run(context.Background(),
		untilDone(&stopped),
		Part{Run: func(ctx context.Context) error { return boom }, Last: true},
	)
	if err := result(t, done); err != boom || stopped.Load() != 1 {
		t.Fatalf("Run = %v with %d of 1 part stopped", err, stopped.Load())
	}
}

func TestLastPartsKeepTheirContextsValues(t *testing.T) {
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "logger"))
	got := make(chan any, 1)
	done := run(ctx, Part{Last: true, Run: func(ctx context.Context) error {
		got <- ctx.Value(key{})
		<-ctx.Done()
		return nil
	}})
	if v := <-got; v != "logger" {
		t.Fatalf("value = %v", v)
	}
	cancel()
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
}
