// Package redact is the one place where secrets are blanked before text
// leaves the process. The git token, the signing key's passphrase and any
// password in a URL are replaced on every surface: logs, the status page,
// /api/runs, /readyz, result events, dead-letter attributes and CLI output.
// Each surface passes what it emits through String, Bytes, Writer or
// Handler; whoever reads a secret hands it to Add. Text cut short is
// blanked before the cut (package clip does), or part of a secret would
// be left that no form matches.
//
// The set of secrets is the process's: a secret read anywhere is blanked
// everywhere, including by code that never saw it.
package redact

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Mask replaces a secret.
const Mask = "[REDACTED]"

var (
	mu sync.RWMutex
	// secrets are blanked longest first, so that a secret inside another
	// does not cut it and leave the rest shown.
	secrets []entry
)

// entry is one secret's forms, longest first, and its anchor: its longest
// run of letters and digits, which no escaper changes, so that a text
// without the anchor is passed over without a look for each form.
type entry struct {
	raw    string
	anchor []byte
	forms  [][]byte
}

// Add blanks secret from now on, in every form a surface may write it
// (Forms: escaped for HTML, a script, a URL, JSON, a terminal, and escaped
// once more). Secrets shorter than 4 bytes are ignored: blanking them would
// garble every text.
func Add(secret string) {
	secret = strings.TrimSpace(secret)
	if len(secret) < 4 {
		return
	}
	s := newEntry(secret)
	mu.Lock()
	defer mu.Unlock()
	if slices.ContainsFunc(secrets, func(o entry) bool { return o.raw == secret }) {
		return
	}
	i, _ := slices.BinarySearchFunc(secrets, s, func(a, b entry) int { return len(b.raw) - len(a.raw) })
	secrets = slices.Insert(secrets, i, s)
}

func newEntry(raw string) entry {
	s := entry{raw: raw}
	for _, f := range Forms(raw) {
		s.forms = append(s.forms, []byte(f))
	}
	slices.SortStableFunc(s.forms, func(a, b []byte) int { return len(b) - len(a) })
	for _, run := range strings.FieldsFunc(raw, func(r rune) bool { return !isAlnum(r) }) {
		if len(run) > len(s.anchor) {
			s.anchor = []byte(run)
		}
	}
	for _, f := range s.forms {
		if !bytes.Contains(f, s.anchor) {
			s.anchor = nil // no shortcut: look for every form
		}
	}
	return s
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// userinfo matches the password of a URL (scheme://user:password@).
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s@:"'<>]*):[^/\s@"'<>]*@`)

// Bytes returns b with every secret and URL password blanked. It returns b
// itself when there is nothing to blank.
func Bytes(b []byte) []byte {
	mu.RLock()
	for _, s := range secrets {
		if !bytes.Contains(b, s.anchor) {
			continue
		}
		for _, f := range s.forms {
			if bytes.Contains(b, f) {
				b = bytes.ReplaceAll(b, f, []byte(Mask))
			}
		}
	}
	mu.RUnlock()
	if bytes.Contains(b, []byte("@")) && userinfo.Match(b) {
		b = userinfo.ReplaceAll(b, []byte("${1}:"+Mask+"@"))
	}
	return b
}

// String is Bytes for a string.
func String(s string) string {
	out := Bytes([]byte(s))
	return string(out)
}

// Writer blanks secrets in every Write to w. Each Write must carry whole
// texts (a log line, a printed message), as zerolog and fmt.Fprint do, so
// that no secret is split across two writes.
func Writer(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

// Unwrap returns the writer underneath.
func (r writer) Unwrap() io.Writer { return r.w }

func (r writer) Write(p []byte) (int, error) {
	if _, err := r.w.Write(Bytes(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Handler blanks secrets in every response of h: it is buffered whole,
// blanked, then sent.
func Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &buffered{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		body := Bytes(rec.body.Bytes())
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.code)
		_, _ = w.Write(body)
	})
}

type buffered struct {
	header http.Header
	code   int
	wrote  bool
	body   bytes.Buffer
}

func (b *buffered) Header() http.Header { return b.header }
func (b *buffered) WriteHeader(code int) {
	if !b.wrote {
		b.code, b.wrote = code, true
	}
}
func (b *buffered) Write(p []byte) (int, error) {
	b.wrote = true
	return b.body.Write(p)
}
