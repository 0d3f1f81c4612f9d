package redact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/httpserver"
	"github.com/tenant-worker/tenant-worker/internal/logging"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/redact"
	"github.com/tenant-worker/tenant-worker/internal/redact/redacttest"
	"github.com/tenant-worker/tenant-worker/internal/results"
	"github.com/tenant-worker/tenant-worker/internal/runs"
	"github.com/tenant-worker/tenant-worker/internal/status"
)

// surfaces are the worker's outputs, each built as the worker builds it.
// emit makes one show an error text and an undecodable message body, and
// returns all it wrote.
var surfaces = []struct {
	name string
	emit func(t *testing.T, text, body string) string
}{
	{"status page", func(t *testing.T, text, body string) string { return get(t, text, body, "/") }},
	{"status page, one run", func(t *testing.T, text, body string) string {
		return get(t, text, body, "/?id="+url.QueryEscape(messageID(text)))
	}},
	{"/api/runs", func(t *testing.T, text, body string) string { return get(t, text, body, "/api/runs") }},
	{"/readyz", func(t *testing.T, text, body string) string { return get(t, text, body, "/readyz") }},
	{"log, json", func(t *testing.T, text, body string) string { return logged(t, "json", text, body) }},
	{"log, console", func(t *testing.T, text, body string) string { return logged(t, "console", text, body) }},
	{"result events", func(t *testing.T, text, body string) string {
		api := &resultsSQS{}
		if _, err := results.NewPublisher(api, "http://sqs/results", false).Publish(context.Background(), []results.Event{
			{MessageID: messageID(text), Queue: "q", Kind: "onboarding", TenantID: text, Outcome: "rejected", Reason: "invalid_json", Error: text},
		}); err != nil {
			t.Fatal(err)
		}
		return api.sent.String()
	}},
	{"dead-letter attributes", func(t *testing.T, text, body string) string {
		return deadLettered(t, text, body)
	}},
}

// TestNoSurfaceShowsTheSecret: each surface is shown texts that carry a
// secret holding + / = & < > ' " \ as is, in a URL's query and quoted with
// %q, and a message body (JSON) that carries it escaped and not. No
// surface may show the secret in any form a reader can decode (package
// redacttest decodes HTML, JSON, JavaScript, CSS and URL escapes, up to
// three layers); each must show the secret's twin, never added to redact,
// or the surface did not write what it was given.
func TestNoSurfaceShowsTheSecret(t *testing.T) {
	for _, secret := range redacttest.Secrets {
		redact.Add(secret)
		twin := redacttest.Twin(secret)
		text := hostileText(secret) + " | " + hostileText(twin)
		body := hostileBody(secret) + hostileBody(twin)
		for _, s := range surfaces {
			out := s.emit(t, text, body)
			d := redacttest.Decodings(out)
			if shown, ok := redacttest.Find(d, secret); ok {
				t.Errorf("%s shows the secret %q:\n%s", s.name, secret, shown)
			}
			if _, ok := redacttest.Find(d, twin); !ok {
				t.Errorf("%s does not show the twin %q of %q: it did not write the text given:\n%s", s.name, twin, secret, out)
			}
		}
	}
}

// hostileText is an error text quoting s as a git server or a validation
// error would.
func hostileText(s string) string {
	return "push https://git.example.com/gitops.git?access_token=" + url.QueryEscape(s) + " refused: token " + s + ", value " + strconv.Quote(s)
}

// hostileBody is a message body that does not decode, carrying s escaped
// as JSON and as is.
func hostileBody(s string) string {
	b, _ := json.Marshal(s)
	return `{"tenant_id":` + string(b) + `,"note":"` + s + `"}`
}

// messageID puts text in a message id, which the status page writes in
// links and attributes.
func messageID(text string) string { return "m-" + text }

