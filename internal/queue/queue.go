// Package queue consumes an SQS queue with long polling and settles each
// message the way its handler decides: delete it, dead-letter it, or leave it
// for redelivery after a backoff.
package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// API is the part of the SQS client the worker uses. The IAM policy in
// deploy/ grants exactly these calls.
type API interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Queue is a resolved SQS queue.
type Queue struct {
	// Name is the queue's name, used in logs and metric labels.
	Name string
	URL  string
	// DeadLetterURL is the dead-letter queue named by the queue's redrive
	// policy; empty when it has none.
	DeadLetterURL string
	// DeadLetterMaxBytes is the dead-letter queue's MaximumMessageSize, the
	// most a dead-letter copy (body and attributes) may hold.
	DeadLetterMaxBytes int
	// VisibilityTimeout is the queue's default visibility timeout.
	VisibilityTimeout time.Duration
	// Retention is the queue's MessageRetentionPeriod: the longest SQS may
	// still deliver a message after it was sent.
	Retention time.Duration
}

// FIFO reports whether the queue is a FIFO queue.
func (q *Queue) FIFO() bool { return strings.HasSuffix(q.Name, ".fifo") }

// URLFinder is the SQS call Locate makes.
type URLFinder interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

// Locate returns the name and URL of a queue given by name or URL; a name
// is looked up, a URL taken as it is.
func Locate(ctx context.Context, api URLFinder, nameOrURL string) (name, queueURL string, err error) {
	if strings.HasPrefix(nameOrURL, "https://") || strings.HasPrefix(nameOrURL, "http://") {
		u, err := url.Parse(nameOrURL)
		if err != nil {
			return "", "", fmt.Errorf("queue URL %q: %w", nameOrURL, err)
		}
		return u.Path[strings.LastIndex(u.Path, "/")+1:], nameOrURL, nil
	}
	out, err := api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(nameOrURL)})
	if err != nil {
		return "", "", fmt.Errorf("find queue %s: %w", nameOrURL, err)
	}
	return nameOrURL, aws.ToString(out.QueueUrl), nil
}

// Resolve finds a queue by name or URL and its dead-letter queue.
func Resolve(ctx context.Context, api API, nameOrURL string) (*Queue, error) {
	name, queueURL, err := Locate(ctx, api, nameOrURL)
	if err != nil {
		return nil, err
	}
	q := &Queue{Name: name, URL: queueURL}
	attrs, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.URL),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameRedrivePolicy, types.QueueAttributeNameVisibilityTimeout,
			types.QueueAttributeNameMessageRetentionPeriod,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("read attributes of queue %s: %w", q.Name, err)
	}
	if s, err := strconv.Atoi(attrs.Attributes[string(types.QueueAttributeNameVisibilityTimeout)]); err == nil {
		q.VisibilityTimeout = time.Duration(s) * time.Second
	}
	if s, err := strconv.Atoi(attrs.Attributes[string(types.QueueAttributeNameMessageRetentionPeriod)]); err == nil {
		q.Retention = time.Duration(s) * time.Second
	}
	if policy := attrs.Attributes[string(types.QueueAttributeNameRedrivePolicy)]; policy != "" {
		if q.DeadLetterURL, err = deadLetterURL(ctx, api, policy); err != nil {
			return nil, fmt.Errorf("queue %s: %w", q.Name, err)
		}
		dl, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(q.DeadLetterURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMaximumMessageSize},
		})
		if err != nil {
			return nil, fmt.Errorf("read attributes of the dead-letter queue of %s: %w", q.Name, err)
		}
		q.DeadLetterMaxBytes, _ = strconv.Atoi(dl.Attributes[string(types.QueueAttributeNameMaximumMessageSize)])
	}
	return q, nil
}

// deadLetterURL looks up the queue a redrive policy names by ARN
// (arn:aws:sqs:region:account:name).
func deadLetterURL(ctx context.Context, api API, policy string) (string, error) {
	var p struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
	}
	if err := json.Unmarshal([]byte(policy), &p); err != nil {
		return "", fmt.Errorf("parse redrive policy: %w", err)
	}
	parts := strings.Split(p.DeadLetterTargetArn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" {
		return "", fmt.Errorf("redrive policy names %q, not an SQS queue ARN", p.DeadLetterTargetArn)
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])}
	if parts[4] != "" {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	out, err := api.GetQueueUrl(ctx, in)
	if err != nil {
		return "", fmt.Errorf("find dead-letter queue %s: %w", parts[5], err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// isGoneCode reports whether a batch entry's error code means the message is
// already settled: its receipt handle is no longer valid, so there is
// nothing left to do.
func isGoneCode(code string) bool {
	switch code {
	case "ReceiptHandleIsInvalid", "MessageNotInflight":
		return true
	}
	return false
}
