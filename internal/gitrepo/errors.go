package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/crypto/ssh"

	"github.com/tenant-worker/tenant-worker/internal/clip"
	"github.com/tenant-worker/tenant-worker/internal/credentials"
)

// Sentinels for the outcomes of network git calls. Only ErrConflict can be
// recovered from on the spot (fetch, re-apply, push again); the others wait
// for SQS to redeliver the message.
var (
	// ErrConflict: the branch moved on the remote since our last fetch.
	ErrConflict = errors.New("remote branch moved")
	// ErrAuth: the server refused our credentials.
	ErrAuth = errors.New("git authentication failed")
	// ErrTimeout: a network call took longer than its timeout.
	ErrTimeout = errors.New("git call timed out")
	// ErrUnavailable: the server could not be reached, or failed the call.
	ErrUnavailable = errors.New("git server unavailable")
)

// IsUnavailable reports whether err is a failure to reach or be served by
// the git server (a timeout included).
func IsUnavailable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTimeout)
}

// IsConflict reports whether err is a lost push race.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsAuth reports whether err is an authentication failure.
func IsAuth(err error) bool { return errors.Is(err, ErrAuth) }

// classify is the package's classify, telling the credentials when the
// server refused them. ctx is the call's: when it was cancelled, the error
// is the cancellation (with its cause), not the server's; when its time
// ran out, a timeout. net/http reports a cancellation by its cause, which
// would otherwise read as a server that could not be reached, and pause
// the worker over its own shutdown.
func (r *Repo) classify(ctx context.Context, op string, err error) error {
	switch {
	case err == nil:
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("%s: %w", op, cancelled(ctx))
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The call's time ran out; over SSH the connection's deadline
		// reports it as a network error.
		return fmt.Errorf("%s: %w: %v", op, ErrTimeout, err)
	}
	err = classify(op, err)
	if IsAuth(err) {
		r.auth.Refused()
	}
	return err
}

// begin refuses a call whose context has already ended: nothing is asked
// of the server.
func (r *Repo) begin(ctx context.Context, op string) error {
	if ctx.Err() == nil {
		return nil
	}
	return r.classify(ctx, op, context.Cause(ctx))
}

// cancelled is ctx's cancellation as an error that is context.Canceled and
// says its cause, when it has one of its own.
func cancelled(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("%w: %w", context.Canceled, cause)
	}
	return context.Canceled
}

// classify maps go-git's errors to the sentinels for credentials and
// timeouts. A lost race is not read from error text: Push decides it from
// the branch on the server.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, ErrConflict):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		// The server's own words say which permission is missing (a
		// read-only token, say). They may quote a URL with credentials:
		// every surface blanks those (package redact).
		return fmt.Errorf("%s: %w: %s", op, ErrAuth, clip.String(strings.TrimSpace(err.Error()), 300))
	case errors.Is(err, credentials.ErrHostKey):
		// A host key that is not pinned: the operator's to fix, like a
		// refused credential; never a reason to connect anyway.
		return fmt.Errorf("%s: %w: %w", op, ErrAuth, err)
	}
	if neg := hostKeyKinds(err); neg != nil {
		return fmt.Errorf("%s: %w: %w: the server offers host keys of kinds %v, GIT_KNOWN_HOSTS_FILE pins only %v for it; refusing to connect",
			op, ErrAuth, credentials.ErrHostKey, neg.RequestedAlgorithms, neg.SupportedAlgorithms)
	}
	switch {
	case strings.Contains(err.Error(), "ssh: unable to authenticate"):
		// x/crypto/ssh has no error type for a refused key; this is its
		// one wording for it.
		return fmt.Errorf("%s: %w: the server refused the SSH key (%v)", op, ErrAuth, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w: %v", op, ErrTimeout, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
}

// hostKeyKinds is the SSH handshake's failure to agree on a kind of host
// key: the server has none of the kinds known_hosts pins for it.
func hostKeyKinds(err error) *ssh.AlgorithmNegotiationError {
	var neg *ssh.AlgorithmNegotiationError
	if errors.As(err, &neg) && neg.What == "host key" {
		return neg
	}
	return nil
}

func notExist(name string) error {
	return &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
}
