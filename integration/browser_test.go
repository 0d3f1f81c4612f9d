package integration

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// chromium finds Debian's Chromium (make test installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium on this machine: `make test` installs Debian's chromium package (make chromium)")
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
	exe := chromium(t)
	h := newHarness(t, true)
	h.start()

	ctx := browser(t, exe)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()

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
