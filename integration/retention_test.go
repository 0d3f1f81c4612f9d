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
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/ledger"
	"github.com/tenant-worker/tenant-worker/templates"
)

// TestLedgerKeepsTheLongestRetention: the ledger keeps a message id as
// long as the queue that keeps messages longest could deliver it again.
// Two queues keep messages a minute, the deployment queue four days (SQS's
// default); the ledger holds an id sent three hours ago. A push, which
// prunes the hours no queue can deliver any more, leaves it: pruned by
// the shortest retention, a redelivery of it from the deployment queue
// would be applied twice.
func TestLedgerKeepsTheLongestRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, false)
	for _, u := range []string{h.q.onboarding, h.q.offboarding} {
		if _, err := h.api.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(u),
			Attributes: map[string]string{string(types.QueueAttributeNameMessageRetentionPeriod): "60"}}); err != nil {
			t.Fatal(err)
		}
	}
	for u, want := range map[string]string{h.q.onboarding: "60", h.q.deployment: "345600"} {
		out, err := h.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(u),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMessageRetentionPeriod}})
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Attributes[string(types.QueueAttributeNameMessageRetentionPeriod)]; got != want {
			t.Fatalf("%s keeps messages %s s, want %s", u, got, want)
		}
	}

	// The ledger branch, made before the worker starts: one id, sent three
	// hours ago.
	l := ledger.Open(nil)
	l.Note("3f2c8a90-1b4d-4e6f-8a7b-9c0d1e2f3a4b", time.Now().Add(-3*time.Hour).UnixMilli())
	files := map[string][]byte{}
	for p, b := range l.Changes() {
		files[path.Join(templates.Root, p)] = b
	}
	if len(files) == 0 {
		t.Fatal("the ledger wrote no file for the id")
	}
	repo, err := gitrepo.Open(ctx, gitrepo.Options{URL: h.git.RepoURL(repoName), Branch: "main", LedgerBranch: "tenant-worker/ledger",
		Token: h.token, AuthorName: "admin", AuthorEmail: "admin@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := repo.Commit(plumbing.ZeroHash, files, "A ledger holding an id sent three hours ago\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.PushRefs(ctx, gitrepo.Move{Old: repo.Head(), New: repo.Head()}, gitrepo.Move{New: c}); err != nil {
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
	kept := h.gitOut("ls-tree", "-r", "--name-only", "tenant-worker/ledger")
	for p := range files {
		if !strings.Contains("\n"+kept, "\n"+p+"\n") {
			t.Errorf("the push pruned %s, which the deployment queue's four days still need; the ledger holds:\n%s", p, kept)
		}
	}
}
