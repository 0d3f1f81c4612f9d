package printable

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\twith tab\n":    "plain text\twith tab\n",
		"\x1b[31mred\x1b[0m":        `\x1b[31mred\x1b[0m`,
		"\x1b]0;title\x07":          `\x1b]0;title\x07`,
		"cr\roverwrite":             `cr\x0doverwrite`,
		"bad \xff\xfe utf8":         `bad \xff\xfe utf8`,
		"c1 \u009b31m":              `c1 \x9b31m`,
		"bidi \u202eevil":           `bidi \u202eevil`,
		"ünïcødé and 日本 stay":       "ünïcødé and 日本 stay",
		"<script>alert(1)</script>": "<script>alert(1)</script>",
	} {
		got := String(in)
		if got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
		if !utf8.ValidString(got) || strings.ContainsAny(got, "\x1b\r\x07") {
			t.Errorf("%q is not inert: %q", in, got)
		}
	}
}

func FuzzString(f *testing.F) {
	f.Add("\x1b[2J\xff")
	f.Fuzz(func(t *testing.T, s string) {
		out := String(s)
		if !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8 out of %q", s)
		}
		for _, r := range out {
			if unsafe(r) {
				t.Fatalf("%q kept %U", s, r)
			}
		}
		if String(out) != out {
			t.Fatalf("not idempotent on %q", s)
		}
	})
}
