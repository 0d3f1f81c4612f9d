package app

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/rs/zerolog"

	wconfig "github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/credentials"
)

func TestRetryUntilItWorksOrTheContextEnds(t *testing.T) {
	ctx := zerolog.Nop().WithContext(context.Background())
	calls := 0
	err := retry(ctx, "work", func() error {
		calls++
		if calls < 2 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("retry = %v after %d calls", err, calls)
	}
	ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := retry(ctx, "work", func() error { return errors.New("never") }); err == nil {
		t.Fatal("retry returned nil although every call failed")
	}
	if time.Since(start) > 900*time.Millisecond {
		t.Fatal("retry did not stop when its context ended")
	}
}

func TestRepoOptionsCarryEverySetting(t *testing.T) {
	o := wconfig.Default()
	o.GitRepoURL, o.GitCloneDir, o.GitTimeout = "https://git.example/org/repo.git", "/clone", 7*time.Second
	creds := credentials.Static("admin", "tok")
	r := RepoOptions(o, creds)
	if r.URL != o.GitRepoURL || r.Branch != "main" || r.Dir != "/clone" || r.Timeout != 7*time.Second ||
		r.AuthorName != "admin" || r.AuthorEmail != "admin@example.com" || r.Credentials != creds {
		t.Fatalf("RepoOptions = %+v", r)
	}
	if r.Token != "" {
		t.Fatal("the token must travel only in the credentials provider")
	}
}

// TestListenersGivenAreClosedOnEveryReturn: Run owns the listeners it is
// given. One that returns before serving them (here: the context ends
// while the repository is opened) must close them too, or the caller's
// ports stay taken.
func TestListenersGivenAreClosedOnEveryReturn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	artifactLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := wconfig.Default()
	o.GitRepoURL = "http://127.0.0.1:1/gitops.git" // never reached: the context has ended
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	api := sqs.New(sqs.Options{Region: "us-east-1"}) // never called
	if err := Run(ctx, Config{Options: o, Logger: zerolog.Nop(), Listener: ln, ArtifactListener: artifactLn, SQS: api}); err != nil {
		t.Fatalf("Run = %v, want nil (a stop while starting)", err)
	}
	// Closing again says whether Run closed them: the first close of a
	// listener succeeds, a second one fails. The artifact listener is the
	// one a former Run left open on this path; the HTTP one it closed only
	// later, from its server's goroutine, so that check fails on the
	// former Run only when this runs first. Both must be closed at return.
	for name, l := range map[string]net.Listener{"HTTP": ln, "artifact": artifactLn} {
		if err := l.Close(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("the %s listener was still open when Run returned (close: %v)", name, err)
		}
	}
}

// TestEndpointsServeWhileStartingAndStopWithRun: the endpoints serve from
// the start, /readyz saying what the worker waits for (here: a git server
// that refuses connections); when ctx ends meanwhile, Run returns nil and
// the endpoints are gone.
func TestEndpointsServeWhileStartingAndStopWithRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := wconfig.Default()
	o.GitRepoURL = "http://127.0.0.1:1/gitops.git" // refuses connections
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Options: o, Logger: zerolog.Nop(), Listener: ln, SQS: sqs.New(sqs.Options{Region: "us-east-1"})})
	}()
	url := "http://" + ln.Addr().String() + "/readyz"
	var last string
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(last, "not ready: repository:"); {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never said the repository is awaited; last: %q", last)
		}
		if resp, err := http.Get(url); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil (a stop while starting)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Fatal("the endpoints still serve after Run returned")
	}
}
