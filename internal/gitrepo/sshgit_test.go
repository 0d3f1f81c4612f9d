package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/tenant-worker/tenant-worker/internal/credentials"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
)

// sshGit is an SSH server in front of git's own upload-pack and
// receive-pack on one bare repository, gitops.git. A service set mute
// opens its session and then says nothing.
type sshGit struct {
	addr, repo, key, known string
	mu                     sync.Mutex
	mute                   map[string]bool
}

func (s *sshGit) setMute(service string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mute[service] = true
}

func (s *sshGit) muted(service string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mute[service]
}

func startSSHGit(t *testing.T) *sshGit {
	t.Helper()
	s := &sshGit{repo: filepath.Join(t.TempDir(), "gitops.git"), mute: map[string]bool{}}
	if err := gitserver.Git(".", "init", "-q", "--bare", s.repo); err != nil {
		t.Fatal(err)
	}
	if err := gitserver.Seed(fstest.MapFS{"a/one.yaml": {Data: []byte("one\n")}}, "main", s.repo); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	var host ssh.Signer
	s.key, s.known, host = sshKeys(t, s.addr)
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) { return nil, nil }}
	cfg.AddHostKey(host)
	serveConns(t, ln, func(c net.Conn) { s.serve(c, cfg) })
	return s
}

func (s *sshGit) serve(c net.Conn, cfg *ssh.ServerConfig) {
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go s.session(ch, creqs)
	}
}

// session runs the one exec request of a git client.
func (s *sshGit) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	for req := range reqs {
		if req.Type != "exec" {
			_ = req.Reply(false, nil)
			continue
		}
		var p struct{ Cmd string }
		if err := ssh.Unmarshal(req.Payload, &p); err != nil {
			_ = req.Reply(false, nil)
			continue
		}
		_ = req.Reply(true, nil)
		go ssh.DiscardRequests(reqs)
		service, _, _ := strings.Cut(p.Cmd, " ")
		if s.muted(service) {
			return // the channel stays open, and silent
		}
		cmd := exec.Command("git", strings.TrimPrefix(service, "git-"), s.repo)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			ch.Close()
			return
		}
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		if err := cmd.Start(); err != nil {
			ch.Close()
			return
		}
		go func() { _, _ = io.Copy(stdin, ch); stdin.Close() }()
		code := 0
		var exit *exec.ExitError
		if err := cmd.Wait(); errors.As(err, &exit) {
			code = exit.ExitCode()
		}
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
		ch.Close()
		return
	}
}

func (s *sshGit) open(t *testing.T, timeout time.Duration, walking bool) *Repo {
	t.Helper()
	creds, err := credentials.SSHKeyFile("git", s.addr, s.key, "", s.known, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(context.Background(), Options{URL: "ssh://git@" + s.addr + "/gitops.git", Branch: "main", Credentials: creds,
		AuthorName: "w", AuthorEmail: "w@example.com", Timeout: timeout, WalkingPush: walking})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSSHRoundTrip: every call, over a real SSH git server, goes through
// the call dialer and works, and no call is left registered.
func TestSSHRoundTrip(t *testing.T) {
	for _, walking := range []bool{false, true} {
		t.Run(fmt.Sprint("walking=", walking), func(t *testing.T) {
			s := startSSHGit(t)
			before := callSeq.Load()
			r := s.open(t, 30*time.Second, walking)
			ctx := context.Background()
			if err := r.CanPush(ctx); err != nil {
				t.Fatal(err)
			}
			parent := r.Head()
			c, err := r.Commit(parent, map[string][]byte{"a/two.yaml": []byte("two\n")}, "two")
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Push(ctx, parent, c); err != nil {
				t.Fatal(err)
			}
			if got, err := gitserver.OutputIn(s.repo, "rev-parse", "refs/heads/main"); err != nil || strings.TrimSpace(got) != c.String() {
				t.Fatalf("server at %s (%v), want %s", got, err, c)
			}
			if h, err := r.RemoteHead(ctx); err != nil || h != c {
				t.Fatalf("remote head %s: %v", h, err)
			}
			if h, err := r.Fetch(ctx); err != nil || h != c {
				t.Fatalf("fetch %s: %v", h, err)
			}
			if rc, err := r.Recent(ctx, time.Time{}, 10); err != nil || len(rc) == 0 {
				t.Fatalf("recent %v: %v", rc, err)
			}
			if n := callSeq.Load() - before; n < 5 {
				t.Errorf("only %d calls went through the call dialer", n)
			}
			left := 0
			calls.Range(func(any, any) bool { left++; return true })
			if left != 0 {
				t.Errorf("%d calls left registered", left)
			}
		})
	}
}

// TestSSHPushTimesOutAfterTheSession: the push session opens, and the
// server then says nothing. The capabilities are known from before, so
// go-git reads the server's answer with no context of its own; the push
// ends at GIT_TIMEOUT and says it timed out.
func TestSSHPushTimesOutAfterTheSession(t *testing.T) {
	for _, walking := range []bool{false, true} {
		t.Run(fmt.Sprint("walking=", walking), func(t *testing.T) {
			s := startSSHGit(t)
			r := s.open(t, 500*time.Millisecond, walking)
			if err := r.CanPush(context.Background()); err != nil { // the capabilities, kept
				t.Fatal(err)
			}
			parent := r.Head()
			c, err := r.Commit(parent, map[string][]byte{"a/two.yaml": []byte("two\n")}, "two")
			if err != nil {
				t.Fatal(err)
			}
			s.setMute("git-receive-pack")
			err = returns(t, func() error { return r.Push(context.Background(), parent, c) })
			if !errors.Is(err, ErrTimeout) {
				t.Errorf("push: %v, want a git timeout", err)
			}
		})
	}
}
