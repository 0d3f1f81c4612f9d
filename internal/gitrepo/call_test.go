package gitrepo

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/tenant-worker/tenant-worker/internal/credentials"
)

// silentServer accepts SSH connections and never says a word: a server
// that hangs, or a firewall that holds packets. accepted gets each
// connection as it is accepted.
func silentServer(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 16)
	serveConns(t, ln, func(net.Conn) {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	return ln.Addr().String(), ch
}

// serveConns accepts ln's connections until the test ends, hands each to
// handle in a goroutine of its own, and then closes ln and them all.
func serveConns(t *testing.T, ln net.Listener, handle func(net.Conn)) {
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go handle(c)
		}
	}()
}

// sshKeys makes, in a fresh folder, a client key file and a known_hosts
// file that pins a new host key for addr, and returns them with that host
// key, for a server to present.
func sshKeys(t *testing.T, addr string) (keyFile, known string, host ssh.Signer) {
	t.Helper()
	dir := t.TempDir()
	_, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(clientPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	keyFile = filepath.Join(dir, "id")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if host, err = ssh.NewSignerFromKey(hostPriv); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	known = filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(known, fmt.Appendf(nil, "[127.0.0.1]:%s %s", port, ssh.MarshalAuthorizedKey(host.PublicKey())), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile, known, host
}

// sshRepo is a Repo whose remote is an SSH URL at addr, pinned to a host
// key the silent server never shows.
func sshRepo(t *testing.T, addr string, timeout time.Duration) *Repo {
	t.Helper()
	keyFile, known, _ := sshKeys(t, addr)
	creds, err := credentials.SSHKeyFile("git", addr, keyFile, "", known, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &Repo{opts: Options{URL: "ssh://git@" + addr + "/gitops.git", Branch: "main", Timeout: timeout}, auth: creds}
	if r.repo, err = openStorage(""); err != nil {
		t.Fatal(err)
	}
	if err := r.configureRemote(); err != nil {
		t.Fatal(err)
	}
	return r
}

// sshCalls are the network calls of a Repo, each over a new SSH connection.
var sshCalls = []struct {
	name string
	call func(*Repo, context.Context) error
}{
	{"fetch", func(r *Repo, ctx context.Context) error { _, err := r.Fetch(ctx); return err }},
	{"list", func(r *Repo, ctx context.Context) error { _, err := r.RemoteHead(ctx); return err }},
	{"push session", func(r *Repo, ctx context.Context) error { return r.CanPush(ctx) }},
	{"push", func(r *Repo, ctx context.Context) error {
		c, err := r.Commit(r.head, map[string][]byte{"a/x.yaml": []byte("x\n")}, "x")
		if err != nil {
			return err
		}
		return r.Push(ctx, r.head, c)
	}},
}

// returns waits for a call that must end: a call still running after a
// minute is a hang, whatever the machine's speed.
func returns(t *testing.T, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the call is still running a minute later: it does not watch its context")
		return nil
	}
}

// TestSSHCallEndsWithItsContext: the server accepts the SSH connection and
// says nothing; the shutdown's grace runs out while the call waits for the
// server's greeting. The call ends, as cancelled with the cause. go-git
// runs the SSH handshake with no deadline of its own.
func TestSSHCallEndsWithItsContext(t *testing.T) {
	for _, c := range sshCalls {
		t.Run(c.name, func(t *testing.T) {
			addr, accepted := silentServer(t)
			r := sshRepo(t, addr, time.Hour)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			cause := errors.New("shutdown grace period over")
			go func() {
				<-accepted // the call is connected and waits for the greeting
				cancel(cause)
			}()
			err := returns(t, func() error { return c.call(r, ctx) })
			if ctx.Err() == nil {
				t.Fatalf("the server never accepted a connection: the fault did not happen (%v)", err)
			}
			if !errors.Is(err, context.Canceled) || !strings.Contains(fmt.Sprint(err), cause.Error()) || IsUnavailable(err) {
				t.Errorf("error %v: want the cancellation with its cause, not the server's", err)
			}
		})
	}
}

// TestSSHCallEndsWithItsTimeout: the same silent server, and no shutdown:
// GIT_TIMEOUT ends the call, as a timeout.
func TestSSHCallEndsWithItsTimeout(t *testing.T) {
	for _, c := range sshCalls {
		t.Run(c.name, func(t *testing.T) {
			addr, accepted := silentServer(t)
			r := sshRepo(t, addr, 200*time.Millisecond)
			err := returns(t, func() error { return c.call(r, context.Background()) })
			select {
			case <-accepted:
			default:
				t.Fatalf("the server never accepted a connection: the fault did not happen (%v)", err)
			}
			if !errors.Is(err, ErrTimeout) {
				t.Errorf("error %v: want a git timeout", err)
			}
		})
	}
}

// TestEndedContextAsksNothing: a call whose context has already ended
// asks nothing of the server, over any transport.
func TestEndedContextAsksNothing(t *testing.T) {
	addr, accepted := silentServer(t)
	r := sshRepo(t, addr, time.Hour)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("shutdown grace period over"))
	opened := callSeq.Load() // SSH calls set up to dial
	for _, c := range sshCalls {
		if err := returns(t, func() error { return c.call(r, ctx) }); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v, want the cancellation", c.name, err)
		}
	}
	c, err := r.Commit(r.head, map[string][]byte{"a/x.yaml": []byte("x\n")}, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := returns(t, func() error { return r.PushRefs(ctx, Move{New: c}, Move{}) }); !errors.Is(err, context.Canceled) {
		t.Errorf("push: %v, want the cancellation", err)
	}
	if n := callSeq.Load() - opened; n > 0 {
		t.Errorf("%d calls with an ended context were set up to dial the server", n)
	}
	select {
	case <-accepted:
		t.Error("a call with an ended context connected to the server")
	default:
	}
}

// TestDialerOfAnEndedCallDialsNothing: the call dialer, asked to dial for
// a call whose context has ended, fails with its cause and opens no
// connection.
func TestDialerOfAnEndedCallDialsNothing(t *testing.T) {
	addr, accepted := silentServer(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("shutdown grace period over")
	cancel(cause)
	for range 20 {
		conn, err := callDialer{call: ctx}.DialContext(context.Background(), "tcp", addr)
		if err == nil {
			conn.Close()
			t.Fatal("dialed for an ended call")
		}
		if !errors.Is(err, cause) {
			t.Fatalf("dial: %v, want the call's cause", err)
		}
	}
	select {
	case <-accepted:
		t.Error("the server accepted a connection for an ended call")
	default:
	}
}
