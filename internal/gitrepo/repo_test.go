package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
)

const token = "s3cr3t-token-value"

func startServer(t *testing.T) (*gitserver.Server, string) {
	t.Helper()
	srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	url, err := srv.CreateRepo("gitops.git", "main", fstest.MapFS{
		"a/one.yaml": {Data: []byte("one\n")},
		"b/two.yaml": {Data: []byte("two\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv, url
}

func open(t *testing.T, url, dir, tok string) (*Repo, error) {
	return Open(context.Background(), Options{URL: url, Branch: "main", Username: "admin", Token: tok, Dir: dir,
		AuthorName: "admin", AuthorEmail: "admin@example.com"})
}

func TestCommitAndPush(t *testing.T) {
	srv, url := startServer(t)
	dir := t.TempDir()
	r, err := open(t, url, dir, token)
	if err != nil {
		t.Fatal(err)
	}
	parent := r.Head()
	c, err := r.Commit(parent, map[string][]byte{
		"a/new.yaml":   []byte("new\n"),
		"b/two.yaml":   nil,
		"c/d/e/f.yaml": []byte("deep\n"),
	}, "Adding new tenant x in tier y")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Push(context.Background(), parent, c); err != nil {
		t.Fatal(err)
	}
	files, err := srv.Output("gitops.git", "ls-tree", "-r", "--name-only", "main")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(files); strings.Join(got, ",") != "a/new.yaml,a/one.yaml,c/d/e/f.yaml" {
		t.Fatalf("remote tree = %v", got)
	}
	// git itself must accept the objects we wrote by hand.
	if out, err := srv.Output("gitops.git", "fsck", "--strict"); err != nil {
		t.Fatalf("fsck: %v %s", err, out)
	}
	log, _ := srv.Output("gitops.git", "log", "-1", "--format=%an <%ae>|%s")
	if strings.TrimSpace(log) != "admin <admin@example.com>|Adding new tenant x in tier y" {
		t.Fatalf("commit = %q", log)
	}
	// The token must not be written to the clone's config.
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if strings.Contains(string(b), token) {
			t.Errorf("token written to %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Reopening the clone directory works and sees the pushed head.
	r2, err := open(t, url, dir, token)
	if err != nil || r2.Head() != c {
		t.Fatalf("reopen: head %s, err %v; want %s", r2.Head(), err, c)
	}
}

func TestPushConflict(t *testing.T) {
	for _, when := range []string{"before advertisement", "after advertisement"} {
		t.Run(when, func(t *testing.T) {
			srv, url := startServer(t)
			r, err := open(t, url, "", token)
			if err != nil {
				t.Fatal(err)
			}
			parent := r.Head()
			c, err := r.Commit(parent, map[string][]byte{"a/mine.yaml": []byte("mine\n")}, "mine")
			if err != nil {
				t.Fatal(err)
			}
			var fired atomic.Bool
			srv.SetHook(func(w http.ResponseWriter, req *http.Request) bool {
				trigger := strings.HasSuffix(req.URL.Path, "/info/refs") && req.URL.Query().Get("service") == "git-receive-pack"
				if when == "after advertisement" {
					trigger = req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/git-receive-pack")
				}
				if trigger && fired.CompareAndSwap(false, true) {
					if err := srv.WriteFile("gitops.git", "main", "a/theirs.yaml", "theirs\n", "image automation"); err != nil {
						t.Error(err)
					}
				}
				return true
			})
			err = r.Push(context.Background(), parent, c)
			if !IsConflict(err) {
				t.Fatalf("Push = %v, want a conflict", err)
			}
			if r.Head() != parent {
				t.Fatal("head moved after a failed push")
			}
			head, err := r.Fetch(context.Background())
			if err != nil || head == parent {
				t.Fatalf("fetch after conflict: %s %v", head, err)
			}
			snap, _ := r.Snapshot(head)
			if b, err := snap.ReadFile("a/theirs.yaml"); err != nil || string(b) != "theirs\n" {
				t.Fatalf("their change not fetched: %q %v", b, err)
			}
		})
	}
}

func TestAuthFailure(t *testing.T) {
	_, url := startServer(t)
	_, err := open(t, url, "", "wrong-token")
	if !IsAuth(err) {
		t.Fatalf("Open with a wrong token = %v, want an auth error", err)
	}
	if strings.Contains(err.Error(), "wrong-token") {
		t.Fatal("error shows the token")
	}
}

func TestSnapshot(t *testing.T) {
	_, url := startServer(t)
	r, err := open(t, url, "", token)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Snapshot(r.Head())
	if err != nil {
		t.Fatal(err)
	}
	if names, err := s.ReadDir("a"); err != nil || strings.Join(names, ",") != "one.yaml" {
		t.Fatalf("ReadDir = %v %v", names, err)
	}
	if _, err := s.ReadFile("a/missing.yaml"); !os.IsNotExist(err) {
		t.Fatalf("missing file: %v", err)
	}
	var walked []string
	if err := s.WalkFiles("b", func(name string, _ []byte) error { walked = append(walked, name); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(walked, ",") != "b/two.yaml" {
		t.Fatalf("WalkFiles = %v", walked)
	}
	empty, _ := r.Snapshot(plumbing.ZeroHash)
	if _, err := empty.ReadFile("a/one.yaml"); !os.IsNotExist(err) {
		t.Fatal("empty snapshot has files")
	}
}

func TestCompaction(t *testing.T) {
	srv, url := startServer(t)
	for _, dir := range []string{"", t.TempDir() + "/clone"} {
		r, err := open(t, url, dir, token)
		if err != nil {
			t.Fatal(err)
		}
		r.compactEvery = 3
		for i := 0; i < 10; i++ {
			head := r.Head()
			c, err := r.Commit(head, map[string][]byte{"a/one.yaml": []byte(strings.Repeat("x", i+1))}, "edit")
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Push(context.Background(), head, c); err != nil {
				t.Fatalf("push %d (dir %q): %v", i, dir, err)
			}
			if i%2 == 0 {
				if err := srv.WriteFile("gitops.git", "main", "b/other.txt", strings.Repeat("y", i+1), "other"); err != nil {
					t.Fatal(err)
				}
				if _, err := r.Fetch(context.Background()); err != nil {
					t.Fatalf("fetch after compaction (dir %q): %v", dir, err)
				}
			}
		}
		if r.compactedSize == 0 {
			t.Fatalf("never compacted (dir %q)", dir)
		}
		if _, _, err := r.CommitInfo(r.Head()); err != nil {
			t.Fatal(err)
		}
		snap, _ := r.Snapshot(r.Head())
		if b, err := snap.ReadFile("a/one.yaml"); err != nil || string(b) != strings.Repeat("x", 10) {
			t.Fatalf("after compaction: %q %v", b, err)
		}
		if out, err := srv.Output("gitops.git", "fsck", "--strict"); err != nil {
			t.Fatalf("fsck: %v %s", err, out)
		}
	}
}

// TestCancelledCallIsNotTheServers: the caller's context is cancelled with
// a cause (a shutdown whose grace ran out) while the server holds the
// request. The fetch's and the push's errors are that cancellation, with
// its cause, never "git server unavailable", which would pause the worker.
func TestCancelledCallIsNotTheServers(t *testing.T) {
	srv, url := startServer(t)
	r, err := open(t, url, t.TempDir(), token)
	if err != nil {
		t.Fatal(err)
	}
	parent := r.Head()
	c, err := r.Commit(parent, map[string][]byte{"a/new.yaml": []byte("new\n")}, "change")
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("shutdown grace period over")
	for _, tc := range []struct {
		name, service string
		call          func(context.Context) error
	}{
		{"fetch", "git-upload-pack", func(ctx context.Context) error { _, err := r.Fetch(ctx); return err }},
		{"push", "git-receive-pack", func(ctx context.Context) error { return r.Push(ctx, parent, c) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			var held atomic.Int32
			srv.SetHook(func(w http.ResponseWriter, req *http.Request) bool {
				if req.URL.Query().Get("service") != tc.service && !strings.HasSuffix(req.URL.Path, "/"+tc.service) {
					return true
				}
				// The call is in flight: the grace runs out, and the
				// server holds the request until the client goes away
				// (which it sees once the body is read).
				held.Add(1)
				cancel(cause)
				_, _ = io.Copy(io.Discard, req.Body)
				<-req.Context().Done()
				return false
			})
			defer srv.SetHook(nil)
			err := tc.call(ctx)
			if held.Load() == 0 {
				t.Fatal("the server never held a request: the fault did not happen")
			}
			if !errors.Is(err, context.Canceled) || !strings.Contains(fmt.Sprint(err), cause.Error()) {
				t.Errorf("error %v: want context.Canceled with its cause", err)
			}
			if IsUnavailable(err) || IsAuth(err) || IsConflict(err) {
				t.Errorf("error %v is classed as the server's", err)
			}
		})
	}
}
