package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
)

func TestFIFOKeepsGroupOrder(t *testing.T) {
	h := newHarness(t, true)
	h.q = createQueuesOpts(t, h.api, fauxqs.QueueOptions{MaxReceiveCount: 5, FIFO: true})
	h.start()
	var ids []string
	for i := 1; i <= 4; i++ {
		for _, g := range []string{"g", "h"} {
			body := fmt.Sprintf(`{"tenant_id":"%s%d","tenant_tier":"basic","release_version":"0.0"}`, g, i)
			out, err := h.api.SendMessage(context.Background(), &sqs.SendMessageInput{
				QueueUrl: aws.String(h.q.onboarding), MessageBody: aws.String(body),
				MessageGroupId: aws.String(g), MessageDeduplicationId: aws.String(fmt.Sprintf("%s%d", g, i)),
			})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, aws.ToString(out.MessageId))
		}
	}
	// A bad message in group g is dead-lettered without blocking the group.
	bad, err := h.api.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(h.q.onboarding), MessageBody: aws.String(`{"tenant_id":"../x"}`),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("bad"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if line := h.outcome(id); line["message"] != "tenant change pushed" {
			t.Fatalf("%s: %v", id, line)
		}
	}
	if dl := h.deadLetters(h.q.dlq["onboarding"], 1); len(dl) != 1 || aws.ToString(dl[aws.ToString(bad.MessageId)].Body) != `{"tenant_id":"../x"}` {
		t.Fatalf("dead letters: %v", dl)
	}
	log := h.gitOut("log", "--reverse", "--format=%s")
	for _, g := range []string{"g", "h"} {
		var order []string
		for _, l := range strings.Split(log, "\n") {
			if f := strings.Fields(l); len(f) > 3 && strings.HasPrefix(f[3], g) {
				order = append(order, f[3])
			}
		}
		if want := g + "1," + g + "2," + g + "3," + g + "4"; strings.Join(order, ",") != want {
			t.Fatalf("group %s applied as %v", g, order)
		}
	}
}

func TestHeartbeatKeepsASlowMessageInvisible(t *testing.T) {
	h := newHarness(t, true)
	h.tune = func(o *config.Options) { o.VisibilityTimeout = 2 * time.Second; o.GitTimeout = 20 * time.Second }
	h.start()
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") {
			time.Sleep(5 * time.Second) // more than twice the visibility timeout
		}
		return true
	})
	id := h.send(h.q.onboarding, `{"tenant_id":"slow","tenant_tier":"premium","release_version":"0.0"}`)
	// A bystander, like a second replica, polls the queue while the worker
	// holds the message: it must never get a copy.
	stolen := make(chan string, 10)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			out, err := h.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(h.q.onboarding), WaitTimeSeconds: 1, VisibilityTimeout: 1,
			})
			if err == nil {
				for _, m := range out.Messages {
					stolen <- aws.ToString(m.MessageId)
				}
			}
		}
	}()
	line := h.outcome(id)
	close(done)
	if line["message"] != "tenant change pushed" || line["receive_count"] != float64(1) {
		t.Fatalf("outcome: %v", line)
	}
	select {
	case got := <-stolen:
		t.Fatalf("message %s was delivered to another consumer while in hand", got)
	default:
	}
	h.waitFor("queue empty", 10*time.Second, func() bool { return h.queueCount(h.q.onboarding) == 0 })
}
