// Package results publishes one JSON event per finished message to the
// RESULTS_QUEUE, so that an onboarding service (or `tenant-worker send
// --wait`) learns when a tenant change is on the branch, or why it never
// will be.
package results

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/tenant-worker/tenant-worker/internal/redact"
)

// Event is the body of a result message. The schema is documented in the
// README; fields are only ever added.
type Event struct {
	// MessageID is the SQS message id of the tenant message.
	MessageID string `json:"message_id"`
	// Queue is the name of the queue it came from.
	Queue string `json:"queue"`
	// Kind is onboarding, offboarding or deployment.
	Kind     string `json:"kind"`
	TenantID string `json:"tenant_id"`
	Tier     string `json:"tier"`
	// Outcome is applied (a commit was pushed), noop (already done), stale
	// (messages sent after it undo what it asks), held (recorded until a
	// message sent before it arrives: Error says which) or rejected (never
	// will be: see Reason and Error). A held message gets a second event
	// when its outcome changes (applied, or rejected once its hold ends).
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
	Error   string `json:"error"`
	// CommitSHA is the pushed commit, or the branch head for a noop.
	CommitSHA string `json:"commit_sha"`
	// DurationMS is the time from receiving the message to its outcome.
	DurationMS int64 `json:"duration_ms"`
	// Stages is set on the second event of an applied message, its
	// readiness event (outcome ready, failed, superseded or timeout): when
	// the commit was pushed and how long Flux took to reach each stage.
	Stages *Stages `json:"stages,omitempty"`
	// SupersededBy is set on a readiness event with outcome superseded:
	// the message id of the later change that replaced this one (to the
	// same tenant, tier or pooled environment) before it was ready. That
	// message has its own readiness event.
	SupersededBy string `json:"superseded_by,omitempty"`
}

// Stages are the times of a pushed change on its way into the cluster, in
// milliseconds since the push; zero when the stage was not seen.
type Stages struct {
	PushedAt time.Time `json:"pushed_at"`
	// FetchedMS: the GitRepository's artifact holds the commit.
	FetchedMS int64 `json:"fetched_ms,omitempty"`
	// AppliedMS: every Kustomization that reads the changed folders
	// applied it.
	AppliedMS int64 `json:"applied_ms,omitempty"`
	// DoneMS: the outcome (ready, failed, superseded or timeout).
	DoneMS int64 `json:"done_ms"`
}

// Readiness outcomes: the second event of an applied message.
var Readiness = []string{"ready", "failed", "superseded", "timeout"}

// API is the SQS call a Publisher makes.
type API interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Publisher sends events to one queue.
type Publisher struct {
	api  API
	url  string
	fifo bool
}

// NewPublisher publishes to the queue at url.
func NewPublisher(api API, url string, fifo bool) *Publisher {
	return &Publisher{api: api, url: url, fifo: fifo}
}

// Publish sends events, ten per call. It returns how many were sent and an
// error naming the ones that were not.
func (p *Publisher) Publish(ctx context.Context, events []Event) (int, error) {
	sent := 0
	var failed []string
	var callErr error
	for start := 0; start < len(events); start += 10 {
		chunk := events[start:min(start+10, len(events))]
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		for i, e := range chunk {
			body, err := json.Marshal(e)
			if err != nil {
				return sent, fmt.Errorf("encode result event: %w", err)
			}
			entries[i] = types.SendMessageBatchRequestEntry{
				Id:          aws.String(strconv.Itoa(i)),
				MessageBody: aws.String(redact.String(string(body))),
				MessageAttributes: map[string]types.MessageAttributeValue{
					"outcome":    {DataType: aws.String("String"), StringValue: aws.String(e.Outcome)},
					"message_id": {DataType: aws.String("String"), StringValue: aws.String(e.MessageID)},
				},
			}
			if p.fifo {
				entries[i].MessageGroupId = aws.String(e.Queue)
				entries[i].MessageDeduplicationId = aws.String(e.MessageID + "-" + e.Outcome)
			}
		}
		out, err := p.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(p.url), Entries: entries})
		if err != nil {
			for _, e := range chunk {
				failed = append(failed, e.MessageID)
			}
			callErr = err
			continue
		}
		sent += len(out.Successful)
		for _, f := range out.Failed {
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i < len(chunk) {
				failed = append(failed, chunk[i].MessageID+" ("+aws.ToString(f.Code)+")")
			}
		}
	}
	if len(failed) > 0 {
		if callErr != nil {
			return sent, fmt.Errorf("publish result events of %d messages %v: %w", len(failed), failed, callErr)
		}
		return sent, fmt.Errorf("publish result events of %d messages: %v", len(failed), failed)
	}
	return sent, nil
}

// Receiver is what Wait calls on the results queue.
type Receiver interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// Wait long-polls the results queue at url until an event of messageID
// that accept takes (any, when accept is nil) arrives, deletes it and
// returns it. Other events are made visible again at once, for whoever
// waits for them. tick, if not nil, is called after every empty or foreign
// receive.
func Wait(ctx context.Context, api Receiver, url, messageID string, accept func(Event) bool, tick func()) (Event, error) {
	for {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 5, VisibilityTimeout: 30,
		})
		if err != nil {
			if ctx.Err() != nil {
				return Event{}, fmt.Errorf("wait for the result of %s: %w", messageID, context.Cause(ctx))
			}
			return Event{}, fmt.Errorf("receive from the results queue: %w", err)
		}
		var others []types.ChangeMessageVisibilityBatchRequestEntry
		var found *Event
		for i, m := range out.Messages {
			var e Event
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &e); err == nil && e.MessageID == messageID && found == nil && (accept == nil || accept(e)) {
				found = &e
				if _, err := api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
					return e, fmt.Errorf("delete the result event: %w", err)
				}
				continue
			}
			others = append(others, types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
			})
		}
		if len(others) > 0 {
			// Best effort: if this fails they come back after 30 s anyway.
			// Other clients' events are given back even when this wait was
			// just cancelled (Ctrl-C as they arrived): not with ctx, which
			// would fail at once and hide them for 30 s.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = api.ChangeMessageVisibilityBatch(rctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: others})
			cancel()
		}
		if found != nil {
			return *found, nil
		}
		if tick != nil {
			tick()
		}
	}
}
