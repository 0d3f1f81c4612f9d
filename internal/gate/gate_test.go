package gate

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestGateHoldsUntilTheProbePasses(t *testing.T) {
	var changes []string
	g := New(func(f *Fault) {
		if f == nil {
			changes = append(changes, "open")
		} else {
			changes = append(changes, string(f.Cause))
		}
	})
	if err := g.Wait(context.Background()); err != nil || g.Fault() != nil {
		t.Fatal("a new gate is not open")
	}
	var probes atomic.Int32
	fixed := make(chan struct{})
	g.Close(GitUnreachable, errors.New("connection refused"), func(context.Context) error {
		if probes.Add(1) == 3 {
			close(fixed)
			return nil
		}
		return errors.New("still refused")
	})
	g.Close(RepositoryBroken, errors.New("ignored: already closed"), nil)
	if f := g.Fault(); f == nil || f.Cause != GitUnreachable || f.Error != "connection refused" {
		t.Fatalf("fault %+v", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	if err := g.Wait(ctx); err == nil {
		t.Fatal("Wait passed a closed gate")
	}
	cancel()

	watch, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Watch(watch, Backoff{First: time.Millisecond, Max: 4 * time.Millisecond}, nil); close(done) }()
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-fixed
	if probes.Load() != 3 || g.Fault() != nil {
		t.Fatalf("%d probes, fault %+v", probes.Load(), g.Fault())
	}
	// It closes again, and the watcher is still there.
	g.Close(GitCredentials, errors.New("401"), func(context.Context) error { return nil })
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop()
	<-done
	if want := "git_unreachable,open,git_credentials,open"; join(changes) != want {
		t.Fatalf("changes %s, want %s", join(changes), want)
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}