// get serves path from the worker's HTTP handler over a history that holds
// text and body wherever the page writes text.
func get(t *testing.T, text, body, path string) string {
	t.Helper()
	rec := runs.New(10)
	rec.AddQueue("q")
	rec.SetDepth("q", 0, 0, 0, 0, errors.New(text))
	rec.SetPause(&runs.Pause{Cause: "git_credentials", Error: text})
	rec.SetWarning(text)
	rec.Start(runs.Run{MessageID: "in-flight-" + text, Queue: "q", Tenant: text})
	rec.Finish(runs.Run{MessageID: messageID(text), Queue: "q", Kind: "onboarding", Tenant: text, Outcome: "rejected",
		Reason: "invalid_json", Error: text, Body: body})
	rec.Finish(runs.Run{MessageID: "applied-" + text, Queue: "q", Kind: "onboarding", Tenant: text, Outcome: "applied",
		Commit: "0123456789abcdef", CommitMessage: text, Live: "failed", LiveError: text})
	h := httpserver.Handler(prometheus.NewRegistry(), func() error { return errors.New(text) },
		status.Handler(rec, status.Info{Repository: text, Outcomes: []string{"applied", "rejected"}}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	if w.Code != http.StatusOK && w.Code != http.StatusServiceUnavailable {
		t.Fatalf("GET %s: %d\n%s", path, w.Code, w.Body)
	}
	return w.Body.String()
}

// logged is what the worker's logger writes for a rejected message.
func logged(t *testing.T, format, text, body string) string {
	t.Helper()
	var b bytes.Buffer
	log, err := logging.New(&b, "info", format)
	if err != nil {
		t.Fatal(err)
	}
	log.Error().Err(errors.New(text)).Str("tenant", text).Str("body", body).Msg("message rejected")
	log.Info().Msg(text)
	return b.String()
}

// resultsSQS records the result events sent.
type resultsSQS struct{ sent strings.Builder }

func (f *resultsSQS) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		f.sent.WriteString(aws.ToString(e.MessageBody) + "\n")
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// deadLettered runs a consumer on one message that its handler rejects
// with text, and returns the attributes of the dead-letter copy. The body
// is the sender's own, kept whole for a redrive: it is not a surface.
func deadLettered(t *testing.T, text, body string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(zerolog.Nop().WithContext(context.Background()))
	defer cancel()
	api := &consumerSQS{cancel: cancel, body: body}
	q := &queue.Queue{Name: "q", URL: "http://sqs/q", DeadLetterURL: "http://sqs/q-dlq"}
	reject := func(_ context.Context, msgs []queue.Message) []queue.Disposition {
		ds := make([]queue.Disposition, len(msgs))
		for i := range ds {
			ds[i] = queue.Disposition{Action: queue.Reject, Reason: "invalid_json", Detail: text}
		}
		return ds
	}
	queue.NewConsumer(api, q, reject, queue.Options{}, nil).Run(ctx)
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.attrs.Len() == 0 {
		t.Fatal("planned fault did not occur: nothing was dead-lettered")
	}
	return api.attrs.String()
}

// consumerSQS hands out one message, records its dead-letter copy's
// attributes, and ends the run when asked for more.
type consumerSQS struct {
	queue.API // the calls not made here are not implemented
	cancel    context.CancelFunc
	body      string
	mu        sync.Mutex
	received  bool
	attrs     strings.Builder
}

func (f *consumerSQS) ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.received {
		f.cancel() // the message was settled: the run is over
		return &sqs.ReceiveMessageOutput{}, nil
	}
	f.received = true
	return &sqs.ReceiveMessageOutput{Messages: []types.Message{{MessageId: aws.String("m-1"), ReceiptHandle: aws.String("rh-1"), Body: aws.String(f.body)}}}, nil
}

func (f *consumerSQS) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		for k, v := range e.MessageAttributes {
			f.attrs.WriteString(k + "=" + aws.ToString(v.StringValue) + "\n")
		}
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func (f *consumerSQS) DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return &sqs.DeleteMessageBatchOutput{}, nil
}

func (f *consumerSQS) ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return &sqs.ChangeMessageVisibilityBatchOutput{}, nil
}
