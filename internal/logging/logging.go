// Package logging builds the worker's zerolog logger. Whatever it writes
// passes through a redactor that blanks secrets (the git token), so no code
// path, however careless, can print one.
package logging

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// New returns a logger writing to w at level, as "json" or "console",
// with every occurrence of a secret replaced by "[REDACTED]".
func New(w io.Writer, level, format string, secrets ...string) (zerolog.Logger, error) {
	return NewRedacted(NewRedactor(w, secrets...), level, format)
}

// NewRedacted returns a logger writing through r, whose secrets may grow
// while it runs (a rotated token).
func NewRedacted(r *Redactor, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("LOG_LEVEL %q: want debug, info, warn or error", level)
	}
	var w io.Writer = r
	if format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// Redactor replaces secrets in everything written through it. zerolog writes
// each event in one call, so a secret is never split across writes.
type Redactor struct {
	w       io.Writer
	mu      sync.RWMutex
	secrets [][]byte
}

// NewRedactor wraps w. Empty secrets are ignored.
func NewRedactor(w io.Writer, secrets ...string) *Redactor {
	r := &Redactor{w: w}
	for _, s := range secrets {
		r.Add(s)
	}
	return r
}

// Add blanks secret too from now on (a token read again after a rotation;
// the old one stays blanked).
func (r *Redactor) Add(secret string) {
	if secret == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secrets = append(r.secrets, []byte(secret))
}

// Write implements io.Writer.
func (r *Redactor) Write(p []byte) (int, error) {
	out := p
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, s := range r.secrets {
		if bytes.Contains(out, s) {
			out = bytes.ReplaceAll(out, s, []byte("[REDACTED]"))
		}
	}
	if _, err := r.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
