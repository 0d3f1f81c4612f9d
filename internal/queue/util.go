package queue

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func stringAttr(s string) types.MessageAttributeValue {
	if s == "" {
		s = "-" // SQS refuses empty attribute values
	}
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
}

func isFIFOURL(u string) bool { return strings.HasSuffix(u, ".fifo") }

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
