package queue

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// timedSQS is fakeSQS with a latency per call and SQS's visibility
// deadlines: a receipt handle whose deadline passes before it is renewed or
// deleted is recorded as expired (SQS could have handed a second copy to
// another consumer then).
type timedSQS struct {
	*fakeSQS
	latency  time.Duration
	mu       sync.Mutex
	deadline map[string]time.Time
	expired  map[string]time.Duration // receipt handle -> how late
	n        int
}

func (f *timedSQS) check(rh string, now time.Time) {
	if d, ok := f.deadline[rh]; ok && now.After(d) {
		if late := now.Sub(d); late > f.expired[rh] {
			f.expired[rh] = late
		}
	}
}

func (f *timedSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	time.Sleep(f.latency)
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	var out []types.Message
	for range in.MaxNumberOfMessages { // an endless backlog
		f.n++
		rh := "rh-" + strconv.Itoa(f.n)
		f.deadline[rh] = now.Add(time.Duration(in.VisibilityTimeout) * time.Second)
		out = append(out, types.Message{MessageId: aws.String(strconv.Itoa(f.n)), ReceiptHandle: aws.String(rh), Body: aws.String("{}")})
	}
	return &sqs.ReceiveMessageOutput{Messages: out}, nil
}

func (f *timedSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	time.Sleep(f.latency)
	f.mu.Lock()
	now := time.Now()
	for _, e := range in.Entries {
		rh := aws.ToString(e.ReceiptHandle)
		f.check(rh, now)
		f.deadline[rh] = now.Add(time.Duration(e.VisibilityTimeout) * time.Second)
	}
	f.mu.Unlock()
	return f.fakeSQS.ChangeMessageVisibilityBatch(ctx, in, o...)
}

func (f *timedSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	time.Sleep(f.latency)
	f.mu.Lock()
	now := time.Now()
	for _, e := range in.Entries {
		f.check(aws.ToString(e.ReceiptHandle), now)
		delete(f.deadline, aws.ToString(e.ReceiptHandle))
	}
	f.mu.Unlock()
	return f.fakeSQS.DeleteMessageBatch(ctx, in, o...)
}

// TestReviewBatchStaysInvisibleAtValidatedVisibility: SQS_VISIBILITY_TIMEOUT
// 2s passes config validation (1s to 12h); with 40 ms per SQS call and a
// batch that takes 3 s to apply, no message of the batch may become
// visible before it is deleted (docs/messages.md: "a slow push never lets
// a second copy start"). MAX_BATCH 200 (the former default) keeps that;
// 500 (the new default) does not: 49 follow-up receives take longer than
// the visibility timeout, and a heartbeat sweep is 50 sequential calls.
func TestReviewBatchStaysInvisibleAtValidatedVisibility(t *testing.T) {
	for _, maxBatch := range []int{200, 500} {
		t.Run(fmt.Sprintf("MAX_BATCH=%d", maxBatch), func(t *testing.T) {
			f := &timedSQS{fakeSQS: newFake(), latency: 40 * time.Millisecond,
				deadline: map[string]time.Time{}, expired: map[string]time.Duration{}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var size int
			con := testConsumer(f, func(_ context.Context, ms []Message) []Disposition {
				size = len(ms)
				time.Sleep(3 * time.Second) // a batch of 500 on Gitea: about 4-5 s
				cancel()
				return uniform(len(ms), Disposition{Action: Ack})
			}, Options{WaitTime: time.Second, MaxMessages: 10, MaxBatch: maxBatch,
				VisibilityTimeout: 2 * time.Second, ShutdownGrace: 30 * time.Second})
			con.Run(ctx)
			f.mu.Lock()
			defer f.mu.Unlock()
			var worst time.Duration
			for _, late := range f.expired {
				worst = max(worst, late)
			}
			if len(f.expired) > 0 {
				t.Errorf("batch of %d: %d messages were visible again before being renewed or deleted (up to %v late)",
					size, len(f.expired), worst.Round(time.Millisecond))
			}
		})
	}
}
