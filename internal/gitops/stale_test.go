package gitops

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/message"
)

// msg is a message as SQS would deliver it: its body and send time.
type msg struct {
	id   string
	kind message.Kind
	body string
	sent int // seconds after a fixed start
}

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func deliver(t *testing.T, m fstest.MapFS, x msg) Change {
	t.Helper()
	req, err := message.Decode(x.kind, []byte(x.body))
	if err != nil {
		t.Fatal(err)
	}
	c, err := layout.PlanAt(FS{m}, req, Stamp{MessageID: x.id, Sent: t0.Add(time.Duration(x.sent) * time.Second),
		Now: t0.Add(time.Hour), Retention: 4 * 24 * time.Hour})
	if err != nil {
		t.Fatalf("%s: %v", x.id, err)
	}
	apply(m, c)
	return c
}

func outcome(c Change) string {
	switch {
	case c.Duplicate:
		return "duplicate"
	case c.Stale:
		return "stale"
	case c.Recorded:
		return "recorded"
	case c.Empty():
		return "noop"
	}
	return "applied"
}

// TestLatestSendTimeWins: whatever the order of arrival, the tree ends as
// the messages in send order would leave it, and a message older than the
// last change to what it names changes nothing of it.
func TestLatestSendTimeWins(t *testing.T) {
	on := func(id string, sent int) msg {
		return msg{"on-" + id + fmt.Sprint(sent), message.Onboarding, `{"tenant_id":"` + id + `","tenant_tier":"premium","release_version":"0.0"}`, sent}
	}
	off := func(id string, sent int) msg {
		return msg{"off-" + id + fmt.Sprint(sent), message.Offboarding, `{"tenant_id":"` + id + `","tenant_tier":"premium"}`, sent}
	}
	dep := func(v string, sent int) msg {
		return msg{"dep-" + v, message.Deployment, `{"tenant_tier":"premium","release_version":"` + v + `"}`, sent}
	}
	for _, tc := range []struct {
		name     string
		arrivals []msg
		outcomes string // of each arrival
		present  bool   // is t1 on the branch at the end
		version  string // t1's chart version at the end
	}{
		{"offboarding sent after the onboarding, arriving first", []msg{off("t1", 2), on("t1", 1)}, "recorded stale", false, ""},
		{"onboarding sent after the offboarding, arriving first", []msg{on("t1", 2), off("t1", 1)}, "applied stale", true, "0.0"},
		{"a redelivered no-op cannot roll the tier back", []msg{on("t1", 1), dep("2.0", 2), dep("2.0", 2), dep("3.0", 3), dep("2.0", 2)},
			"applied applied duplicate applied duplicate", true, "3.0"},
		{"a late copy under another id is stale", []msg{on("t1", 1), dep("3.0", 3), {"copy", message.Deployment, `{"tenant_tier":"premium","release_version":"2.0"}`, 2}},
			"applied applied stale", true, "3.0"},
		{"an offboarded tenant does not come back", []msg{on("t1", 1), off("t1", 5), on("t1", 3)}, "applied applied stale", false, ""},
		{"a no-op newer than the record is recorded", []msg{on("t1", 1), on("t1", 4), off("t1", 3)}, "applied recorded stale", true, "0.0"},
		{"equal send times: arrival order", []msg{on("t1", 1), off("t1", 1)}, "applied applied", false, ""},
		{"an offboarding sent before a deployment still removes the tenant", []msg{on("t1", 1), dep("2.0", 3), off("t1", 2)},
			"applied applied applied", false, ""},
		{"an onboarding sent before a deployment takes its release", []msg{dep("2.0", 2), on("t1", 1)}, "recorded applied", true, "2.0"},
		{"an onboarding sent after a deployment keeps its own", []msg{dep("2.0", 1), on("t1", 2)}, "recorded applied", true, "0.0"},
		{"a deployment sent before the onboarding does not move it", []msg{on("t1", 2), dep("2.0", 1)}, "applied recorded", true, "0.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t)
			var got []string
			for _, x := range tc.arrivals {
				got = append(got, outcome(deliver(t, m, x)))
			}
			if strings.Join(got, " ") != tc.outcomes {
				t.Errorf("outcomes %q, want %q", strings.Join(got, " "), tc.outcomes)
			}
			f := file(m, "tenants/premium/t1.yaml")
			listed := strings.Contains(file(m, "tenants/premium/kustomization.yaml"), "t1.yaml")
			if present := f != "<absent>"; present != tc.present || listed != tc.present {
				t.Fatalf("t1 file present %v, listed %v; want %v", present, listed, tc.present)
			}
			if tc.present && !strings.Contains(f, `version: "`+tc.version+`.x"`) {
				t.Errorf("t1 is not at %s:\n%s", tc.version, f)
			}
		})
	}
}
