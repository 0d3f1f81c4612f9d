package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/rs/zerolog"
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

// The three ways a message is settled.
const (
	// Ack deletes the message: its work is done (or was already done).
	Ack Action = iota
	// Reject dead-letters the message with a reason, then deletes it.
	Reject
	// Retry leaves the message in the queue and delays its redelivery.
	Retry
)

// Disposition is a handler's verdict on a message.
type Disposition struct {
	Action Action
	// Reason and Detail go with a rejected message to the dead-letter queue.
	Reason string
	Detail string
}

// Handler works on one message. The context it gets outlives the consumer's
// own by the shutdown grace period, so a message in hand can be finished.
type Handler func(ctx context.Context, m Message) Disposition

// Options tune a Consumer.
type Options struct {
	// WaitTime is the long-poll wait (at most 20 s).
	WaitTime time.Duration
	// MaxMessages per receive (1 to 10).
	MaxMessages int
	// VisibilityTimeout set on received messages; zero keeps the queue's.
	VisibilityTimeout time.Duration
	// RetryDelay is the first redelivery delay after a transient failure;
	// it doubles with each receive up to MaxRetryDelay.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// ShutdownGrace is how long a message in hand may take after shutdown
	// begins.
	ShutdownGrace time.Duration
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
	if opts.WaitTime <= 0 || opts.WaitTime > 20*time.Second {
		opts.WaitTime = 20 * time.Second
	}
	if opts.MaxMessages <= 0 || opts.MaxMessages > 10 {
		opts.MaxMessages = 10
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = 10 * time.Second
	}
	if opts.MaxRetryDelay < opts.RetryDelay {
		opts.MaxRetryDelay = max(opts.RetryDelay, 15*time.Minute)
	}
	if observe == nil {
		observe = func(string, error) {}
	}
	return &Consumer{api: api, queue: q, handle: h, opts: opts, observe: observe}
}

// Run receives and handles messages until ctx is done. Messages of one
// receive are handled in order, one at a time.
func (c *Consumer) Run(ctx context.Context) {
	log := zerolog.Ctx(ctx).With().Str("queue", c.queue.Name).Logger()
	backoff := time.Second
	for ctx.Err() == nil {
		in := &sqs.ReceiveMessageInput{
			QueueUrl:            aws.String(c.queue.URL),
			MaxNumberOfMessages: int32(c.opts.MaxMessages),
			WaitTimeSeconds:     int32(c.opts.WaitTime / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{
				types.MessageSystemAttributeNameApproximateReceiveCount,
				types.MessageSystemAttributeNameSentTimestamp,
				types.MessageSystemAttributeNameMessageGroupId,
			},
		}
		if c.opts.VisibilityTimeout > 0 {
			in.VisibilityTimeout = int32(c.opts.VisibilityTimeout / time.Second)
		}
		out, err := c.api.ReceiveMessage(ctx, in)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.observe("receive", err)
			log.Error().Err(err).Dur("retry_in", backoff).Msg("receive failed")
			if sleep(ctx, backoff) != nil {
				return
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = time.Second
		for _, m := range out.Messages {
			// Once shutdown begins, messages not yet started go back at once;
			// redelivery to another replica beats waiting out the timeout.
			if ctx.Err() != nil {
				c.release(m)
				continue
			}
			c.process(ctx, log, convert(m))
		}
	}
}

// process handles one message and settles it. The message is deleted only
// after its handler says the work is done: if anything fails in between,
// SQS redelivers it, and the handler's work is idempotent, so redelivery
// beats loss.
func (c *Consumer) process(ctx context.Context, log zerolog.Logger, m Message) {
	work, cancel := graceContext(ctx, c.opts.ShutdownGrace)
	defer cancel()
	work = log.With().Str("message_id", m.ID).Logger().WithContext(work)

	d := c.handle(work, m)
	// Settling uses its own short deadline: it must still run when the
	// worker is shutting down, or the finished work would be redone.
	settle, cancelSettle := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelSettle()
	var err error
	switch d.Action {
	case Ack:
		err = c.delete(settle, m)
	case Reject:
		if err = c.deadLetter(settle, m, d); err == nil {
			err = c.delete(settle, m)
		}
	case Retry:
		err = c.delay(settle, m, c.retryDelay(m.ReceiveCount))
	}
	if err != nil {
		log.Error().Err(err).Str("message_id", m.ID).Msg("could not settle message; SQS will redeliver it")
	}
}

func (c *Consumer) retryDelay(receiveCount int) time.Duration {
	n := max(receiveCount, 1) - 1
	d := time.Duration(float64(c.opts.RetryDelay) * math.Pow(2, float64(min(n, 20))))
	return min(d, c.opts.MaxRetryDelay, 12*time.Hour)
}

func (c *Consumer) delete(ctx context.Context, m Message) error {
	_, err := c.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{
		QueueUrl: aws.String(c.queue.URL), ReceiptHandle: aws.String(m.ReceiptHandle),
	})
	if err != nil && !isGone(err) {
		c.observe("delete", err)
		return fmt.Errorf("delete message %s: %w", m.ID, err)
	}
	return nil
}

func (c *Consumer) delay(ctx context.Context, m Message, d time.Duration) error {
	_, err := c.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(c.queue.URL), ReceiptHandle: aws.String(m.ReceiptHandle),
		VisibilityTimeout: int32(d / time.Second),
	})
	if err != nil && !isGone(err) {
		c.observe("change_visibility", err)
		return fmt.Errorf("delay message %s: %w", m.ID, err)
	}
	return nil
}

