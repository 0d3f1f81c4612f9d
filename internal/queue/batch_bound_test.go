package queue

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/tenant-worker/tenant-worker/internal/config"
)

// TestBatchNeverExceedsMaxBatch: RUN_HISTORY=505 set alone makes the
// batch 505 (config.Options.Batch), which the history holds. Follow-up
// receives ask for no more than the batch has room for: with 10 a receive,
// the batch stops at 505, not 510, which would push runs out of the
// history at once (found by review; MAX_BATCH=15 made batches of 20). The
// fake honours MaxNumberOfMessages, as SQS does.
func TestBatchNeverExceedsMaxBatch(t *testing.T) {
	o := config.Default()
	o.RunHistory = 505
	batch := o.Batch()
	if batch != 505 {
		t.Fatalf("setup: Batch() = %d", batch)
	}
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := 0
	f.receive = func(_ context.Context, in *sqs.ReceiveMessageInput) ([]types.Message, error) {
		var out []types.Message
		for range min(10, int(in.MaxNumberOfMessages)) {
			k++
			out = append(out, types.Message{MessageId: aws.String(strconv.Itoa(k)), ReceiptHandle: aws.String("rh-" + strconv.Itoa(k)), Body: aws.String("{}")})
		}
		return out, nil
	}
	got := make(chan int, 1)
	con := testConsumer(f, func(_ context.Context, ms []Message) []Disposition {
		select {
		case got <- len(ms):
		default:
		}
		cancel()
		return uniform(len(ms), Disposition{Action: Ack})
	}, Options{WaitTime: time.Second, MaxMessages: o.MaxMessages, MaxBatch: batch, VisibilityTimeout: time.Minute})
	con.Run(ctx)
	if n := <-got; n != batch {
		t.Errorf("a batch of %d messages with MAX_BATCH resolved to %d and RUN_HISTORY %d; want the batch whole", n, batch, o.RunHistory)
	}
}
