package integration

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/tenant-worker/tenant-worker/internal/worker"
)

// chromium finds Debian's Chromium (make test installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium on this machine: `make test` installs Debian's chromium package (make debs)")
	return ""
}

// browser starts headless Chromium and returns a context for it, ended
// with the test. A Chromium that crashes while starting (seen now and then
// on a loaded machine, before any page is loaded) is started again, up to
// three times.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
			chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1400, 900))
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(actx)
		// The first action starts the browser.
		if _, err = chromedp.Run(ctx, chromedp.Func(func(context.Context, *chromedp.Target) error { return nil })); err == nil {
			t.Cleanup(func() { cancel(); cancelAlloc() })
			return ctx
		}
		cancel()
		cancelAlloc()
		t.Logf("Chromium did not start (attempt %d): %v", attempt, firstLine(err.Error()))
	}
	t.Fatalf("Chromium did not start: %v", err)
	return nil
}

// workerInBrowser starts a worker and Chromium, for a test of the status
// page of at most 90 s.
func workerInBrowser(t *testing.T) (*harness, context.Context) {
	t.Helper()
	exe := chromium(t)
	h := newHarness(t, true)
	h.start()
	ctx, cancel := context.WithTimeout(browser(t, exe), 90*time.Second)
	t.Cleanup(cancel)
	return h, ctx
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// TestStatusPageInBrowser loads the status page in headless Chromium with
// JavaScript disabled while the worker processes messages, and checks that
// the table fills in by itself (the page refreshes without scripts): the
// in-flight run, then the finished rows with outcome and reason. With
// SCREENSHOT=1 it saves integration/testdata/status-page.png.
func TestStatusPageInBrowser(t *testing.T) {
	h, ctx := workerInBrowser(t)

	// A push that takes a while, so that the run is seen in flight.
	release := make(chan struct{})
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") {
			select {
			case <-release:
			case <-time.After(15 * time.Second):
			}
		}
		return true
	})

	// The page is read through the DOM domain only (DOM.querySelector,
	// DOM.getOuterHTML): with scripts disabled, nothing runs in the page.
	run := func(a chromedp.Action[chromedp.Void], what string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, a); err != nil {
			t.Fatalf("%s: %v\nworker log:\n%s", what, err, tail(h.logs.String(), 2000))
		}
	}
	html := func(sel string) string {
		t.Helper()
		nodes, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("waiting for %s on the page: %v\nworker log:\n%s", sel, err, tail(h.logs.String(), 2000))
		}
		var out string
		run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			res, err := cdp.Call(ctx, tg, dom.GetOuterHTML, dom.GetOuterHTMLParams{NodeID: nodes[0].NodeID})
			out = res.OuterHTML
			return err
		}), "read "+sel)
		return out
	}
	run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	}), "disable scripts")
	run(chromedp.Navigate("http://"+h.httpAddr+"/"), "load the status page")
	if got := html("#runs"); !strings.Contains(got, "no runs yet") {
		t.Errorf("a fresh worker shows runs: %s", got)
	}

	// The page reloads by itself (meta refresh); nothing here navigates
	// again. First the run in flight, held in its push.
	good := h.send(h.q.onboarding, `{"tenant_id":"tenant-42","tenant_tier":"premium","release_version":"0.0"}`)
	row := html(`#in-flight tr[data-message-id="` + good + `"]`)
	if !strings.Contains(row, "tenant-42") || !strings.Contains(row, `class="step"`) {
		t.Errorf("in-flight row: %s", row)
	}
	close(release)

	bad := h.send(h.q.onboarding, `{"tenant_id":"tenant-43","tenant_tier":"platinum","release_version":"0.0"}`)
	if row := html(`#runs tr[data-message-id="` + good + `"] td.applied`); !strings.Contains(row, "applied") {
		t.Errorf("applied row: %s", row)
	}
	if row := html(`#runs tr[data-message-id="` + bad + `"] .reason`); !strings.Contains(row, "unknown_tier") {
		t.Errorf("refused row: %s", row)
	}
	rows, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll(`#runs tbody tr[data-message-id]`)))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Errorf("%d run rows, want 2", len(rows))
	}
	if q := html(`#queues tr[data-queue="` + queueName(h.q.onboarding) + `"]`); !strings.Contains(q, queueName(h.q.onboarding)) {
		t.Errorf("queue row: %s", q)
	}
	if os.Getenv("SCREENSHOT") != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", "status-page.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostileBodiesInertInBrowser sends bodies made to attack the status
// page (script and event-handler markup, terminal escapes, a body of
// 256 KiB, bytes that are not UTF-8) and loads the page in Chromium with
// JavaScript on. No script may run (no dialog, no changed title or global),
// no element may come out of a body, and each body must be shown as text.
func TestHostileBodiesInertInBrowser(t *testing.T) {
	h, ctx := workerInBrowser(t)

	var dialogs atomic.Int32
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	const payload = `<script>window.pwned=1;document.title="pwned";alert(1)</script><img src=x onerror="window.pwned=1;alert(2)"><svg onload="alert(3)">`
	bodies := map[string]string{
		"markup, not JSON":   payload,
		"markup in a field":  `{"tenant_id":"` + strings.ReplaceAll(payload, `"`, `\"`) + `","tenant_tier":"premium","release_version":"0.0"}`,
		"terminal escapes":   `{"tenant_id":"t1","tenant_tier":"\u001b[2J\u001b]0;owned\u0007","release_version":"0.0"}`,
		"256 KiB of markup":  strings.Repeat(payload, 256*1024/len(payload)),
		"not UTF-8, escaped": `{"tenant_id":"\udc00\ud800","tenant_tier":"premium","release_version":"0.0"}`,
	}
	ids := map[string]string{}
	for name, b := range bodies {
		ids[h.send(h.q.onboarding, b)] = name
	}
	// The run history, not the log: a refusal is logged before its
	// dead-lettering, and the run is recorded after it.
	h.waitFor("every hostile body to be refused and in the run history", 30*time.Second, func() bool {
		done := map[string]bool{}
		for _, r := range h.apiRuns("").Runs {
			done[r.MessageID] = r.Outcome == worker.OutcomeRejected
		}
		for id := range ids {
			if !done[id] {
				return false
			}
		}
		return true
	})

	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	if _, err := chromedp.Run(ctx, chromedp.Navigate("http://"+h.httpAddr+"/")); err != nil {
		t.Fatal(err)
	}
	title := eval(`document.title`)
	for id, name := range ids {
		row := eval(`(document.querySelector('#runs tr[data-message-id="` + id + `"]') || {innerText: ""}).innerText`)
		if row == "" {
			t.Errorf("%s: no row on the page", name)
		}
	}
	if n := eval(`String(document.querySelectorAll('#runs script, #runs img, #runs svg, #runs iframe, #runs [onerror], #runs [onload]').length)`); n != "0" {
		t.Errorf("%s elements came out of message bodies", n)
	}
	if text := eval(`document.querySelector('#runs').innerText`); !strings.Contains(text, `<script>window.pwned=1`) {
		t.Errorf("the markup is not shown as text:\n%s", tail(text, 2000))
	}
	if got := eval(`String(window.pwned)`); got != "undefined" || title == "pwned" || dialogs.Load() != 0 {
		t.Errorf("a script ran: window.pwned=%s, title %q, %d dialogs", got, title, dialogs.Load())
	}
	if size := eval(`String(document.documentElement.outerHTML.length)`); len(size) > 6 {
		t.Errorf("the page is %s characters: a 256 KiB body is not cut short", size)
	}
}
