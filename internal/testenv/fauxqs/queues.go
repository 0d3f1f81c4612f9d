package fauxqs

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Client returns an SQS client for a local endpoint (fauxqs or LocalStack),
// which accept any credentials.
func Client(endpoint string) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

// QueueOptions shape a queue made by CreateQueue.
type QueueOptions struct {
	// MaxReceiveCount > 0 adds a dead-letter queue "<name>-dlq" and a
	// redrive policy moving messages there after that many receives.
	MaxReceiveCount int
	// FIFO makes both queues FIFO queues (".fifo" is appended to the names).
	FIFO bool
}

// CreateQueue makes a queue the way deploy/ and the platform do, and returns
// its URL and its dead-letter queue's URL ("" without one).
func CreateQueue(ctx context.Context, api *sqs.Client, name string, o QueueOptions) (string, string, error) {
	suffix := ""
	attrs := map[string]string{}
	if o.FIFO {
		suffix = ".fifo"
		attrs["FifoQueue"] = "true"
	}
	var dlqURL string
	if o.MaxReceiveCount > 0 {
		dlqAttrs := map[string]string{}
		if o.FIFO {
			dlqAttrs["FifoQueue"] = "true"
		}
		dlq, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq" + suffix), Attributes: dlqAttrs})
		if err != nil {
			return "", "", fmt.Errorf("create queue %s-dlq: %w", name, err)
		}
		a, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			return "", "", fmt.Errorf("read queue %s-dlq: %w", name, err)
		}
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`,
			a.Attributes["QueueArn"], o.MaxReceiveCount)
		dlqURL = aws.ToString(dlq.QueueUrl)
	}
	out, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + suffix), Attributes: attrs})
	if err != nil {
		return "", "", fmt.Errorf("create queue %s: %w", name, err)
	}
	return aws.ToString(out.QueueUrl), dlqURL, nil
}
