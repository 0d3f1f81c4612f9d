// Package logging builds the worker's zerolog logger. Whatever it writes
// passes through redact, which blanks secrets (the git token, the signing
// key's passphrase, URL passwords), so no code path, however careless, can
// print one; and through printable, so that text from a message cannot
// act on the terminal that shows the log.
package logging

import (
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/printable"
	"github.com/tenant-worker/tenant-worker/internal/redact"
)

// New returns a logger writing to w at level, as "json" or "console",
// with every secret replaced by redact.Mask. The secrets given are added
// to redact's set; a secret read later (a rotated token) is added there.
func New(w io.Writer, level, format string, secrets ...string) (zerolog.Logger, error) {
	for _, s := range secrets {
		redact.Add(s)
	}
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("LOG_LEVEL %q: want debug, info, warn or error", level)
	}
	out := printable.Writer(redact.Writer(w))
	if format == "console" {
		// No colours: the output is made printable, escape codes and all.
		out = zerolog.ConsoleWriter{Out: out, TimeFormat: time.TimeOnly, NoColor: true}
	}
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
}
