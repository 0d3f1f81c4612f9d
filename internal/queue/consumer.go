package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/clip"
	"github.com/tenant-worker/tenant-worker/internal/redact"
	"github.com/tenant-worker/tenant-worker/internal/wait"
)

// Message is one received SQS message.
type Message struct {
	ID            string
	ReceiptHandle string
	Body          string
	// ReceiveCount is SQS's ApproximateReceiveCount (1 on first delivery).
	ReceiveCount int
	SentAt       time.Time
	GroupID      string // FIFO queues only
}

// Action is what to do with a message once handled.
type Action int

// The ways a message is settled.
const (
	// Ack deletes the message: its work is done (or was already done).
	Ack Action = iota
	// Reject dead-letters the message with a reason, then deletes it.
	Reject
	// Retry leaves the message in the queue and delays its redelivery,
	// longer with each receive.
	Retry
	// Release makes the message visible again at once (on shutdown).
	Release
)

// Disposition is a handler's verdict on a message.
type Disposition struct {
	Action Action
	// Reason and Detail go with a rejected message to the dead-letter queue;
	// Detail also says why a retried message failed.
	Reason string
	Detail string
}

// Handler works on the messages of one receive, in order, and returns one
// disposition per message. The context it gets outlives the consumer's own
// by the shutdown grace period, so messages in hand can be finished.
type Handler func(ctx context.Context, msgs []Message) []Disposition

// Options tune a Consumer.
type Options struct {
	// WaitTime is the long-poll wait (at most 20 s).
	WaitTime time.Duration
	// MaxMessages per receive (1 to 10).
	MaxMessages int
	// MaxBatch bounds the messages handled together when a backlog lets
	// several receives fill a batch (default 50).
	MaxBatch int
	// VisibilityTimeout set on received messages and renewed while they are
	// in hand; zero keeps the queue's.
	VisibilityTimeout time.Duration
	// RetryDelay is the first redelivery delay after a transient failure;
	// it doubles with each receive up to MaxRetryDelay.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// ShutdownGrace is how long messages in hand may take after shutdown
	// begins.
	ShutdownGrace time.Duration
	// Hold, if set, is waited on before every receive: it returns once
	// receiving makes sense (git and the repository are well) or with the
	// context's error.
	Hold func(ctx context.Context) error
}

// Observer receives the consumer's SQS call failures, for metrics.
type Observer func(op string, err error)

// Consumer long-polls one queue.
type Consumer struct {
	api     API
	queue   *Queue
	handle  Handler
	opts    Options
	observe Observer
}

// NewConsumer builds a consumer of q.
func NewConsumer(api API, q *Queue, h Handler, opts Options, observe Observer) *Consumer {
	if observe == nil {
		observe = func(string, error) {}
	}
	return &Consumer{api: api, queue: q, handle: h, opts: opts.withDefaults(q), observe: observe}
}

// withDefaults fills in what o leaves unset (or sets out of range), in one
// place: SQS's limits, the queue's own visibility timeout, the retry
// delays. The worker's settings are checked, with clear errors, in
// config.Options.Validate; these defaults serve other callers.
func (o Options) withDefaults(q *Queue) Options {
	if o.WaitTime < 0 || o.WaitTime > 20*time.Second {
		o.WaitTime = 20 * time.Second
	}
	if o.MaxMessages <= 0 || o.MaxMessages > 10 {
		o.MaxMessages = 10
	}
	if o.MaxBatch < o.MaxMessages {
		o.MaxBatch = max(o.MaxMessages, 50)
	}
	if o.VisibilityTimeout <= 0 {
		o.VisibilityTimeout = q.VisibilityTimeout
	}
	if o.VisibilityTimeout <= 0 {
		o.VisibilityTimeout = 30 * time.Second // SQS's own default
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = 10 * time.Second
	}
	if o.MaxRetryDelay < o.RetryDelay {
		o.MaxRetryDelay = max(o.RetryDelay, 15*time.Minute)
	}
	return o
}

