package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/config"
)

// fakeSQS is a small in-memory stand-in for the SQS calls a Consumer makes.
// It records what was settled; the fields ending in Fail make a call fail
// for chosen entries.
type fakeSQS struct {
	mu         sync.Mutex
	receive    func(ctx context.Context, in *sqs.ReceiveMessageInput) ([]types.Message, error)
	deleted    []string         // receipt handles
	visibility map[string]int32 // receipt handle -> last visibility set
	dead       []types.SendMessageBatchRequestEntry
	sendCalls  int
	// sendFail fails dead-letter entries by body; deleteGone answers
	// "already gone" for receipt handles.
	sendFail   map[string]bool
	deleteGone map[string]bool
}

func newFake() *fakeSQS {
	return &fakeSQS{visibility: map[string]int32{}, sendFail: map[string]bool{}, deleteGone: map[string]bool{}}
}

func (f *fakeSQS) GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return &sqs.GetQueueUrlOutput{QueueUrl: aws.String("http://sqs/q")}, nil
}

func (f *fakeSQS) GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return &sqs.GetQueueAttributesOutput{}, nil
}

func (f *fakeSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if f.receive == nil {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	msgs, err := f.receive(ctx, in)
	return &sqs.ReceiveMessageOutput{Messages: msgs}, err
}

func (f *fakeSQS) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		if f.deleteGone[aws.ToString(e.ReceiptHandle)] {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid")})
			continue
		}
		f.deleted = append(f.deleted, aws.ToString(e.ReceiptHandle))
	}
	return out, nil
}

func (f *fakeSQS) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range in.Entries {
		f.visibility[aws.ToString(e.ReceiptHandle)] = e.VisibilityTimeout
	}
	return &sqs.ChangeMessageVisibilityBatchOutput{}, nil
}

