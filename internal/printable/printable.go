// Package printable makes untrusted text inert on a terminal: control
// characters (ANSI escape sequences among them), bidirectional overrides and
// invalid UTF-8 are written as visible escapes such as \x1b, so a message
// body can neither recolour, move the cursor, retitle the window nor hide
// text. Line breaks and tabs are kept.
package printable

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// String returns s with every character that a terminal would act on
// replaced by a visible escape. It returns s itself when it is already
// printable.
func String(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafe(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\n' && c != '\t' || c == 0x7f || c >= 0x80 {
			// Multi-byte text is checked rune by rune below.
			goto slow
		}
	}
	return true
slow:
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 || unsafe(r) {
			return false
		}
		i += n
	}
	return true
}

// unsafe reports whether a terminal acts on r rather than showing it.
func unsafe(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f: // C0 controls, DEL
		return true
	case r >= 0x80 && r < 0xa0: // C1 controls (0x9b starts a CSI sequence)
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f: // bidi controls
		return true
	}
	return false
}

// Writer makes every Write to w printable. Each Write must carry whole
// texts, as zerolog and fmt.Fprint do.
func Writer(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

// Unwrap returns the writer underneath, for code that must know whether it
// writes to a terminal and writes its own, trusted control sequences.
func (p writer) Unwrap() io.Writer { return p.w }

func (p writer) Write(b []byte) (int, error) {
	s := String(string(b))
	if _, err := io.WriteString(p.w, s); err != nil {
		return 0, err
	}
	return len(b), nil
}