// Run receives and handles messages until ctx is done, then returns once
// the messages in hand are settled.
func (c *Consumer) Run(ctx context.Context) {
	log := zerolog.Ctx(ctx).With().Str("queue", c.queue.Name).Logger()
	backoff := time.Second
	for ctx.Err() == nil {
		if c.opts.Hold != nil && c.opts.Hold(ctx) != nil {
			return
		}
		out, err := c.poll(ctx)
		received := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.observe("receive", err)
			log.Error().Err(err).Dur("retry_in", backoff).Msg("receive failed")
			if wait.Sleep(ctx, backoff) != nil {
				return
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = time.Second
		if len(out) == 0 {
			continue
		}
		// A full receive means more may be waiting: take them too (without
		// waiting), so that a backlog is applied in fewer, larger pushes.
		// Like the poll, a follow-up receive in flight at shutdown runs out
		// within the grace: what SQS hands it is made visible again below.
		// The batch also stops growing once its bodies hold batchBytes, so
		// that large bodies (refused anyway) cannot fill memory, and once a
		// heartbeat's interval has passed since the first receive, whose
		// messages' visibility is renewed from then on.
		held := bodyBytes(out)
		// A follow-up asks for no more than the batch has room for, so
		// that a batch never exceeds MaxBatch.
		for full := len(out) >= c.opts.MaxMessages; full && len(out) < c.opts.MaxBatch && held < batchBytes &&
			time.Since(received) < c.renewEvery() && ctx.Err() == nil; {
			asked := min(c.opts.MaxMessages, c.opts.MaxBatch-len(out))
			more, err := c.followUp(ctx, asked)
			if err != nil || len(more) == 0 {
				break
			}
			out = append(out, more...)
			held += bodyBytes(more)
			full = len(more) >= asked
		}
		msgs := make([]Message, len(out))
		for i, m := range out {
			msgs[i] = convert(m)
		}
		// Once shutdown begins, messages not yet started go back at once:
		// redelivery to another replica beats waiting out their timeout.
		if ctx.Err() != nil {
			c.settle(log, msgs, uniform(len(msgs), Disposition{Action: Release}))
			return
		}
		c.process(ctx, log, msgs, received)
	}
}

// batchBytes bounds the bodies a batch gathers by follow-up receives. A
// valid body is at most message.MaxBodyBytes (4 KB), so a batch of 500
// valid messages holds 2 MB; SQS takes bodies of up to 1 MiB, and 500 of
// those, which the handler refuses, would hold 500 MiB in each consumer.
// One receive may still bring more (10 bodies).
const batchBytes = 4 << 20

// bodyBytes is the size of the messages' bodies.
func bodyBytes(ms []types.Message) int {
	n := 0
	for _, m := range ms {
		n += len(aws.ToString(m.Body))
	}
	return n
}

// poll is one long poll. It is not abandoned when shutdown begins: SQS may
// still hand a message to a poll whose client went away, and that message
// would then stay invisible for its whole visibility timeout. The poll is
// allowed to return within the shutdown grace, and Run makes what it
// brings visible again at once.
func (c *Consumer) poll(ctx context.Context) ([]types.Message, error) {
	pctx, cancel := graceContext(ctx, c.opts.ShutdownGrace)
	defer cancel()
	return c.receive(pctx, c.opts.WaitTime, c.opts.MaxMessages)
}

// followUp is a receive of up to n messages that does not wait, bounded by
// the shutdown grace rather than abandoned when shutdown begins.
func (c *Consumer) followUp(ctx context.Context, n int) ([]types.Message, error) {
	fctx, cancel := graceContext(ctx, c.opts.ShutdownGrace)
	defer cancel()
	return c.receive(fctx, 0, n)
}

// receive is one ReceiveMessage call for up to n messages.
func (c *Consumer) receive(ctx context.Context, wait time.Duration, n int) ([]types.Message, error) {
	out, err := c.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:            aws.String(c.queue.URL),
		MaxNumberOfMessages: int32(n),
		WaitTimeSeconds:     int32(wait / time.Second),
		VisibilityTimeout:   int32(c.opts.VisibilityTimeout / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameSentTimestamp,
			types.MessageSystemAttributeNameMessageGroupId,
		},
	})
	if err != nil {
		return nil, err
	}
	return out.Messages, nil
}