func (f *fakeSQS) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sendCalls++
	total := 0
	for _, e := range in.Entries {
		total += len(aws.ToString(e.MessageBody))
		for k, v := range e.MessageAttributes {
			total += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue))
		}
	}
	out := &sqs.SendMessageBatchOutput{}
	if total > defaultMaxBytes || len(in.Entries) > 10 {
		for _, e := range in.Entries {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("BatchRequestTooLong")})
		}
		return out, nil
	}
	for _, e := range in.Entries {
		if f.sendFail[aws.ToString(e.MessageBody)] {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError")})
			continue
		}
		f.dead = append(f.dead, e)
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func (f *fakeSQS) snapshot() (deleted []string, visibility map[string]int32, dead []types.SendMessageBatchRequestEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := map[string]int32{}
	for k, x := range f.visibility {
		v[k] = x
	}
	return append([]string(nil), f.deleted...), v, append([]types.SendMessageBatchRequestEntry(nil), f.dead...)
}

func testConsumer(api API, h Handler, opts Options) *Consumer {
	q := &Queue{Name: "q", URL: "http://sqs/q", DeadLetterURL: "http://sqs/q-dlq"}
	return NewConsumer(api, q, h, opts, nil)
}

func msgs(n int, receives int) []Message {
	out := make([]Message, n)
	for i := range out {
		s := strconv.Itoa(i)
		out[i] = Message{ID: "id-" + s, ReceiptHandle: "rh-" + s, Body: "body-" + s, ReceiveCount: receives}
	}
	return out
}

func answer(ds ...Disposition) Handler {
	return func(context.Context, []Message) []Disposition { return ds }
}

func TestSettleEachDisposition(t *testing.T) {
	f := newFake()
	c := testConsumer(f, answer(
		Disposition{Action: Ack},
		Disposition{Action: Reject, Reason: "unknown_tier", Detail: "tier gold"},
		Disposition{Action: Retry, Detail: "git down"},
		Disposition{Action: Release},
	), Options{RetryDelay: 10 * time.Second, MaxRetryDelay: time.Minute})
	c.process(context.Background(), zerolog.Nop(), msgs(4, 2), time.Now())
	deleted, vis, dead := f.snapshot()
	if strings.Join(deleted, ",") != "rh-0,rh-1" {
		t.Errorf("deleted %v, want the acked and the dead-lettered message", deleted)
	}
	if len(dead) != 1 || aws.ToString(dead[0].MessageBody) != "body-1" ||
		aws.ToString(dead[0].MessageAttributes["reason"].StringValue) != "unknown_tier" ||
		aws.ToString(dead[0].MessageAttributes["source_message_id"].StringValue) != "id-1" {
		t.Errorf("dead letters: %+v", dead)
	}
	// Second receive: the retry waits twice the first delay; release is at once.
	if vis["rh-2"] != 20 || vis["rh-3"] != 0 || len(vis) != 2 {
		t.Errorf("visibility changes %v, want rh-2: 20, rh-3: 0", vis)
	}
}

func TestOnlyWhatWasDeadLetteredIsDeleted(t *testing.T) {
	f := newFake()
	f.sendFail["body-1"] = true
	reject := Disposition{Action: Reject, Reason: "invalid_json"}
	c := testConsumer(f, answer(reject, reject, reject), Options{})
	c.process(context.Background(), zerolog.Nop(), msgs(3, 1), time.Now())
	deleted, _, dead := f.snapshot()
	if strings.Join(deleted, ",") != "rh-0,rh-2" || len(dead) != 2 {
		t.Errorf("deleted %v with %d dead letters; the one that failed to send must stay", deleted, len(dead))
	}
}

func TestReceiptHandlesAlreadyGoneCountAsDone(t *testing.T) {
	f := newFake()
	f.deleteGone["rh-0"] = true
	var failures []string
	c := NewConsumer(f, &Queue{Name: "q", URL: "http://sqs/q"}, answer(Disposition{Action: Ack}, Disposition{Action: Ack}),
		Options{}, func(op string, err error) { failures = append(failures, op) })
	c.process(context.Background(), zerolog.Nop(), msgs(2, 1), time.Now())
	deleted, _, _ := f.snapshot()
	if strings.Join(deleted, ",") != "rh-1" || len(failures) != 0 {
		t.Errorf("deleted %v, failures %v", deleted, failures)
	}
}

func TestRetryDelayDoublesToItsCap(t *testing.T) {
	c := testConsumer(newFake(), nil, Options{RetryDelay: 10 * time.Second, MaxRetryDelay: time.Minute})
	for receives, want := range map[int]time.Duration{0: 10 * time.Second, 1: 10 * time.Second, 2: 20 * time.Second,
		3: 40 * time.Second, 4: time.Minute, 40: time.Minute} {
		if got := c.retryDelay(receives); got != want {
			t.Errorf("retryDelay(%d) = %s, want %s", receives, got, want)
		}
	}
}

func TestShutdownGraceTurnsRetriesIntoReleases(t *testing.T) {
	f := newFake()
	h := func(ctx context.Context, ms []Message) []Disposition {
		<-ctx.Done() // the work outlives the grace
		return []Disposition{{Action: Retry}, {Action: Ack}}
	}
	c := testConsumer(f, h, Options{ShutdownGrace: 50 * time.Millisecond, RetryDelay: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // shutdown has begun
	c.process(ctx, zerolog.Nop(), msgs(2, 1), time.Now())
	deleted, vis, _ := f.snapshot()
	if vis["rh-0"] != 0 || len(vis) != 1 || strings.Join(deleted, ",") != "rh-1" {
		t.Errorf("visibility %v, deleted %v: the retry must be released at once", vis, deleted)
	}
}

func TestWrongNumberOfDispositionsReleasesAll(t *testing.T) {
	f := newFake()
	c := testConsumer(f, answer(Disposition{Action: Ack}), Options{})
	c.process(context.Background(), zerolog.Nop(), msgs(3, 1), time.Now())
	deleted, vis, _ := f.snapshot()
	if len(deleted) != 0 || len(vis) != 3 || vis["rh-0"] != 0 {
		t.Errorf("deleted %v, visibility %v: every message must be released", deleted, vis)
	}
}

func TestPanicInTheHandlerIsRetried(t *testing.T) {
	f := newFake()
	var observed []string
	c := NewConsumer(f, &Queue{Name: "q", URL: "http://sqs/q"}, func(context.Context, []Message) []Disposition {
		var m map[string]int
		m["boom"]++ // a nil map write
		return nil
	}, Options{RetryDelay: 5 * time.Second}, func(op string, err error) { observed = append(observed, op) })
	c.process(context.Background(), zerolog.Nop(), msgs(2, 1), time.Now())
	deleted, vis, _ := f.snapshot()
	if len(deleted) != 0 || vis["rh-0"] != 5 || vis["rh-1"] != 5 || strings.Join(observed, ",") != "handle" {
		t.Errorf("deleted %v, visibility %v, observed %v", deleted, vis, observed)
	}
}

func TestLargeRejectedBodiesAreDeadLettered(t *testing.T) {
	f := newFake()
	ms := msgs(4, 1)
	ms[0].Body = strings.Repeat("x", defaultMaxBytes-20) // leaves no room for attributes
	ms[1].Body = strings.Repeat("y", 150*1024)           // fits alone, not with the next
	ms[2].Body = strings.Repeat("z", 150*1024)
	reject := Disposition{Action: Reject, Reason: "invalid_json", Detail: strings.Repeat("e", 2000)}
	c := testConsumer(f, answer(reject, reject, reject, reject), Options{})
	c.process(context.Background(), zerolog.Nop(), ms, time.Now())
	deleted, _, dead := f.snapshot()
	if len(deleted) != 4 || len(dead) != 4 {
		t.Fatalf("deleted %d, dead-lettered %d of 4", len(deleted), len(dead))
	}
	for _, d := range dead {
		if len(aws.ToString(d.MessageBody)) < 100*1024 {
			continue
		}
		if aws.ToString(d.MessageBody) == ms[0].Body && len(d.MessageAttributes) > 1 {
			t.Errorf("the body at the limit kept %d attributes", len(d.MessageAttributes))
		}
	}
	if aws.ToString(dead[1].MessageAttributes["reason"].StringValue) != "invalid_json" {
		t.Errorf("a body that fits lost its reason: %v", dead[1].MessageAttributes)
	}
}

func TestPollInFlightAtShutdownIsReleased(t *testing.T) {
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	polled := make(chan struct{})
	var once sync.Once
	f.receive = func(pctx context.Context, _ *sqs.ReceiveMessageInput) ([]types.Message, error) {
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil, nil
		}
		close(polled)
		<-ctx.Done() // SIGTERM arrives while the poll waits...
		if pctx.Err() != nil {
			return nil, pctx.Err() // an abandoned poll: what SQS hands it is stranded
		}
		// ...and SQS hands the poll a message just after.
		return []types.Message{{MessageId: aws.String("late"), ReceiptHandle: aws.String("rh-late"), Body: aws.String("{}")}}, nil
	}
	handled := false
	c := testConsumer(f, func(context.Context, []Message) []Disposition {
		handled = true
		return []Disposition{{Action: Ack}}
	}, Options{ShutdownGrace: 5 * time.Second, WaitTime: time.Second})
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	<-polled
	cancel()
	<-done
	_, vis, _ := f.snapshot()
	if handled || len(vis) != 1 || vis["rh-late"] != 0 {
		t.Errorf("handled %v, visibility %v: the late message must be made visible at once", handled, vis)
	}
}

// TestFollowUpReceiveAtShutdownIsReleased: a full receive is followed by
// receives that take what else is waiting. One of them in flight when
// SIGTERM arrives must run out within the grace, not be abandoned: SQS may
// hand it messages, which are then made visible again at once instead of
// staying invisible for their whole visibility timeout.
func TestFollowUpReceiveAtShutdownIsReleased(t *testing.T) {
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	following := make(chan struct{})
	calls := 0
	f.receive = func(pctx context.Context, _ *sqs.ReceiveMessageInput) ([]types.Message, error) {
		calls++
		switch calls {
		case 1: // a full receive: one message, MaxMessages 1
			return []types.Message{{MessageId: aws.String("first"), ReceiptHandle: aws.String("rh-first"), Body: aws.String("{}")}}, nil
		case 2: // the follow-up receive
			close(following)
			<-ctx.Done() // SIGTERM arrives while it is in flight...
			if pctx.Err() != nil {
				return nil, pctx.Err() // abandoned: what SQS hands it is stranded
			}
			// ...and SQS hands it a message just after.
			return []types.Message{{MessageId: aws.String("late"), ReceiptHandle: aws.String("rh-late"), Body: aws.String("{}")}}, nil
		}
		return nil, nil
	}
	handled := false
	c := testConsumer(f, func(context.Context, []Message) []Disposition {
		handled = true
		return []Disposition{{Action: Ack}, {Action: Ack}}
	}, Options{ShutdownGrace: 5 * time.Second, WaitTime: time.Second, MaxMessages: 1, MaxBatch: 10})
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	<-following
	cancel()
	<-done
	_, vis, _ := f.snapshot()
	if calls < 2 {
		t.Fatal("the planned follow-up receive did not happen")
	}
	if handled || vis["rh-late"] != 0 || vis["rh-first"] != 0 || len(vis) != 2 {
		t.Errorf("handled %v, visibility %v: both messages must be made visible at once", handled, vis)
	}
}

// TestBatchStopsGrowingAtItsBytes: follow-up receives gather a backlog up to
// MaxBatch, but stop once the bodies hold batchBytes: 500 bodies of 1 MiB,
// which the handler refuses anyway, must not sit in memory together.
func TestBatchStopsGrowingAtItsBytes(t *testing.T) {
	for _, c := range []struct {
		name string
		body int
		want int
	}{
		{"small bodies fill MaxBatch", 200, 50},
		{"large bodies stop at the bound", 1 << 20, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := firstBatch(strings.Repeat("x", c.body), Options{WaitTime: time.Second, MaxMessages: 10, MaxBatch: 50})
			if n != c.want {
				t.Errorf("the first batch holds %d messages of %d bytes, want %d", n, c.body, c.want)
			}
		})
	}
}

// TestBatchNeverExceedsMaxBatch: RUN_HISTORY=505 set alone makes the
// batch 505 (config.Options.Batch), which the history holds. Follow-up
// receives ask for no more than the batch has room for: with 10 a receive,
// the batch stops at 505, not 510, which would push runs out of the
// history at once (found by review; MAX_BATCH=15 made batches of 20).
func TestBatchNeverExceedsMaxBatch(t *testing.T) {
	o := config.Default()
	o.RunHistory = 505
	batch := o.Batch()
	if batch != 505 {
		t.Fatalf("setup: Batch() = %d", batch)
	}
	n := firstBatch("{}", Options{WaitTime: time.Second, MaxMessages: o.MaxMessages, MaxBatch: batch, VisibilityTimeout: time.Minute})
	if n != batch {
		t.Errorf("a batch of %d messages with MAX_BATCH resolved to %d and RUN_HISTORY %d; want the batch whole", n, batch, o.RunHistory)
	}
}

// firstBatch runs a consumer with o over an endless backlog of messages
// of body, each receive bringing as many as it asks for, up to 10 (as SQS
// does), and returns the size of the first batch it hands on.
func firstBatch(body string, o Options) int {
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := 0
	f.receive = func(_ context.Context, in *sqs.ReceiveMessageInput) ([]types.Message, error) {
		var out []types.Message
		for range min(10, int(in.MaxNumberOfMessages)) {
			k++
			out = append(out, types.Message{MessageId: aws.String(strconv.Itoa(k)), ReceiptHandle: aws.String("rh-" + strconv.Itoa(k)), Body: aws.String(body)})
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
	}, o)
	con.Run(ctx)
	return <-got
}

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

// TestBatchStaysInvisibleWhileInHand: with 40 ms per SQS call, a
// visibility timeout of 3 s and a batch that takes 3 s to apply, no message
// of a batch of 200 or 500 may become visible again before it is deleted
// ("a slow push never lets a second copy start"). Before the gathering was
// bounded by the heartbeat's interval and the renewals ran in parallel, 500
// failed: 49 follow-up receives took 2 s before the heartbeat started, and
// a renewal was 50 calls one after the other. The margin with the fix is
// about 1.8 s of the 3 s.
func TestBatchStaysInvisibleWhileInHand(t *testing.T) {
	for _, maxBatch := range []int{200, 500} {
		t.Run(fmt.Sprintf("MAX_BATCH=%d", maxBatch), func(t *testing.T) {
			f := &timedSQS{fakeSQS: newFake(), latency: 40 * time.Millisecond,
				deadline: map[string]time.Time{}, expired: map[string]time.Duration{}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var size int
			con := testConsumer(f, func(_ context.Context, ms []Message) []Disposition {
				size = len(ms)
				time.Sleep(3 * time.Second) // a batch of 500 on Gitea takes 4-5 s
				cancel()
				return uniform(len(ms), Disposition{Action: Ack})
			}, Options{WaitTime: time.Second, MaxMessages: 10, MaxBatch: maxBatch,
				VisibilityTimeout: 3 * time.Second, ShutdownGrace: 30 * time.Second})
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
