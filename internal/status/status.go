// Package status serves the operator's view of the worker: a status page at
// / (server-rendered, refreshing itself with a meta refresh, so it works
// with JavaScript disabled) and the same data as JSON at /api/runs.
package status

import (
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/runs"
)

// Paths served.
const (
	PagePath = "/"
	RunsPath = "/api/runs"
)

// Info describes the worker for the page's header.
type Info struct {
	Repository string `json:"repository"`
	Branch     string `json:"branch"`
	Version    string `json:"version"`
	// Refresh is how often the page reloads itself.
	Refresh time.Duration `json:"-"`
	// Outcomes are the outcomes the page links to as filters: the
	// worker's.
	Outcomes []string `json:"-"`
}

//go:embed page.html
var assets embed.FS

var page = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"ago":   ago,
	"ms":    func(v int64) string { return fmt.Sprintf("%d ms", v) },
	"steps": steps,
	"short": func(s string) string { return s[:min(len(s), 10)] },
	"depth": func(n int64) string {
		if n < 0 {
			return "—"
		}
		return strconv.FormatInt(n, 10)
	},
}).ParseFS(assets, "page.html"))

// Handler serves the page and the JSON API from rec.
func Handler(rec *runs.Recorder, info Info) http.Handler {
	if info.Refresh <= 0 {
		info.Refresh = 3 * time.Second
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+RunsPath, func(w http.ResponseWriter, r *http.Request) {
		s := filter(rec.Status(), r)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Info
			runs.Status
		}{info, s})
	})
	mux.HandleFunc("GET "+PagePath+"{$}", func(w http.ResponseWriter, r *http.Request) {
		s := filter(rec.Status(), r)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		_ = page.Execute(w, struct {
			Info
			runs.Status
			RefreshSeconds int
			Outcome        string
			Outcomes       []string
		}{info, s, int(info.Refresh.Seconds()), r.URL.Query().Get("outcome"), info.Outcomes})
	})
	return mux
}

// filter keeps the runs the query asks for: ?outcome=, ?tenant=, ?id=
// (a message id) and ?limit=.
func filter(s runs.Status, r *http.Request) runs.Status {
	q := r.URL.Query()
	keep := func(run runs.Run) bool {
		return (q.Get("outcome") == "" || run.Outcome == q.Get("outcome")) &&
			(q.Get("tenant") == "" || run.Tenant == q.Get("tenant")) &&
			(q.Get("id") == "" || run.MessageID == q.Get("id"))
	}
	s.Runs = slices.DeleteFunc(s.Runs, func(run runs.Run) bool { return !keep(run) })
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n >= 0 && n < len(s.Runs) {
		s.Runs = s.Runs[:n]
	}
	return s
}

// ago says how long before now t was, roughly.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t).Round(time.Second)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Hour:
		return d.String() + " ago"
	default:
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	}
}

// steps lists step durations in pipeline order.
func steps(m map[string]int64) string {
	order := []string{"lock", "sync", "render", "commit", "validate", "intent", "push"}
	var names []string
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := slices.Index(order, names[i]), slices.Index(order, names[j])
		if a < 0 || b < 0 {
			return names[i] < names[j]
		}
		return a < b
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, m[n])
	}
	return strings.Join(parts, " · ")
}