// process handles one receive and settles its messages. A message is
// deleted only after its handler says the work is done: if anything fails in
// between, SQS redelivers it, and the handler's work is idempotent, so
// redelivery beats loss.
func (c *Consumer) process(ctx context.Context, log zerolog.Logger, msgs []Message, received time.Time) {
	work, cancel := graceContext(ctx, c.opts.ShutdownGrace)
	defer cancel()
	stop := c.heartbeat(log, msgs, received)
	ds := c.handleSafely(work, log, msgs)
	stop()
	if len(ds) != len(msgs) {
		log.Error().Int("messages", len(msgs)).Int("dispositions", len(ds)).Msg("handler answered for the wrong number of messages; releasing them")
		ds = uniform(len(msgs), Disposition{Action: Release})
	}
	if work.Err() != nil {
		// The grace period ran out: whatever did not finish goes back now.
		for i := range ds {
			if ds[i].Action == Retry {
				ds[i].Action = Release
			}
		}
	}
	c.settle(log, msgs, ds)
}

// handleSafely runs the handler, turning a panic into a retry of the
// messages in hand: one bad code path must not take down the process with
// every message of every queue it holds.
func (c *Consumer) handleSafely(ctx context.Context, log zerolog.Logger, msgs []Message) (ds []Disposition) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("handler panicked: %v", p)
			c.observe("handle", err)
			log.Error().Err(err).Bytes("stack", debug.Stack()).Int("messages", len(msgs)).
				Msg("handler panicked; its messages will be retried")
			ds = uniform(len(msgs), Disposition{Action: Retry, Detail: err.Error()})
		}
	}()
	return c.handle(log.WithContext(ctx), msgs)
}

