package integration

import (
	"context"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/tenant-worker/tenant-worker/internal/ledger"
	"github.com/tenant-worker/tenant-worker/internal/testenv/bench"
	"github.com/tenant-worker/tenant-worker/templates"
)

// TestLedgerKeepsTheLongestRetention: the ledger keeps a message id as
// long as the queue that keeps messages longest could deliver it again,
// and no longer. The onboarding and deployment queues keep messages a
// minute, the offboarding queue (neither the first nor the last the worker
// reads) seven days; the ledger holds an id sent five days ago and one
// sent eight days ago. A push, which prunes the hours no queue can deliver
// any more, keeps the first (pruned by the shortest retention, by the
// first or last queue's, or by SQS's default of four days, a redelivery
// of it would be applied twice) and drops the second (kept by a worker
// that prunes nothing, or prunes at SQS's longest, 14 days).
func TestLedgerKeepsTheLongestRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, false)
	retention := map[string]string{h.q.onboarding: "60", h.q.offboarding: "604800", h.q.deployment: "60"}
	for u, secs := range retention {
		if _, err := h.api.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(u),
			Attributes: map[string]string{string(types.QueueAttributeNameMessageRetentionPeriod): secs}}); err != nil {
			t.Fatal(err)
		}
	}
	for u, want := range retention {
		out, err := h.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(u),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMessageRetentionPeriod}})
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Attributes[string(types.QueueAttributeNameMessageRetentionPeriod)]; got != want {
			t.Fatalf("%s keeps messages %s s, want %s", u, got, want)
		}
	}

	// The ledger branch, made before the worker starts: an id sent five
	// days ago, and one sent eight days ago, each in its hour's folder.
	day := 24 * time.Hour
	ledgerFiles := func(id string, age time.Duration) map[string][]byte {
		l := ledger.Open(nil)
		l.Note(id, time.Now().Add(-age).UnixMilli())
		files := map[string][]byte{}
		for p, b := range l.Changes() {
			files[path.Join(templates.Root, p)] = b
		}
		if len(files) == 0 {
			t.Fatalf("the ledger wrote no file for %s", id)
		}
		return files
	}
	kept := ledgerFiles("3f2c8a90-1b4d-4e6f-8a7b-9c0d1e2f3a4b", 5*day)
	dropped := ledgerFiles("7a1e4c22-5d3b-4f80-9e6a-0b1c2d3e4f50", 8*day)
	files := map[string][]byte{}
	for _, m := range []map[string][]byte{kept, dropped} {
		for p, b := range m {
			if _, ok := files[p]; ok {
				t.Fatalf("the two ids share %s", p)
			}
			files[p] = b
		}
	}
	if err := bench.PrefillLedger(ctx, h.git.RepoURL(repoName), h.token, files, 2); err != nil {
		t.Fatal(err)
	}

	h.start()
	id := h.send(h.q.onboarding, `{"tenant_id":"kept-1","tenant_tier":"premium","release_version":"0.0"}`)
	if line := h.outcome(id); line["message"] != "tenant change pushed" {
		t.Fatalf("onboarding: %v", line)
	}
	if msg := h.gitOut("log", "-1", "--format=%s", "tenant-worker/ledger"); !strings.Contains(msg, "kept-1") {
		t.Fatalf("the ledger branch did not move with the onboarding: its last commit is %q", msg)
	}
	holds := "\n" + h.gitOut("ls-tree", "-r", "--name-only", "tenant-worker/ledger")
	for p := range kept {
		if !strings.Contains(holds, "\n"+p+"\n") {
			t.Errorf("the push pruned %s, which the offboarding queue's seven days still need; the ledger holds:%s", p, holds)
		}
	}
	for p := range dropped {
		if strings.Contains(holds, "\n"+p+"\n") {
			t.Errorf("the push kept %s, older than every queue's retention; the ledger holds:%s", p, holds)
		}
	}
}
