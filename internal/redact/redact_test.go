package redact

import (
	"io"
	"net/http"
	"net/http/httptest"
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
