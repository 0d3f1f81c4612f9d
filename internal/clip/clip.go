// Package clip shortens text shown on a surface (a log field, a message
// attribute, the status page) to a bound, without splitting a character or
// a secret.
package clip

import (
	"unicode/utf8"

	"github.com/tenant-worker/tenant-worker/internal/redact"
)

// String returns s cut to at most n bytes on a rune boundary, with "…"
// added when it was cut. Secrets are blanked first (package redact): one
// cut in two would no longer be recognised, and its first part would be
// shown.
func String(s string, n int) string {
	s = redact.String(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
