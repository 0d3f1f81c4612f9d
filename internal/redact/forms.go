package redact

import (
	"bytes"
	"encoding/json"
	"html"
	"html/template"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/tenant-worker/tenant-worker/internal/printable"
)

// Forms returns secret as every surface can write it: as is, escaped once,
// and escaped twice, by any of the escapers below. Twice, because a surface
// escapes text that is escaped already: a message body is JSON when the
// status page writes it as HTML and /api/runs as JSON again, and an error
// text may quote a URL or a %q value before the log encodes it.
//
// Text escaped on purpose (base64, split, reversed) is not recognised:
// this guards against accidents, not against a sender who knows the secret.
func Forms(secret string) []string {
	once := []string{secret}
	for _, e := range escapers {
		once = append(once, e(secret))
	}
	forms := slices.Clone(once)
	for _, f := range once[1:] {
		for _, e := range escapers {
			forms = append(forms, e(f))
		}
	}
	out := forms[:0]
	for _, f := range forms {
		// An escaper that refuses a value ("" or html/template's
		// filtered ZgotmplZ) does not write it at all.
		if len(f) >= len(secret) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// escapers are the ways a surface rewrites text: HTML escaping
// (html.EscapeString, text/template's and html/template's in every context
// of a page: "+" is "&#43;" in text and attributes, "\u002b" in a script,
// "%2b" in a URL, "\2b" in CSS), JavaScript string escaping, URL query and
// path escaping, JSON with and without HTML escaping ("<" is "\u003c" or
// "<"), Go's %q and %+q, and printable's escapes for a terminal. A value
// that starts a URL or a CSS string is either refused by html/template or
// escaped as in the middle of one, so the contexts put it in the middle.
var escapers = append([]func(string) string{
	html.EscapeString, template.HTMLEscapeString, template.JSEscapeString,
	url.QueryEscape, url.PathEscape, jsonString(true), jsonString(false),
	unquoted(strconv.Quote), unquoted(strconv.QuoteToASCII), printable.String,
}, pageEscapers(
	`{{.}}`, `<a title="{{.}}">`, `<a title={{.}}>`, `<a onclick="f('{{.}}')">`,
	`<script>var s = "{{.}}"</script>`, `<script>var s = {{.}}</script>`, "<script>var s = `{{.}}`</script>",
	`<a href="/x?q={{.}}">`, `<a href="/{{.}}">`,
	`<style>p { font-family: "x {{.}}" }</style>`,
)...)

// jsonString is encoding/json's escaping of a string, without its quotes.
func jsonString(escapeHTML bool) func(string) string {
	return func(s string) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(escapeHTML)
		if enc.Encode(s) != nil {
			return ""
		}
		return unquote(strings.TrimSuffix(b.String(), "\n"))
	}
}

func unquoted(quote func(string) string) func(string) string {
	return func(s string) string { return unquote(quote(s)) }
}

func unquote(q string) string {
	if len(q) < 2 {
		return ""
	}
	return q[1 : len(q)-1]
}

// mark delimits a value in a page, so that what html/template writes for
// it can be cut out. No escaper changes it; it neither starts nor ends
// with a hex digit, which would change how CSS escapes a neighbour.
const mark = "QzxQ"

// pageEscapers returns, for each html/template context (a template with
// one {{.}}), what html/template writes there for a value.
func pageEscapers(contexts ...string) []func(string) string {
	var out []func(string) string
	for _, c := range contexts {
		t := template.Must(template.New("").Parse(c))
		out = append(out, func(s string) string {
			var b strings.Builder
			if t.Execute(&b, mark+s+mark) != nil {
				return ""
			}
			w := b.String()
			i, j := strings.Index(w, mark), strings.LastIndex(w, mark)
			if i < 0 || j < i+len(mark) {
				return "" // filtered (ZgotmplZ): the value is not written
			}
			return w[i+len(mark) : j]
		})
	}
	return out
}
