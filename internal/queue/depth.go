package queue

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Depth is how many messages a queue and its dead-letter queue hold, as
// SQS approximates them.
type Depth struct {
	Visible  int64 `json:"visible"`
	InFlight int64 `json:"in_flight"`
	Delayed  int64 `json:"delayed"`
	// DeadLetter is -1 when the queue has no dead-letter queue.
	DeadLetter int64 `json:"dead_letter"`
}

// Depth reads the queue's approximate message counts and those of its
// dead-letter queue.
func (q *Queue) Depth(ctx context.Context, api API) (Depth, error) {
	d := Depth{DeadLetter: -1}
	attrs, err := counts(ctx, api, q.URL,
		types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed)
	if err != nil {
		return d, fmt.Errorf("read depth of queue %s: %w", q.Name, err)
	}
	d.Visible, d.InFlight, d.Delayed = attrs[0], attrs[1], attrs[2]
	if q.DeadLetterURL != "" {
		dl, err := counts(ctx, api, q.DeadLetterURL, types.QueueAttributeNameApproximateNumberOfMessages)
		if err != nil {
			return d, fmt.Errorf("read depth of the dead-letter queue of %s: %w", q.Name, err)
		}
		d.DeadLetter = dl[0]
	}
	return d, nil
}

// counts reads integer attributes of the queue at url, in the order asked.
func counts(ctx context.Context, api API, url string, names ...types.QueueAttributeName) ([]int64, error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		return nil, err
	}
	n := make([]int64, len(names))
	for i, name := range names {
		v, ok := out.Attributes[string(name)]
		if !ok {
			continue // an SQS that does not report it counts as zero
		}
		if n[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, fmt.Errorf("attribute %s is %q, not a number", name, v)
		}
	}
	return n, nil
}
