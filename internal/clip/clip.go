// Package clip shortens text shown on a surface (a log field, a message
// attribute, the status page) to a bound, without splitting a character.
package clip

import "unicode/utf8"

// String returns s cut to at most n bytes on a rune boundary, with "…"
// added when it was cut.
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
