package redact

import (
	"bytes"
	"encoding/json"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
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

// TestNoSurfaceFormShowsTheSecret: secrets holding + / = & < > ' " (a
// base64 token, a passphrase) are blanked in every form a surface writes
// them: the status page's html/template in each context (text, attribute,
// script, URL: "+" is "&#43;", "\u002b", "%2b" there), JSON with and
// without HTML escaping, URL query and path escaping, plain text.
func TestNoSurfaceFormShowsTheSecret(t *testing.T) {
	secrets := []string{"aGVsbG8+d29y/bGQ=", `pa+ss/wo=rd&<x>'q"`, "only+plus", `it's "quoted"`}
	surfaces := map[string]func(s string) string{
		"plain": func(s string) string { return "error: " + s },
		"json": func(s string) string {
			b, _ := json.Marshal(map[string]string{"error": s})
			return string(b)
		},
		"json, no HTML escaping": func(s string) string {
			var b bytes.Buffer
			e := json.NewEncoder(&b)
			e.SetEscapeHTML(false)
			_ = e.Encode(map[string]string{"error": s})
			return b.String()
		},
		"url query": func(s string) string { return "/?q=" + url.QueryEscape(s) },
		"url path":  func(s string) string { return "/" + url.PathEscape(s) },
	}
	for _, c := range contexts {
		tmpl := template.Must(template.New("").Parse("<p>error:</p>" + c))
		surfaces["html/template "+c] = func(s string) string {
			var b bytes.Buffer
			if err := tmpl.Execute(&b, s); err != nil {
				t.Fatal(err)
			}
			return b.String()
		}
	}
	for _, secret := range secrets {
		Add(secret)
		for name, write := range surfaces {
			raw := write(secret)
			out := String(raw)
			if !strings.Contains(out, Mask) {
				t.Errorf("%s: secret %q written as %q is not blanked: %q", name, secret, raw, out)
			}
			for _, f := range Forms(secret) {
				if len(f) >= 4 && strings.Contains(out, f) {
					t.Errorf("%s: %q still shows %q", name, out, f)
				}
			}
		}
	}
}
