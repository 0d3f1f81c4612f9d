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