// heartbeat keeps the messages in hand invisible to other consumers,
// renewing their visibility timeout every renewEvery from received (when
// the first of them arrived), until stop is called. A slow push therefore
// never lets a second copy start.
func (c *Consumer) heartbeat(log zerolog.Logger, msgs []Message, received time.Time) (stop func()) {
	interval := c.renewEvery()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTimer(max(0, interval-time.Since(received)))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				delays := make([]time.Duration, len(msgs))
				for i := range delays {
					delays[i] = c.opts.VisibilityTimeout
				}
				if err := c.changeVisibility(msgs, delays); err != nil {
					log.Warn().Err(err).Msg("could not extend visibility of messages in hand")
				}
				t.Reset(interval)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// renewEvery is how often the visibility of messages in hand is renewed: a
// third of the visibility timeout.
func (c *Consumer) renewEvery() time.Duration {
	return max(c.opts.VisibilityTimeout/3, 500*time.Millisecond)
}

// settle applies each message's disposition with batched SQS calls.
func (c *Consumer) settle(log zerolog.Logger, msgs []Message, ds []Disposition) {
	var acks, rejects, later []Message
	var rejectDs []Disposition
	var delays []time.Duration
	for i, m := range msgs {
		switch ds[i].Action {
		case Ack:
			acks = append(acks, m)
		case Reject:
			rejects, rejectDs = append(rejects, m), append(rejectDs, ds[i])
		case Retry:
			later, delays = append(later, m), append(delays, c.retryDelay(m.ReceiveCount))
		case Release:
			later, delays = append(later, m), append(delays, 0)
		}
	}
	if len(rejects) > 0 {
		sent, err := c.deadLetter(rejects, rejectDs)
		if err != nil {
			log.Error().Err(err).Msg("could not dead-letter rejected messages; SQS will redeliver them")
		}
		acks = append(acks, sent...)
	}
	if err := c.delete(acks); err != nil {
		log.Error().Err(err).Msg("could not delete finished messages; SQS will redeliver them and they will be recognised")
	}
	if err := c.changeVisibility(later, delays); err != nil {
		log.Warn().Err(err).Msg("could not set the redelivery delay; the visibility timeout applies")
	}
}

func (c *Consumer) retryDelay(receiveCount int) time.Duration {
	n := max(receiveCount, 1) - 1
	d := time.Duration(float64(c.opts.RetryDelay) * math.Pow(2, float64(min(n, 20))))
	return min(d, c.opts.MaxRetryDelay, 12*time.Hour)
}

// settleContext bounds a settling call. It does not derive from the run
// context: settling must still happen while the worker shuts down, or
// finished work would be redone.
func settleContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// chunks calls fn for each run of at most 10 indexes (the SQS batch limit),
// up to parallelCalls at a time: a batch of 500 is 50 calls, and one after
// the other they would take longer than a short visibility timeout, or
// wait behind one call that hangs.
func chunks(n int, fn func(lo, hi int) error) error {
	errs := make([]error, (n+9)/10)
	sem := make(chan struct{}, parallelCalls)
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += 10 {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[lo/10] = fn(lo, min(lo+10, n))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// parallelCalls bounds the SQS calls of one settling or renewal at a time.
const parallelCalls = 10

func (c *Consumer) delete(msgs []Message) error {
	return chunks(len(msgs), func(lo, hi int) error {
		entries := make([]types.DeleteMessageBatchRequestEntry, 0, hi-lo)
		for i := lo; i < hi; i++ {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(msgs[i].ReceiptHandle),
			})
		}
		ctx, cancel := settleContext()
		defer cancel()
		out, err := c.api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(c.queue.URL), Entries: entries})
		if err != nil {
			c.observe("delete", err)
			return fmt.Errorf("delete %d messages: %w", len(entries), err)
		}
		return c.batchFailures("delete", out.Failed, msgs, true)
	})
}

func (c *Consumer) changeVisibility(msgs []Message, timeouts []time.Duration) error {
	return chunks(len(msgs), func(lo, hi int) error {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, 0, hi-lo)
		for i := lo; i < hi; i++ {
			entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(msgs[i].ReceiptHandle),
				VisibilityTimeout: int32(timeouts[i] / time.Second),
			})
		}
		ctx, cancel := settleContext()
		defer cancel()
		out, err := c.api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
			QueueUrl: aws.String(c.queue.URL), Entries: entries,
		})
		if err != nil {
			c.observe("change_visibility", err)
			return fmt.Errorf("change visibility of %d messages: %w", len(entries), err)
		}
		return c.batchFailures("change_visibility", out.Failed, msgs, true)
	})
}

// batchFailures turns the failed entries of a batch call into an error,
// ignoring messages that are already gone when goneIsDone.
func (c *Consumer) batchFailures(op string, failed []types.BatchResultErrorEntry, msgs []Message, goneIsDone bool) error {
	var errs []error
	for _, f := range failed {
		if goneIsDone && isGoneCode(aws.ToString(f.Code)) {
			continue
		}
		i, _ := strconv.Atoi(aws.ToString(f.Id))
		id := ""
		if i >= 0 && i < len(msgs) {
			id = msgs[i].ID
		}
		err := fmt.Errorf("%s message %s: %s: %s", op, id, aws.ToString(f.Code), aws.ToString(f.Message))
		c.observe(op, err)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// deadLetter copies rejected messages, with the reason as message
// attributes, to the queue's dead-letter queue, and returns those that may
// now be deleted. Without a dead-letter queue that is all of them: the
// rejection is in the log and the metrics.
func (c *Consumer) deadLetter(msgs []Message, ds []Disposition) ([]Message, error) {
	if c.queue.DeadLetterURL == "" {
		return msgs, nil
	}
	entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
	sizes := make([]int, len(msgs))
	for i, m := range msgs {
		entries[i], sizes[i] = c.deadLetterEntry(i, m, ds[i])
	}
	var sent []Message
	var errs []error
	for _, b := range sizedBatches(sizes, c.deadLetterLimit()) {
		ctx, cancel := settleContext()
		out, err := c.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(c.queue.DeadLetterURL), Entries: entries[b.lo:b.hi]})
		cancel()
		if err != nil {
			c.observe("send_dead_letter", err)
			errs = append(errs, fmt.Errorf("dead-letter %d messages: %w", b.hi-b.lo, err))
			continue
		}
		for _, s := range out.Successful {
			if i, err := strconv.Atoi(aws.ToString(s.Id)); err == nil && i >= b.lo && i < b.hi {
				sent = append(sent, msgs[i])
			}
		}
		errs = append(errs, c.batchFailures("send_dead_letter", out.Failed, msgs, false))
	}
	return sent, errors.Join(errs...)
}

