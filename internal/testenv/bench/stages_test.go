package bench

import "testing"

// TestStatusAddrRegexp: the worker's status address is read from its
// start line as zerolog writes it (its time between the address and the
// message).
func TestStatusAddrRegexp(t *testing.T) {
	line := `{"level":"info","addr":"127.0.0.1:4567","time":"2026-12-08T00:00:00Z","message":"serving the status page, /api/runs, /metrics, /healthz and /readyz"}` + "\n"
	if m := statusAddr.FindStringSubmatch(line); m == nil || m[1] != "127.0.0.1:4567" {
		t.Fatalf("statusAddr found %v in %s", m, line)
	}
}
