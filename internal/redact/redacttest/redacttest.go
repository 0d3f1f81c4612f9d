// Package redacttest tells whether a text shows a secret in any form a
// reader can decode, for the tests of the surfaces that must not. It
// decodes instead of encoding, so it does not share redact's idea of what
// the forms are: a form redact misses is found here.
package redacttest

import (
	"html"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Secrets hold the characters that escaping changes (+ / = & < > ' " \,
// spaces, non-ASCII), alone and together, as a base64 token or a
// passphrase would. None starts or ends with a space: redact trims them.
var Secrets = []string{
	"aGVsbG8+d29y/bGQ=",
	"dG9r+/==",
	`pa+ss/wo=rd&<x>'q"`,
	`it's "quoted" & <b>`,
	"correct horse+battery/staple=",
	`back\slash"and'quote`,
	"only+plus+signs",
	"p\u00e4ssw\u00f6rd+\u00df/x",
	"Zq+9/xplZ",
}

// Twin returns a text shaped like secret (the same characters that
// escaping changes, in the same places) with other letters and digits. A
// test shows a surface its twin too, and asks that the twin be found: a
// surface whose twin is not found would pass whatever it did.
func Twin(secret string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return 'a' + (r-'a'+13)%26
		case r >= 'A' && r <= 'Z':
			return 'A' + (r-'A'+13)%26
		case r >= '0' && r <= '9':
			return '0' + (r-'0'+5)%10
		}
		return r
	}, secret)
}

// Decodings returns text as is and undone up to three times by any of
// HTML entities, backslash escapes (JSON, JavaScript, Go's %q), CSS
// escapes and URL percent escapes (with "+" as a space or as itself).
func Decodings(text string) []string {
	all, layer := []string{text}, []string{text}
	seen := map[string]bool{text: true}
	for range 3 {
		var next []string
		for _, t := range layer {
			for _, d := range decoders {
				if u := d(t); !seen[u] {
					seen[u] = true
					next = append(next, u)
				}
			}
		}
		all, layer = append(all, next...), next
	}
	return all
}

// Find returns the first of decodings that shows secret.
func Find(decodings []string, secret string) (string, bool) {
	for _, d := range decodings {
		if strings.Contains(d, secret) {
			return d, true
		}
	}
	return "", false
}

// Shows reports whether text shows secret in any decoding.
func Shows(text, secret string) bool {
	_, ok := Find(Decodings(text), secret)
	return ok
}

var decoders = []func(string) string{
	html.UnescapeString,
	unbackslash,
	uncss,
	func(s string) string { return unpercent(s, false) },
	func(s string) string { return unpercent(s, true) },
}

// unbackslash undoes \uXXXX, \xXX, \n and the like, and \c for any other c.
func unbackslash(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		c := s[i+1]
		switch {
		case c == 'u' && i+6 <= len(s) && hex(s[i+2:i+6]):
			r, _ := strconv.ParseUint(s[i+2:i+6], 16, 32)
			b.WriteRune(rune(r))
			i += 5
		case c == 'x' && i+4 <= len(s) && hex(s[i+2:i+4]):
			r, _ := strconv.ParseUint(s[i+2:i+4], 16, 8)
			b.WriteByte(byte(r))
			i += 3
		default:
			if r, ok := controls[c]; ok {
				c = r
			}
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

var controls = map[byte]byte{'n': '\n', 't': '\t', 'r': '\r', 'b': '\b', 'f': '\f'}

// uncss undoes CSS escapes: a backslash, one to six hex digits and an
// optional space, or a backslash and any other character.
func uncss(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		n := 0
		for n < 6 && i+1+n < len(s) && hex(s[i+1+n:i+2+n]) {
			n++
		}
		if n == 0 {
			b.WriteByte(s[i+1])
			i++
			continue
		}
		r, _ := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
		if utf8.ValidRune(rune(r)) {
			b.WriteRune(rune(r))
		}
		i += n
		if i+1 < len(s) && s[i+1] == ' ' {
			i++
		}
	}
	return b.String()
}

// unpercent undoes %XX escapes that are well formed, leaving the others,
// and with plus, "+" as a space (a URL's query).
func unpercent(s string, plus bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '%' && i+3 <= len(s) && hex(s[i+1:i+3]):
			r, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(r))
			i += 2
		case s[i] == '+' && plus:
			b.WriteByte(' ')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func hex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune("0123456789abcdefABCDEF", rune(s[i])) {
			return false
		}
	}
	return s != ""
}
