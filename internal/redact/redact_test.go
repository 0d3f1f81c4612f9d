package redact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/printable"
	"github.com/tenant-worker/tenant-worker/internal/redact/redacttest"
)

func TestBlanksEveryForm(t *testing.T) {
	const secret = `tok<en>&"/+=x`
	Add(secret)
	Add("ab") // too short to blank
	for _, in := range []string{
		"plain " + secret,
		`json "tok\u003cen\u003e\u0026\"/+=x"`,
		"html tok&lt;en&gt;&amp;&#34;/+=x",
		"query tok%3Cen%3E%26%22%2F%2B%3Dx",
	} {
		out := String(in)
		if strings.Contains(out, "tok") || !strings.Contains(out, Mask) {
			t.Errorf("%q -> %q", in, out)
		}
	}
	if got := String("ab cd"); got != "ab cd" {
		t.Errorf("a short secret was blanked: %q", got)
	}
}

// TestSecretInsideAnother: a secret that holds another is blanked whole,
// in every form, whichever was added first.
func TestSecretInsideAnother(t *testing.T) {
	Add("in+ner")
	Add("an-out<er-with-in+ner-inside")
	for _, in := range []string{"an-out<er-with-in+ner-inside", "an-out&lt;er-with-in&#43;ner-inside", `an-out\u003cer-with-in+ner-inside`} {
		if got := String("x " + in + " y"); got != "x "+Mask+" y" {
			t.Errorf("%q -> %q", in, got)
		}
	}
}

func TestBlanksURLPasswords(t *testing.T) {
	for in, want := range map[string]string{
		`push to https://worker:s3cr3t@git.example.com/gitops.git failed`: `push to https://worker:` + Mask + `@git.example.com/gitops.git failed`,
		`"http://u:p@h/x"`:                     `"http://u:` + Mask + `@h/x"`,
		`ssh://git@host/x stays`:               `ssh://git@host/x stays`,
		`mail admin@example.com: fine`:         `mail admin@example.com: fine`,
		`two http://a:b@h1/ and http://c:d@h2`: `two http://a:` + Mask + `@h1/ and http://c:` + Mask + `@h2`,
	} {
		if got := String(in); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}

func TestWriterAndHandler(t *testing.T) {
	Add("handler-secret")
	var b strings.Builder
	if _, err := Writer(&b).Write([]byte("a handler-secret b\n")); err != nil {
		t.Fatal(err)
	}
	if b.String() != "a "+Mask+" b\n" {
		t.Errorf("writer: %q", b.String())
	}
	srv := httptest.NewServer(Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "26")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "x handler-secret y")
		_, _ = io.WriteString(w, " z")
	})))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || string(body) != "x "+Mask+" y z" {
		t.Errorf("handler: %d %q", resp.StatusCode, body)
	}
}

// TestEveryFormIsTheSecret: each form Add registers decodes back to the
// whole secret. One that does not (a part of the secret, or html/template's
// placeholder ZgotmplZ for a value it refuses) would blank text that holds
// no secret, and leave the rest of the secret shown.
func TestEveryFormIsTheSecret(t *testing.T) {
	for _, secret := range append(slices.Clone(redacttest.Secrets), "xplZ", "Zab1", "Zgot1234", "a:b/c") {
		for _, f := range Forms(secret) {
			if !redacttest.Shows(f, secret) {
				t.Errorf("%q: form %q is not the secret", secret, f)
			}
		}
	}
}

// TestNoEscapingShowsTheSecret: secrets holding + / = & < > ' " \ (a
// base64 token, a passphrase) are blanked however a surface escapes them:
// html/template in each context of a page ("+" is "&#43;" in text,
// "\u002b" in a script, "%2b" in a URL), JSON with and without HTML
// escaping, URL query and path escaping, %q, printable; and any of these
// applied to text escaped already (a JSON body on the status page or in
// /api/runs). Whether the secret shows is decided by decoding what is
// written (package redacttest), not by redact's own list of forms; a twin
// of each secret, never added, must show, or the escaping is not tested.
func TestNoEscapingShowsTheSecret(t *testing.T) {
	once := map[string]func(string) string{
		"plain": func(s string) string { return s },
		"json": func(s string) string {
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		},
		"json without HTML escaping": func(s string) string {
			var b bytes.Buffer
			e := json.NewEncoder(&b)
			e.SetEscapeHTML(false)
			if err := e.Encode(s); err != nil {
				t.Fatal(err)
			}
			return b.String()
		},
		"url query": url.QueryEscape,
		"url path":  url.PathEscape,
		"%q":        func(s string) string { return fmt.Sprintf("%q", s) },
		"%+q":       func(s string) string { return fmt.Sprintf("%+q", s) },
		"printable": printable.String,
	}
	for _, page := range []string{
		`<p>{{.}}</p>`, `<a title="{{.}}">x</a>`, `<a title={{.}}>x</a>`, `<a onclick="f('{{.}}')">x</a>`,
		`<script>var s = "{{.}}"</script>`, `<script>var s = {{.}}</script>`, "<script>var s = `{{.}}`</script>",
		`<a href="/x?q={{.}}">x</a>`, `<a href="/{{.}}">x</a>`, `<style>p { font-family: "x {{.}}" }</style>`,
	} {
		tmpl := template.Must(template.New("").Parse(page))
		once["html/template "+page] = func(s string) string {
			var b strings.Builder
			if err := tmpl.Execute(&b, s); err != nil {
				t.Fatal(err)
			}
			return b.String()
		}
	}
	escapings := maps.Clone(once)
	for inner, f := range once {
		for outer, g := range once {
			escapings[outer+" of "+inner] = func(s string) string { return g(f(s)) }
		}
	}
	for _, secret := range redacttest.Secrets {
		Add(secret)
		twin := redacttest.Twin(secret)
		for name, escape := range escapings {
			raw := escape("push refused: token " + secret + " (not " + twin + ")")
			out := String(raw)
			d := redacttest.Decodings(out)
			if shown, ok := redacttest.Find(d, secret); ok {
				t.Errorf("%s: secret %q written as %q is shown: %q", name, secret, raw, shown)
			}
			if _, ok := redacttest.Find(d, twin); !ok {
				t.Errorf("%s: %q: the twin %q is not found: the test proves nothing", name, out, twin)
			}
			if !strings.Contains(out, Mask) {
				t.Errorf("%s: %q: nothing was blanked", name, out)
			}
		}
	}
}
