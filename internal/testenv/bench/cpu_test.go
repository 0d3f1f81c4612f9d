package bench

import (
	"strings"
	"testing"
	"time"
)

// TestProcessCPU: what the backlog reads of a process that is gone is
// nothing, not an error in the middle of a run (internal/testenv/cputime
// tests the counts themselves).
func TestProcessCPU(t *testing.T) {
	if processCPU(-1) != 0 {
		t.Error("a process that does not exist spent CPU")
	}
}

// TestCPUAt: the sample in force at a moment is the last taken at or
// before it.
func TestCPUAt(t *testing.T) {
	t0 := time.Now()
	// Two samples at one instant (found by review): the later one counts.
	samples := []cpuSample{{at: t0, worker: 1}, {at: t0.Add(time.Second), worker: 2}, {at: t0.Add(time.Second), worker: 3}, {at: t0.Add(2 * time.Second), worker: 4}}
	for _, tt := range []struct {
		at   time.Duration
		want time.Duration
	}{{-time.Second, 1}, {0, 1}, {500 * time.Millisecond, 1}, {time.Second, 3}, {1500 * time.Millisecond, 3}, {2 * time.Second, 4}, {5 * time.Second, 4}} {
		if got := cpuAt(samples, t0.Add(tt.at)).worker; got != tt.want {
			t.Errorf("at %s: sample %d, want %d", tt.at, got, tt.want)
		}
	}
}

// TestServerCPUPerMessage: the server's CPU a message is read over the
// second window of pushes and the last whole one, and not at all from too
// few pushes.
func TestServerCPUPerMessage(t *testing.T) {
	// Before each of 6 pushes of 10 messages and after the last: 1 s, 2 s,
	// ... of CPU per push, windows of one push.
	cpu := []time.Duration{0, 1 * time.Second, 3 * time.Second, 6 * time.Second, 10 * time.Second, 15 * time.Second, 21 * time.Second}
	got := serverCPUPerMessage(cpu, 10, 10)
	// The second push (2 s) and the fifth (5 s), the last whole one.
	if want := [2]float64{200, 500}; got != want {
		t.Errorf("serverCPUPerMessage = %v, want %v", got, want)
	}
	// Three pushes of one a window: the second and the last whole one
	// would be one push (found by review).
	if got := serverCPUPerMessage(cpu[:4], 10, 10); got != [2]float64{} {
		t.Errorf("from three pushes: %v, want nothing", got)
	}
}

// TestLedgerTableSetsTheWorkerAgainstTheFloor: the backlog's table says
// whether the worker's last/first is at least that of the git CLI pushing
// the same content every time, in the same run, and nothing of it without
// that peer.
func TestLedgerTableSetsTheWorkerAgainstTheFloor(t *testing.T) {
	floor := &PeerReplay{Bounded: true, Records: recordsPerPush.String(), LastOverFirst: 0.77}
	other := &PeerReplay{Bounded: true, Records: recordsIn16s.String(), LastOverFirst: 0.99}
	for _, tt := range []struct {
		worker float64
		peers  []*PeerReplay
		want   string
	}{
		{0.81, []*PeerReplay{other, floor}, "0.81 against 0.77: at least the same: yes"},
		{0.70, []*PeerReplay{floor, other}, "0.70 against 0.77: at least the same: no"},
		{0.81, []*PeerReplay{other}, ""},
	} {
		r := &LedgerResult{Backlog: &LedgerBacklog{FirstPerSecond: 100, LastOverFirst: tt.worker, Peers: tt.peers}}
		got := LedgerTable(r)
		if tt.want == "" {
			if strings.Contains(got, "at least the same") {
				t.Errorf("without the constant-content peer the table compares: %s", got)
			}
			continue
		}
		if !strings.Contains(got, tt.want) {
			t.Errorf("worker %.2f: the table does not say %q:\n%s", tt.worker, tt.want, got)
		}
	}
}
