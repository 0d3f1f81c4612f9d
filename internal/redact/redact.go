// Package redact is the one place where secrets are blanked before text
// leaves the process. The git token, the signing key's passphrase and any
// password in a URL are replaced on every surface: logs, the status page,
// /api/runs, /readyz, result events, dead-letter attributes and CLI output.
// Each surface passes what it emits through String, Bytes, Writer or
// Handler; whoever reads a secret hands it to Add.
//
// The set of secrets is the process's: a secret read anywhere is blanked
// everywhere, including by code that never saw it.
package redact

import (
	"bytes"
	"encoding/json"
	"html"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Mask replaces a secret.
const Mask = "[REDACTED]"

var (
	mu      sync.RWMutex
	secrets [][]byte // longest first, so a secret inside another is not cut
)

// Add blanks secret, and the forms it takes once escaped for JSON, HTML or a
// URL, from now on. Secrets shorter than 4 bytes are ignored: blanking them
// would garble every text.
func Add(secret string) {
	secret = strings.TrimSpace(secret)
	if len(secret) < 4 {
		return
	}
	forms := Forms(secret)
	mu.Lock()
	defer mu.Unlock()
next:
	for _, f := range forms {
		for _, s := range secrets {
			if string(s) == f {
				continue next
			}
		}
		secrets = append(secrets, []byte(f))
	}
	for i := 1; i < len(secrets); i++ {
		for j := i; j > 0 && len(secrets[j]) > len(secrets[j-1]); j-- {
			secrets[j], secrets[j-1] = secrets[j-1], secrets[j]
		}
	}
}

// contexts are the places a surface's html/template puts a value: text,
// attributes quoted and not, a script's string and value, a URL's query and
// whole. Each escapes differently ("+" is "&#43;" in text, "\u002b" in a
// script, "%2b" in a URL).
var contexts = []string{
	`{{.}}`, `<a title="{{.}}">`, `<a title={{.}}>`, `<script>var s = "{{.}}"</script>`,
	`<script>var s = {{.}}</script>`, `<a href="/x?q={{.}}">`, `<a href="{{.}}">`, `<a href="/{{.}}">`,
}

var parsed = func() []*template.Template {
	var ts []*template.Template
	for _, c := range contexts {
		ts = append(ts, template.Must(template.New("").Parse(c)))
	}
	return ts
}()

// Forms returns secret as every surface can write it: as is, escaped by
// html.EscapeString, by html/template in each context, for a JavaScript
// string, for a URL's query and path, and for JSON (with and without HTML
// escaping).
func Forms(secret string) []string {
	forms := []string{secret, html.EscapeString(secret), template.HTMLEscapeString(secret),
		template.JSEscapeString(secret), url.QueryEscape(secret), url.PathEscape(secret)}
	if b, err := json.Marshal(secret); err == nil {
		forms = append(forms, string(b[1:len(b)-1]))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(secret) == nil {
		forms = append(forms, strings.TrimSuffix(strings.TrimSpace(b.String()), `"`)[1:])
	}
	for _, t := range parsed {
		var with, without bytes.Buffer
		if t.Execute(&with, secret) != nil || t.Execute(&without, "") != nil {
			continue
		}
		forms = append(forms, between(with.String(), without.String()))
	}
	out := forms[:0]
	for _, f := range forms {
		if f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// between is what with holds in place of the empty value that gave
// without: the text between their common prefix and suffix.
func between(with, without string) string {
	p := 0
	for p < len(with) && p < len(without) && with[p] == without[p] {
		p++
	}
	s := 0
	for s < len(with)-p && s < len(without)-p && with[len(with)-1-s] == without[len(without)-1-s] {
		s++
	}
	return with[p : len(with)-s]
}

// userinfo matches the password of a URL (scheme://user:password@).
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s@:"'<>]*):[^/\s@"'<>]*@`)

// Bytes returns b with every secret and URL password blanked. It returns b
// itself when there is nothing to blank.
func Bytes(b []byte) []byte {
	mu.RLock()
	for _, s := range secrets {
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, []byte(Mask))
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
