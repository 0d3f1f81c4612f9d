package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/message"
)

// TestABigBatchsRecordsGoToTheJournal: a batch of 70 onboardings (70
// records: a new tenant's message, its base absent before it being no
// record) pushes its records in the ledger's journal, and a second such
// batch merges a journal folder into the groups; every message of both
// is then known: its redelivery is a duplicate, an offboarding of one of
// its tenants sent before its onboarding is stale, and an onboarding of
// one into another tier is held.
func TestABigBatchsRecordsGoToTheJournal(t *testing.T) {
	e := setup(t)
	sent := time.Now()
	var all []Job
	for b := range 2 {
		var jobs []Job
		for i := range 70 {
			n := b*70 + i
			jobs = append(jobs, Job{Request: onboard(t, fmt.Sprint("j", n), "basic"), MessageID: fmt.Sprint("m", n), Queue: "q", SentAt: sent.Add(time.Duration(n) * time.Millisecond)})
		}
		for i, r := range e.p.Apply(context.Background(), jobs) {
			if !r.Applied || r.Err != nil {
				t.Fatalf("batch %d, job %d: %+v", b, i, r)
			}
		}
		all = append(all, jobs...)
		files := strings.Fields(mustOut(t, e, "ls-tree", "-r", "--name-only", "tenant-worker/ledger"))
		var journal []string
		for _, f := range files {
			if strings.Contains(f, "journal/") {
				journal = append(journal, f)
			}
		}
		if len(journal) == 0 || len(journal) > 16*(b+1) {
			t.Fatalf("batch %d: journal files %v", b, journal)
		}
	}
	head := strings.TrimSpace(mustOut(t, e, "rev-parse", "main"))
	for _, j := range []Job{all[0], all[69], all[70], all[139]} {
		if r := e.p.Apply(context.Background(), []Job{j})[0]; !r.Duplicate || r.Commit.String() != head {
			t.Fatalf("redelivery of %s: %+v", j.MessageID, r)
		}
	}
	for _, n := range []int{5, 96} {
		j := Job{Request: decode(t, message.Offboarding, `{"tenant_id":"j`+fmt.Sprint(n)+`","tenant_tier":"basic"}`), MessageID: fmt.Sprint("o", n), Queue: "q", SentAt: sent}
		if r := e.p.Apply(context.Background(), []Job{j})[0]; r.Err != nil || !r.Stale {
			t.Fatalf("offboarding of j%d sent before its onboarding: %+v", n, r)
		}
	}
	for _, n := range []int{3, 107} {
		j := Job{Request: onboard(t, fmt.Sprint("j", n), "premium"), MessageID: fmt.Sprint("p", n), Queue: "q", SentAt: sent.Add(time.Second)}
		if r := e.p.Apply(context.Background(), []Job{j})[0]; !r.Held {
			t.Fatalf("onboarding j%d into premium: %+v", n, r)
		}
	}
}
