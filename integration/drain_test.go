package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
)

// TestDrainReadsWhatALostReceiveHid: a receive whose answer never reached
// the test leaves its messages in flight; the drain that checks the
// dead-letter queues must still read them, or a run reports dead letters
// missing that are there.
func TestDrainReadsWhatALostReceiveHid(t *testing.T) {
	h := &harness{t: t, api: sqsClient(), logs: &syncBuffer{}}
	h.q = createQueuesOpts(t, h.api, fauxqs.QueueOptions{MaxReceiveCount: 5})
	url := h.q.dlq["onboarding"]
	for i := range 3 {
		if _, err := h.api.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(url), MessageBody: aws.String("{}"),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"source_message_id": {DataType: aws.String("String"), StringValue: aws.String(fmt.Sprintf("m%d", i))},
				"reason":            {DataType: aws.String("String"), StringValue: aws.String("invalid_json")},
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The lost answer: two messages taken, never deleted.
	out, err := h.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 2, VisibilityTimeout: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 2 {
		t.Fatalf("the hiding receive took %d messages, want 2", len(out.Messages))
	}
	got := h.drainDLQ(url)
	for i := range 3 {
		if id := fmt.Sprintf("m%d", i); got[id] != "invalid_json" {
			t.Errorf("dead letter %s: reason %q, want invalid_json (read: %v)", id, got[id], got)
		}
	}
	if n := h.queueCount(url); n != 0 {
		t.Errorf("%d messages left after the drain", n)
	}
}