// release makes a message visible again at once.
func (c *Consumer) release(m types.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.delay(ctx, convert(m), 0)
}

// deadLetter copies a rejected message, with the reason as message
// attributes, to the queue's dead-letter queue. Without one it does nothing:
// the rejection is in the log and the metrics, and the message is deleted.
func (c *Consumer) deadLetter(ctx context.Context, m Message, d Disposition) error {
	if c.queue.DeadLetterURL == "" {
		return nil
	}
	in := &sqs.SendMessageInput{
		QueueUrl:    aws.String(c.queue.DeadLetterURL),
		MessageBody: aws.String(m.Body),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"reason":            stringAttr(d.Reason),
			"error":             stringAttr(truncate(d.Detail, 1024)),
			"source_queue":      stringAttr(c.queue.Name),
			"source_message_id": stringAttr(m.ID),
		},
	}
	if isFIFOURL(c.queue.DeadLetterURL) {
		group := m.GroupID
		if group == "" {
			group = "rejected"
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(m.ID)
	}
	if _, err := c.api.SendMessage(ctx, in); err != nil {
		c.observe("send_dead_letter", err)
		return fmt.Errorf("dead-letter message %s: %w", m.ID, err)
	}
	return nil
}

func stringAttr(s string) types.MessageAttributeValue {
	if s == "" {
		s = "-" // SQS refuses empty attribute values
	}
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func isFIFOURL(u string) bool { return len(u) > 5 && u[len(u)-5:] == ".fifo" }

func convert(m types.Message) Message {
	out := Message{ID: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body)}
	attrs := m.Attributes
	if n, err := strconv.Atoi(attrs[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil {
		out.ReceiveCount = n
	}
	if ms, err := strconv.ParseInt(attrs[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		out.SentAt = time.UnixMilli(ms)
	}
	out.GroupID = attrs[string(types.MessageSystemAttributeNameMessageGroupId)]
	return out
}

// graceContext returns a context that ends grace after parent does.
func graceContext(parent context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	stop := context.AfterFunc(parent, func() {
		t := time.AfterFunc(grace, func() { cancel(errors.New("shutdown grace period over")) })
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	return ctx, func() { stop(); cancel(context.Canceled) }
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
