package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/testenv/sendorder"
)

// TestDelayedQueuesEndInSendOrder: the four histories of issue 44, each on
// a tenant of its own, and a tier's deployment, sent in this order on the
// three queues, each message with a DelaySeconds that makes it arrive out
// of its send order (across queues and within one). However they arrive,
// the branch ends as the messages in send order leave it, and nothing is
// dead-lettered. The test fails when no message was handled before one
// sent earlier about the same tenant: then it tested nothing.
func TestDelayedQueuesEndInSendOrder(t *testing.T) {
	h := newHarness(t, true)
	h.start()
	on := func(id, tier, v string) sendorder.Msg {
		return sendorder.Msg{Kind: message.Onboarding, Tenant: id, Tier: tier, Release: v}
	}
	off := func(id, tier string) sendorder.Msg {
		return sendorder.Msg{Kind: message.Offboarding, Tenant: id, Tier: tier}
	}
	dep := func(id, tier, v string) sendorder.Msg {
		return sendorder.Msg{Kind: message.Deployment, Tenant: id, Tier: tier, Release: v}
	}
	// The histories, in send order, each message with its delay (seconds).
	type sent struct {
		sendorder.Msg
		delay int32
	}
	history := []sent{
		{on("e1", "premium", "0.0"), 0}, {off("e1", "premium"), 3}, {on("e1", "basic", "0.0"), 2}, {off("e1", "basic"), 1},
		{on("e2", "premium", "0.0"), 0}, {dep("e2", "premium", "2.0"), 2}, {off("e2", "premium"), 3}, {on("e2", "premium", "0.0"), 1},
		{on("e3", "advanced", "1.0"), 0}, {off("e3", "advanced"), 2}, {on("e3", "advanced", "0.0"), 3}, {dep("e3", "advanced", "8.0"), 1},
		{on("e4", "basic", "1.0"), 1}, {off("e4", "basic"), 2}, {on("e4", "basic", "0.0"), 3}, {dep("e4", "basic", "8.0"), 0},
		{sendorder.Msg{Kind: message.Deployment, Tier: "premium", Release: "5.0"}, 4},
	}
	url := map[message.Kind]string{message.Onboarding: h.q.onboarding, message.Offboarding: h.q.offboarding, message.Deployment: h.q.deployment}
	var ids []string
	var msgs []sendorder.Msg
	last := time.Now()
	for i, s := range history {
		// One send after the other, each in a millisecond of its own: the
		// send order is the order written above, whatever the ids.
		for time.Now().UnixMilli() == last.UnixMilli() {
			time.Sleep(time.Millisecond)
		}
		out, err := h.api.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(url[s.Kind]), MessageBody: aws.String(s.Body()), DelaySeconds: s.delay,
		})
		if err != nil {
			t.Fatal(err)
		}
		last = time.Now()
		m := s.Msg
		m.ID, m.Sent = aws.ToString(out.MessageId), i
		ids, msgs = append(ids, m.ID), append(msgs, m)
	}
	for _, id := range ids {
		h.outcome(id)
	}
	want, _ := sendorder.Tree(msgs)
	for _, id := range []string{"e1", "e2", "e3", "e4"} {
		if got := h.where(id); got != want[id].String() {
			t.Errorf("%s ends %s, want %s", id, got, want[id])
		}
	}
	for kind, dlq := range h.q.dlq {
		if n := h.queueCount(dlq); n > 0 {
			t.Errorf("%d messages dead-lettered from the %s queue:\n%v", n, kind, h.drainDLQ(dlq))
		}
	}
	// The planned reordering happened: some message was handled before one
	// about its tenant sent earlier.
	order := h.handled()
	inverted := false
	for i := range msgs {
		for j := range i {
			if msgs[i].Tenant == msgs[j].Tenant && order[ids[i]] < order[ids[j]] {
				inverted = true
			}
		}
	}
	if !inverted {
		t.Fatalf("every message was handled in send order: the delays reordered nothing, so nothing was tested")
	}
}

// where says where the branch has tenant id: "nowhere", tier@release, or
// what is inconsistent.
func (h *harness) where(id string) string {
	var at []string
	for _, tier := range sendorder.Tiers {
		f := h.file("tenants/" + tier + "/" + id + ".yaml")
		listed := strings.Contains(h.file("tenants/"+tier+"/kustomization.yaml"), id+".yaml")
		switch {
		case f == "<absent>" && !listed:
			continue
		case f == "<absent>" || !listed:
			return "inconsistent in " + tier
		}
		_, v, _ := strings.Cut(f, `version: "`)
		v, _, _ = strings.Cut(v, ".x")
		at = append(at, tier+"@"+v)
	}
	if len(at) == 0 {
		return "nowhere"
	}
	return strings.Join(at, ",")
}

// handled is the position of each message's first outcome in the log.
func (h *harness) handled() map[string]int {
	out := map[string]int{}
	for i, l := range strings.Split(h.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			continue
		}
		id, _ := m["message_id"].(string)
		msg, _ := m["message"].(string)
		if _, seen := out[id]; id == "" || seen || !slices.Contains(outcomeLines, msg) {
			continue
		}
		out[id] = i
	}
	return out
}

// outcomeLines are the worker's log messages for a message's outcome.
var outcomeLines = []string{"tenant change pushed", "already carried out; nothing to push", "already carried out; recorded in the ledger",
	"already applied by an earlier delivery of this message", staleLine, "message rejected", heldLine}
