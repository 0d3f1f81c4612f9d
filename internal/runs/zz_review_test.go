package runs

import (
	"strconv"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/config"
)

// TestReviewOneBatchFitsTheHistory: with the defaults, one batch of
// MAX_BATCH messages (finished together by worker.finish) must still be in
// the run history when their readiness comes back (worker.Stage/Done call
// UpdateDone by message id), and on the status page / /api/runs.
func TestReviewOneBatchFitsTheHistory(t *testing.T) {
	d := config.Default()
	r := New(d.RunHistory)
	for i := range d.MaxBatch {
		r.Start(Run{MessageID: "m" + strconv.Itoa(i), Queue: "q"})
	}
	for i := range d.MaxBatch {
		r.Finish(Run{MessageID: "m" + strconv.Itoa(i), Queue: "q", Outcome: "applied"})
	}
	missing := 0
	for i := range d.MaxBatch {
		found := false
		r.UpdateDone("m"+strconv.Itoa(i), func(*Run) { found = true })
		if !found {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("RUN_HISTORY %d, MAX_BATCH %d: %d runs of one batch are gone from the history as soon as it finishes; their readiness (live, live_ms, live_error) is dropped",
			d.RunHistory, d.MaxBatch, missing)
	}
}