// defaultMaxBytes is the size limit of a message, and of a batch, when the
// dead-letter queue does not say (body plus attribute names, types and
// values): 256 KiB, the smallest SQS has had.
const defaultMaxBytes = 256 * 1024

// deadLetterLimit is the most one dead-letter copy, or one batch of them,
// may hold.
func (c *Consumer) deadLetterLimit() int {
	if c.queue.DeadLetterMaxBytes > 0 {
		return c.queue.DeadLetterMaxBytes
	}
	return defaultMaxBytes
}

// deadLetterEntry is the dead-letter copy of m and its size. The body is
// kept whole; when body and attributes would pass the size limit, the
// attributes are cut down (the error text first, then all but the reason,
// then all), so a rejected body near the limit is still dead-lettered.
func (c *Consumer) deadLetterEntry(i int, m Message, d Disposition) (types.SendMessageBatchRequestEntry, int) {
	attrs := []struct{ name, value string }{
		{"reason", d.Reason}, {"source_queue", c.queue.Name}, {"source_message_id", m.ID},
		{"error", clip.String(redact.String(d.Detail), 1024)},
	}
	size := func(n int) int {
		total := len(m.Body)
		for _, a := range attrs[:n] {
			total += len(a.name) + len("String") + max(len(a.value), 1)
		}
		return total
	}
	n := len(attrs)
	for n > 0 && size(n) > c.deadLetterLimit() {
		if n == len(attrs) {
			n-- // the error text goes first
		} else {
			n = min(n-1, 1) // then all but the reason, then all
		}
	}
	e := types.SendMessageBatchRequestEntry{
		Id:                aws.String(strconv.Itoa(i)),
		MessageBody:       aws.String(m.Body),
		MessageAttributes: map[string]types.MessageAttributeValue{},
	}
	for _, a := range attrs[:n] {
		e.MessageAttributes[a.name] = stringAttr(a.value)
	}
	if isFIFOURL(c.queue.DeadLetterURL) {
		group := m.GroupID
		if group == "" {
			group = "rejected"
		}
		e.MessageGroupId = aws.String(group)
		e.MessageDeduplicationId = aws.String(m.ID)
	}
	return e, size(n)
}

// span is a run of indexes [lo, hi).
type span struct{ lo, hi int }

// sizedBatches splits messages of the given sizes into runs that fit one
// SQS batch: at most 10 entries and limit bytes in all.
func sizedBatches(sizes []int, limit int) []span {
	var out []span
	lo, total := 0, 0
	for i, n := range sizes {
		if i > lo && (i-lo == 10 || total+n > limit) {
			out = append(out, span{lo, i})
			lo, total = i, 0
		}
		total += n
	}
	if lo < len(sizes) {
		out = append(out, span{lo, len(sizes)})
	}
	return out
}

func uniform(n int, d Disposition) []Disposition {
	ds := make([]Disposition, n)
	for i := range ds {
		ds[i] = d
	}
	return ds
}
