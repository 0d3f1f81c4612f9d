package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
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
)

// IsConflict reports whether err is a lost push race.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsAuth reports whether err is an authentication failure.
func IsAuth(err error) bool { return errors.Is(err, ErrAuth) }

// classify maps go-git's errors to the sentinels. go-git reports a lost race
// as plain text ("non-fast-forward update: ..."), and git's receive-pack as a
// ref-update failure, so this is the one place that reads error text.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		return fmt.Errorf("%s: %w", op, ErrAuth)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w: %v", op, ErrTimeout, err)
	case strings.Contains(msg, "non-fast-forward"),
		strings.Contains(msg, "required to be"), // RequireRemoteRefs
		strings.Contains(msg, "fetch first"),
		strings.Contains(msg, "failed to lock"),
		strings.Contains(msg, "failed to update ref"),
		strings.Contains(msg, "cannot lock ref"),
		strings.Contains(msg, "stale info"):
		return fmt.Errorf("%s: %w: %v", op, ErrConflict, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func notExist(name string) error {
	return &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
}
