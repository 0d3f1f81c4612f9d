package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tenant-worker/tenant-worker/internal/redact/redacttest"
)

// hostilePassphrase holds the characters that escaping changes: a surface
// that writes it as HTML, JSON, a script or a URL writes it changed.
const hostilePassphrase = `correct+horse/battery=staple & <b>'s "key"`

// liveMarkup matches markup that a browser would act on.
var liveMarkup = regexp.MustCompile(`(?i)<\s*(script|img|iframe|svg|object|embed)\b`)

// TestNoSurfaceShowsSecrets runs the worker binary with a token and a
// passphrase-protected signing key, sends bodies that carry the token, the
// passphrase, a script tag and terminal escapes, and makes the git server
// refuse pushes with a text that embeds the credentialed URL (a server
// hook on the push, held until the worker has paused on it). Then it reads
// every surface: the log, the status page, /api/runs, /readyz, /metrics,
// the result events, the dead-letter attributes and the CLI's output. None
// may hold the token or the passphrase; the HTML ones no live markup; the
// terminal ones no escape sequence. The passphrase holds + / = & < > ' ",
// and a surface may not show it in any form a reader can decode (HTML,
// JSON, script or URL escaping, up to three layers: package redacttest).
// Each surface must also show the hostile text it was given, blanked or
// escaped, so that the scan is not of empty pages.
func TestNoSurfaceShowsSecrets(t *testing.T) {
	h := newHarness(t, true)
	resultsURL := h.withResults()
	k := sshSigningKeyWith(t, hostilePassphrase)
	secrets := []string{token, hostilePassphrase}

	// The forced git error: every receive-pack request is refused with a
	// text naming the repository's URL with the token in it, until held
	// is cleared.
	var held atomic.Bool
	var refused atomic.Int32
	held.Store(true)
	credURL := strings.Replace(h.git.RepoURL(repoName), "://", "://tenant-worker:"+token+"@", 1)
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if held.Load() && strings.Contains(r.URL.String(), "git-receive-pack") {
			refused.Add(1)
			http.Error(w, "access to "+credURL+" denied: token "+token+" may not push", http.StatusForbidden)
			return false
		}
		return true
	})
	p := h.startBinary("RESULTS_QUEUE="+resultsURL, "GIT_SIGNING_KEY_FILE="+k.file, "GIT_SIGNING_PASSPHRASE_FILE="+k.passFile)
	h.httpAddr = p.addr(t)

	passphraseJSON, err := json.Marshal(hostilePassphrase)
	if err != nil {
		t.Fatal(err)
	}
	hostile := []string{
		`<script>alert("` + token + `")</script>`,
		`{"tenant_id":"<img src=x onerror=alert(1)>` + token + `","tenant_tier":"premium","release_version":"0.0"}`,
		`{"tenant_id":"t1","tenant_tier":"\u001b[31m` + hostilePassphrase + `\u001b]0;pwned\u0007","release_version":"0.0"}`,
		`{"tenant_id":"t2","tenant_tier":"premium","release_version":"0.0","` + token + `":"<svg onload=alert(1)>"}`,
		// The passphrase escaped as JSON, in a body the status page and
		// /api/runs escape once more.
		`{"tenant_id":"t3","tenant_tier":"premium","release_version":` + string(passphraseJSON) + `}`,
	}
	for _, b := range hostile {
		h.send(h.q.onboarding, b)
	}
	good := h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`)

	surfaces := map[string]string{}
	h.waitFor("the worker to pause on the refused push", 30*time.Second, func() bool {
		r := h.httpGet("/readyz")
		if strings.Contains(r, "paused") {
			surfaces["/readyz"] = r
			surfaces["status page while paused"] = h.httpGet("/")
			return true
		}
		return false
	})
	if refused.Load() == 0 {
		t.Fatal("planned fault did not occur: no push was refused")
	}
	held.Store(false)
	if l := h.outcome(good); l["message"] != "tenant change pushed" {
		t.Fatalf("outcome after the refusal ended: %v", l)
	}
	h.waitFor("the hostile messages to be dead-lettered", 30*time.Second, func() bool {
		return len(p.logs.lines("message", "message rejected")) >= len(hostile)
	})

	// The CLI, with the operator's environment (the passphrase file
	// among it): a refusal before sending, a refusal by the worker, and
	// `plan` while the server refuses the CLI's own fetch with a text
	// that embeds the credentialed URL.
	h.cliEnv = []string{"GIT_SIGNING_KEY_FILE=" + k.file, "GIT_SIGNING_PASSPHRASE_FILE=" + k.passFile, "GIT_USERNAME=operator"}
	out, errOut, _ := h.cli(resultsURL, "send", "onboarding", "--tenant-id", "<script>"+token+"\x1b[2J", "--tier", "premium", "--release", "0.0")
	surfaces["CLI refusal"] = out + errOut
	out, errOut, _ = h.cli(resultsURL, "send", "onboarding", "--tenant-id", "tenant-2", "--tier", "gold\x1b[31m"+hostilePassphrase, "--release", "0.0", "--wait")
	surfaces["CLI send --wait"] = out + errOut
	var operatorRefused atomic.Int32
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if user, _, _ := r.BasicAuth(); user == "operator" {
			operatorRefused.Add(1)
			http.Error(w, "access to "+credURL+" denied", http.StatusForbidden)
			return false
		}
		return true
	})
	out, errOut, _ = h.cli(resultsURL, "plan", "onboarding", "--tenant-id", "tenant-3", "--tier", "premium", "--release", "0.0")
	surfaces["CLI plan"] = out + errOut
	if operatorRefused.Load() == 0 {
		t.Fatal("planned fault did not occur: the CLI's fetch was not refused")
	}

	surfaces["log"] = p.logs.String()
	surfaces["status page"] = h.httpGet("/")
	surfaces["status page, refused"] = h.httpGet("/?outcome=rejected")
	surfaces["/api/runs"] = h.httpGet("/api/runs")
	surfaces["/metrics"] = h.httpGet("/metrics")
	surfaces["result events"] = h.drainAll(resultsURL)
	surfaces["dead-letter attributes"] = h.drainAll(h.q.dlq["onboarding"])

	for name, text := range surfaces {
		if text == "" {
			t.Errorf("%s: nothing read", name)
		}
		decoded := redacttest.Decodings(text)
		for _, s := range secrets {
			if _, ok := redacttest.Find(decoded, s); ok {
				t.Errorf("%s shows a secret (%.12s…)", name, s)
			}
		}
		if m := liveMarkup.FindString(text); m != "" && (strings.HasPrefix(name, "status page") || name == "/api/runs") {
			t.Errorf("%s carries live markup %q", name, m)
		}
		if strings.ContainsAny(text, "\x1b\x07") || !utf8.ValidString(text) {
			t.Errorf("%s carries terminal escapes or invalid UTF-8", name)
		}
	}
	// What each surface shows of the hostile input, blanked or escaped.
	for name, want := range map[string]string{
		"/readyz":                  "[REDACTED]",
		"status page while paused": "[REDACTED]",
		"status page, refused":     "&lt;script&gt;",
		"log":                      "[REDACTED]",
		"result events":            "[REDACTED]",
		"dead-letter attributes":   "[REDACTED]",
		"CLI refusal":              "[REDACTED]",
		"CLI send --wait":          `\x1b`,
		"CLI plan":                 "[REDACTED]",
	} {
		if !strings.Contains(surfaces[name], want) {
			t.Errorf("%s does not show the hostile text (%q) it was given:\n%s", name, want, tail(surfaces[name], 3000))
		}
	}
}

// addr is the address the worker process serves HTTP on, from its log.
func (p *process) addr(t *testing.T) string {
	t.Helper()
	for _, l := range p.logs.lines("message", "serving the status page, /api/runs, /metrics, /healthz and /readyz") {
		if a, ok := l["addr"].(string); ok {
			return a
		}
	}
	t.Fatalf("the worker did not say where it serves HTTP:\n%s", p.logs.String())
	return ""
}

// drainAll receives and deletes every message of a queue and returns their
// bodies and attributes as text. It ends when the queue holds none, in
// flight included: an empty receive alone is no proof, since a message
// another reader holds (`send --wait` takes every event it sees and gives
// back the others) is invisible until given back or its visibility ends.
func (h *harness) drainAll(url string) string {
	h.t.Helper()
	var b strings.Builder
	h.waitFor("the queue "+queueName(url)+" to be drained", 90*time.Second, func() bool {
		out, err := h.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			h.t.Fatal(err)
		}
		for _, m := range out.Messages {
			if !strings.HasSuffix(url, "-dlq") {
				// A dead letter's body is the sender's own message, kept
				// whole for a redrive; its attributes are the worker's.
				b.WriteString(aws.ToString(m.Body) + "\n")
			}
			for k, v := range m.MessageAttributes {
				fmt.Fprintf(&b, "%s=%s\n", k, aws.ToString(v.StringValue))
			}
			_, _ = h.api.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
		}
		return len(out.Messages) == 0 && h.queueCount(url) == 0
	})
	return b.String()
}
