// Package httpserver serves the worker's operational endpoints: /metrics for
// Prometheus, /healthz for liveness, /readyz for readiness, and whatever
// else the caller mounts (the status page and /api/runs).
package httpserver

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenant-worker/tenant-worker/internal/redact"
)

// Paths served; the Helm chart's probes point at these.
const (
	MetricsPath = "/metrics"
	HealthPath  = "/healthz"
	ReadyPath   = "/readyz"
)

// Handler returns the endpoints. ready reports why the worker is not ready
// yet, or nil once it is. ui, if not nil, serves every other path. Every
// response passes through redact: error texts on /readyz, the status page
// and /api/runs come from git servers and messages.
func Handler(g prometheus.Gatherer, ready func() error, ui http.Handler) http.Handler {
	mux := http.NewServeMux()
	if ui != nil {
		mux.Handle("/", ui)
	}
	// Uncompressed, so that redact sees the text.
	mux.Handle(MetricsPath, promhttp.HandlerFor(g, promhttp.HandlerOpts{DisableCompression: true}))
	mux.HandleFunc(HealthPath, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc(ReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return redact.Handler(mux)
}

// New returns a server for addr with sane timeouts.
func New(addr string, h http.Handler) *http.Server {
	return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
}
