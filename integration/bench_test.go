package integration

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/testenv/bench"
)

// TestBenchHarness runs `make bench`'s harness at toy sizes: every size
// gets its worker, floor, onboardings, reference runs (the repository's
// bench/reference-onboard.sh) and the backlog run, and the table shows
// them.
// The figures themselves are the benchmark's business, not a test's.
func TestBenchHarness(t *testing.T) {
	t.Parallel()
	opts := bench.Options{Sizes: []int{3, 20}, Onboard: 3, Floor: 2, Reference: 1, Backlog: 5, BacklogAt: 20,
		Binary: workerBinary(t), SQSEndpint: sqsEndpoint, WorkDir: t.TempDir()}
	opts.RefScript = "../bench/reference-onboard.sh" // the repository's copy of the reference's steps
	results, err := bench.Run(context.Background(), opts, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d results, want 2", len(results))
	}
	for _, r := range results {
		if r.Worker.N != 3 || r.Floor.N != 2 || r.Worker.P50 <= 0 || r.Floor.P50 <= 0 || r.PeakRSSMB <= 0 {
			t.Errorf("%d tenants: %+v", r.Tenants, r)
		}
		if opts.RefScript != "" && (r.Reference.N != 1 || r.ReferenceRatio <= 0) {
			t.Errorf("%d tenants: reference %+v", r.Tenants, r.Reference)
		}
		if (r.Throughput > 0) != (r.Tenants == 20) {
			t.Errorf("%d tenants: backlog throughput %.1f/s", r.Tenants, r.Throughput)
		}
	}
	table := bench.Table(results)
	for _, row := range []string{"\n| 3 |", "\n| 20 |"} {
		if !strings.Contains(table, row) {
			t.Errorf("table has no row %q:\n%s", row, table)
		}
	}
}
