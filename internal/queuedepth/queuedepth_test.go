package queuedepth

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/runs"
)

// fakeSQS answers GetQueueAttributes with its func; nothing else is called.
type fakeSQS struct {
	queue.API
	attributes func(url string) (map[string]string, error)
}

func (f fakeSQS) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	a, err := f.attributes(*in.QueueUrl)
	if err != nil {
		return nil, err
	}
	return &sqs.GetQueueAttributesOutput{Attributes: a}, nil
}

func TestDepthsAreReadUntilTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(zerolog.Nop().WithContext(context.Background()))
	defer cancel()
	reads := 0
	api := fakeSQS{attributes: func(url string) (map[string]string, error) {
		switch {
		case url == "dlq":
			return map[string]string{"ApproximateNumberOfMessages": "2"}, nil
		case url == "broken":
			return nil, errors.New("throttled")
		}
		if reads++; reads == 2 {
			cancel() // the second round is the last
		}
		return map[string]string{"ApproximateNumberOfMessages": "3", "ApproximateNumberOfMessagesNotVisible": "1"}, nil
	}}
	m := metrics.New(prometheus.NewRegistry())
	rec := runs.New(10)
	w := &Watcher{API: api, Metrics: m, Runs: rec, Every: time.Millisecond, Queues: []*queue.Queue{
		{Name: "onboarding", URL: "onboarding", DeadLetterURL: "dlq"},
		{Name: "offboarding", URL: "broken"},
	}}
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
	if v := testutil.ToFloat64(m.QueueMessages.WithLabelValues("onboarding", metrics.StateVisible)); v != 3 {
		t.Errorf("visible = %v, want 3", v)
	}
	if v := testutil.ToFloat64(m.DeadLetterMessages.WithLabelValues("onboarding")); v != 2 {
		t.Errorf("dead-lettered = %v, want 2", v)
	}
	if v := testutil.ToFloat64(m.SQSErrors.WithLabelValues("offboarding", "depth")); v < 1 {
		t.Errorf("depth errors of offboarding = %v, want at least 1", v)
	}
	for _, q := range rec.Status().Queues {
		switch q.Name {
		case "onboarding":
			if q.Visible != 3 || q.InFlight != 1 || q.DeadLetter != 2 || q.Error != "" {
				t.Errorf("status of onboarding = %+v", q)
			}
		case "offboarding":
			if q.Error == "" {
				t.Errorf("status of offboarding shows no error: %+v", q)
			}
		}
	}
}
