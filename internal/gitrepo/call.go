package gitrepo

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/net/proxy"
)

// call is one network call to the server: its context, bounded by its
// timeout, its credentials, and the proxy options that tie an SSH
// connection to that context. end releases it.
type call struct {
	ctx   context.Context
	auth  transport.AuthMethod
	proxy transport.ProxyOptions
	end   func()
}

// startCall starts a call named op (such as "fetch <url>") within timeout.
// A call whose context has already ended asks nothing of the server.
func (r *Repo) startCall(ctx context.Context, op string, timeout time.Duration) (*call, error) {
	if err := r.begin(ctx, op); err != nil {
		return nil, err
	}
	auth, err := r.auth.Auth()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", op, ErrAuth, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	proxy, forget := r.callProxy(ctx)
	return &call{ctx: ctx, auth: auth, proxy: proxy, end: func() { forget(); cancel() }}, nil
}

// go-git dials SSH with a context of its own (bounded only by the client
// config's timeout, and only for the TCP connect), then runs the SSH
// handshake and the whole session with no deadline: a server that accepts
// and says nothing would hold the call, and the repository lock, for ever,
// and neither GIT_TIMEOUT nor a shutdown would end it. go-git takes its
// dialer from the endpoint's proxy URL, so every SSH call here names a
// dialer of the worker's own scheme, which dials as go-git would (through
// the environment's proxy, if any) and closes the connection when the
// call's context ends.

// callScheme is the proxy URL scheme of that dialer; the URL's host names
// the call.
const callScheme = "tenant-worker-call"

var (
	calls   sync.Map // call id -> context.Context
	callSeq atomic.Uint64
)

func init() {
	proxy.RegisterDialerType(callScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
		ctx, ok := calls.Load(u.Host)
		if !ok {
			return nil, fmt.Errorf("no git call %q in progress", u.Host)
		}
		return callDialer{call: ctx.(context.Context)}, nil
	})
}

// callProxy is the proxy options that bound an SSH call by ctx, and the
// function that forgets the call once it is over. Other transports watch
// the context themselves: they get no proxy.
func (r *Repo) callProxy(ctx context.Context) (transport.ProxyOptions, func()) {
	ep, err := transport.NewEndpoint(r.url())
	if err != nil || ep.Protocol != "ssh" {
		return transport.ProxyOptions{}, func() {}
	}
	id := strconv.FormatUint(callSeq.Add(1), 10)
	calls.Store(id, ctx)
	return transport.ProxyOptions{URL: callScheme + "://" + id}, func() { calls.Delete(id) }
}

// callDialer dials within the call's context and ties the connection to
// it: the connection is closed when the call's context ends (cancelled,
// timed out, or the call over).
type callDialer struct{ call context.Context }

func (d callDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

func (d callDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.call.Err() != nil {
		// Ended already: not even a connection is asked of the server.
		return nil, fmt.Errorf("dial %s: %w", addr, context.Cause(d.call))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.call, cancel)
	defer stop()
	conn, err := proxy.Dial(ctx, network, addr)
	if err != nil {
		if d.call.Err() != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, context.Cause(d.call))
		}
		return nil, err
	}
	// Closed once the call's context has ended (not by a deadline of its
	// own, which could fire before the context says why).
	context.AfterFunc(d.call, func() { _ = conn.Close() })
	return conn, nil
}
