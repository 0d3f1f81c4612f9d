package bench

import (
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/config"
)

// TestMaxBatchAsTheWorkerReadsIt: the bench sizes its windows, peers and
// batches by the workers' batch, which MAX_BATCH=0 (the default, which
// the compose file sends) and RUN_HISTORY decide together; a 0 taken
// literally would divide by zero in the peers and apply empty batches.
func TestMaxBatchAsTheWorkerReadsIt(t *testing.T) {
	for env, want := range map[string]int{
		"":                            config.MaxBatchLimit,
		"MAX_BATCH=0":                 config.MaxBatchLimit,
		"MAX_BATCH=0 RUN_HISTORY=500": 500,
		"RUN_HISTORY=500":             500,
		"MAX_BATCH=200":               200,
		// The worker gets the last of a repeated key, and an empty value
		// is unset (found by review).
		"MAX_BATCH=200 MAX_BATCH=":     config.MaxBatchLimit,
		"RUN_HISTORY=500 RUN_HISTORY=": config.MaxBatchLimit,
		"MAX_BATCH=200 MAX_BATCH=300":  300,
	} {
		t.Setenv("BENCH_WORKER_ENV", env)
		if got := maxBatch(); got != want {
			t.Errorf("BENCH_WORKER_ENV=%q: maxBatch() = %d, the worker's batch is %d", env, got, want)
		}
	}
}
