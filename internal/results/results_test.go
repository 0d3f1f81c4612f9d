package results

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// sender is a fake of the one SQS call a Publisher makes.
type sender struct {
	calls   [][]types.SendMessageBatchRequestEntry
	failID  string // entry Id to fail in every call
	callErr error  // error of the second call
}

func (s *sender) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	s.calls = append(s.calls, in.Entries)
	if len(s.calls) == 2 && s.callErr != nil {
		return nil, s.callErr
	}
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		if aws.ToString(e.Id) == s.failID {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError")})
			continue
		}
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func events(n int) []Event {
	out := make([]Event, n)
	for i := range out {
		out[i] = Event{MessageID: fmt.Sprintf("m%d", i), Queue: "q", Outcome: "applied"}
	}
	return out
}

func TestPublishInTensWithAttributes(t *testing.T) {
	s := &sender{}
	sent, err := NewPublisher(s, "http://sqs/results.fifo", true).Publish(context.Background(), events(23))
	if err != nil || sent != 23 || len(s.calls) != 3 || len(s.calls[2]) != 3 {
		t.Fatalf("sent %d in %d calls: %v", sent, len(s.calls), err)
	}
	e := s.calls[1][4]
	var ev Event
	if json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &ev) != nil || ev.MessageID != "m14" ||
		aws.ToString(e.MessageAttributes["message_id"].StringValue) != "m14" ||
		aws.ToString(e.MessageGroupId) != "q" || aws.ToString(e.MessageDeduplicationId) != "m14-applied" {
		t.Fatalf("entry: %+v", e)
	}
}

func TestPublishSaysWhatWasNotSent(t *testing.T) {
	s := &sender{failID: "1", callErr: errors.New("throttled")}
	sent, err := NewPublisher(s, "http://sqs/results", false).Publish(context.Background(), events(25))
	// Call 1: 9 of 10; call 2 fails whole; call 3: 4 of 5.
	if sent != 13 || err == nil {
		t.Fatalf("sent %d, err %v", sent, err)
	}
	for _, want := range []string{"m1 (InternalError)", "m10", "m19", "m21 (InternalError)", "throttled"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// receiver is a fake results queue that hands out foreign events once and
// cancels the waiter's context as it does (Ctrl-C as they arrive).
type receiver struct {
	cancel   context.CancelFunc
	events   []Event
	released []string // receipt handles made visible again
	ctxErr   error    // the context the release was asked with
}

func (r *receiver) ReceiveMessage(ctx context.Context, _ *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if r.events == nil {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	out := &sqs.ReceiveMessageOutput{}
	for i, e := range r.events {
		b, _ := json.Marshal(e)
		out.Messages = append(out.Messages, types.Message{Body: aws.String(string(b)), ReceiptHandle: aws.String(fmt.Sprint("rh", i))})
	}
	r.events = nil
	r.cancel()
	return out, nil
}

func (r *receiver) DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return &sqs.DeleteMessageOutput{}, nil
}

func (r *receiver) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	r.ctxErr = ctx.Err()
	for _, e := range in.Entries {
		r.released = append(r.released, aws.ToString(e.ReceiptHandle))
	}
	return &sqs.ChangeMessageVisibilityBatchOutput{}, nil
}

// TestCancelledWaitGivesOthersEventsBack: a wait cancelled as it receives
// other clients' events still makes them visible again at once, with a
// context that is not cancelled (else SQS would hide them for 30 s).
func TestCancelledWaitGivesOthersEventsBack(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &receiver{cancel: cancel, events: events(3)}
	_, err := Wait(ctx, r, "url", "mine", nil, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want cancelled", err)
	}
	if len(r.released) != 3 || r.ctxErr != nil {
		t.Errorf("released %v with a context whose error is %v; want all 3, not cancelled", r.released, r.ctxErr)
	}
}
