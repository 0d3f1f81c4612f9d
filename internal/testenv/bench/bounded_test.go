package bench

import (
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

// TestPeerRatesWindows: the first and last windows are the first and last
// window/batch pushes, the last push counted with only what it carries.
func TestPeerRatesWindows(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// 5 pushes of 100 messages, the last of 50 (450 in all), windows of 200.
	took := []time.Duration{ms(100), ms(300), ms(1000), ms(500), ms(250)}
	packed := []packStat{{ms(10), 1024}, {ms(30), 3072}, {ms(99), 99}, {ms(50), 5120}, {ms(70), 7168}}
	r := peerRates(took, packed, 450, 100, 200)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if r.Pushes != 5 {
		t.Errorf("pushes %d, want 5", r.Pushes)
	}
	near("Seconds", r.Seconds, 2.15)
	near("PerSecond", r.PerSecond, 450/2.15)
	near("PushFirstMS", r.PushFirstMS, 200)
	near("PushLastMS", r.PushLastMS, 375)
	near("PackFirstMS", r.PackFirstMS, 20)
	near("PackLastMS", r.PackLastMS, 60)
	near("PackFirstKB", r.PackFirstKB, 2)
	near("PackLastKB", r.PackLastKB, 6)
	near("FirstPerSecond", r.FirstPerSecond, 200/0.4)
	near("LastPerSecond", r.LastPerSecond, 150/0.75)
	near("LastOverFirst", r.LastOverFirst, (150/0.75)/(200/0.4))
}

// TestBoundedPushesCountTheirMessages: when messages is not a multiple of
// batch, the pushes add messages tenants, as peerRates counts them (the
// last push fewer), not a full batch in every push.
func TestBoundedPushesCountTheirMessages(t *testing.T) {
	srv, h, seed := boundedSource(t)
	const messages, batch = 100, 30 // 4 pushes: 30, 30, 30 and 10
	if _, err := boundedPushes(h, "src.git", seed, messages, batch, batch, recordsPerPush, io.Discard); err != nil {
		t.Fatal(err)
	}
	files, err := srv.Output("ledger-peer-bounded-per-push.git", "ls-tree", "-r", "--name-only", "main")
	if err != nil {
		t.Fatal(err)
	}
	added := 0
	for _, p := range strings.Fields(files) {
		if strings.Contains(p, "/bounded-") && !strings.HasSuffix(p, "/kustomization.yaml") {
			added++
		}
	}
	if added != messages {
		t.Errorf("%d tenants pushed, peerRates counts %d", added, messages)
	}
}
