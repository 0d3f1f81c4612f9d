// Package credentials gives the git client what it authenticates with, asked
// for on every fetch and push, so that a rotated secret is picked up without
// a restart. Adding a host's kind of authentication (an SSH key, a GitHub App
// installation token) is one more Provider.
package credentials

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// Provider gives the credential of each git call.
type Provider interface {
	// Auth returns the credential for the next call; nil sends none.
	Auth() (transport.AuthMethod, error)
	// Refused tells the provider that the server refused what it gave
	// (HTTP 401 or 403): the next Auth reads its source again.
	Refused()
}

// Token is an HTTP token sent as basic auth (any user name with the token as
// the password, as Gitea, GitHub and GitLab accept), taken from a fixed
// value or from a file that is read again when it changes or after a
// refusal.
type Token struct {
	user     string
	path     string
	onSecret func(string)

	mu    sync.Mutex
	token string
	size  int64
	mtime time.Time
	stale bool
}

// Static is a token that never changes; empty sends no credentials.
func Static(user, token string) *Token {
	return &Token{user: defaultUser(user), token: strings.TrimSpace(token)}
}

// File is the token held in the file at path. onSecret, if set, is called
// with every token read, so logs can blank it. The file is read now: a
// missing or empty file is an error.
func File(user, path string, onSecret func(string)) (*Token, error) {
	t := &Token{user: defaultUser(user), path: path, onSecret: onSecret, stale: true}
	if _, err := t.current(); err != nil {
		return nil, err
	}
	return t, nil
}

func defaultUser(user string) string {
	if user == "" {
		return "git"
	}
	return user
}

// Auth implements Provider.
func (t *Token) Auth() (transport.AuthMethod, error) {
	tok, err := t.current()
	if err != nil || tok == "" {
		return nil, err
	}
	return &githttp.BasicAuth{Username: t.user, Password: tok}, nil
}

// Refused implements Provider.
func (t *Token) Refused() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stale = t.path != ""
}

// current returns the token, reading the file again when it changed since
// the last read or the server refused the token.
func (t *Token) current() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.path == "" {
		return t.token, nil
	}
	info, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("read GIT_TOKEN_FILE: %w", err)
	}
	if !t.stale && info.Size() == t.size && info.ModTime().Equal(t.mtime) {
		return t.token, nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("read GIT_TOKEN_FILE: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", errors.New("GIT_TOKEN_FILE " + t.path + " is empty")
	}
	if tok != t.token && t.onSecret != nil {
		t.onSecret(tok)
	}
	t.token, t.size, t.mtime, t.stale = tok, info.Size(), info.ModTime(), false
	return tok, nil
}
