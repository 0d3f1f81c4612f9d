package app

import (
	"context"
	"errors"
	"testing"
	"time"

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
