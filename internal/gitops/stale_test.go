package gitops

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/templates"
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
	c, err := try(t, m, x)
	if err != nil {
		t.Fatalf("%s: %v", x.id, err)
	}
	return c
}

func outcome(c Change) string {
	switch {
	case c.Duplicate:
		return "duplicate"
	case c.Stale:
		return "stale"
	case c.Held:
		return "held"
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
		{"equal send times: by message id", []msg{on("t1", 1), off("t1", 1)}, "applied stale", true, "0.0"},
		{"equal send times: by message id, either way", []msg{off("t1", 1), on("t1", 1)}, "recorded applied", true, "0.0"},
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

// TestStaleBeforeExistence: the stale rule is applied before existence and
// tier checks, for every kind. A per-tenant deployment sent before the
// tenant was offboarded (or moved to another tier) arrives last: stale, not
// tenant_not_found or tier_conflict, and nothing changes.
func TestStaleBeforeExistence(t *testing.T) {
	on := func(id, tier string, sent int) msg {
		return msg{fmt.Sprintf("on-%s-%s-%d", id, tier, sent), message.Onboarding, `{"tenant_id":"` + id + `","tenant_tier":"` + tier + `","release_version":"0.0"}`, sent}
	}
	off := func(id, tier string, sent int) msg {
		return msg{fmt.Sprintf("off-%s-%s-%d", id, tier, sent), message.Offboarding, `{"tenant_id":"` + id + `","tenant_tier":"` + tier + `"}`, sent}
	}
	depTo := func(id, tier, v string, sent int) msg {
		return msg{"dep-" + id + v, message.Deployment, `{"tenant_tier":"` + tier + `","release_version":"` + v + `","tenant_id":"` + id + `"}`, sent}
	}
	for name, arrivals := range map[string][]msg{
		"offboarded":     {on("t1", "premium", 1), off("t1", "premium", 3), depTo("t1", "premium", "2.0", 2)},
		"moved tier":     {on("t1", "premium", 1), off("t1", "premium", 3), on("t1", "basic", 4), depTo("t1", "premium", "2.0", 2)},
		"deployed since": {on("t1", "premium", 1), depTo("t1", "premium", "3.0", 3), depTo("t1", "premium", "2.0", 2)},
	} {
		t.Run(name, func(t *testing.T) {
			m := seed(t)
			for _, x := range arrivals[:len(arrivals)-1] {
				deliver(t, m, x)
			}
			before := snapshot(m)
			if got := outcome(deliver(t, m, arrivals[len(arrivals)-1])); got != "stale" {
				t.Fatalf("the late deployment is %s, want stale", got)
			}
			if after := snapshot(m); after != before {
				t.Fatal("the stale deployment changed the tree")
			}
		})
	}
}

// TestLateDeploymentSparesWhatHasNoRecord: a tenant and a pooled
// environment added by hand (no ledger record) after a deployment of 2.0
// take the tier's record: a deployment of 1.0 sent before the 2.0 one and
// arriving late leaves them at 2.0.
func TestLateDeploymentSparesWhatHasNoRecord(t *testing.T) {
	m := seed(t)
	deliver(t, m, msg{"on-b1", message.Onboarding, `{"tenant_id":"b1","tenant_tier":"basic","release_version":"0.0"}`, 1})
	deliver(t, m, msg{"dep-2", message.Deployment, `{"tenant_tier":"basic","release_version":"2.0"}`, 3})
	// By hand, at 2.0: a tenant and a pooled environment.
	b1 := file(m, "tenants/basic/b1.yaml")
	m[templates.Root+"/tenants/basic/hand.yaml"] = &fstest.MapFile{Data: []byte(strings.ReplaceAll(b1, "b1", "hand"))}
	k := templates.Root + "/tenants/basic/kustomization.yaml"
	m[k] = &fstest.MapFile{Data: []byte(file(m, "tenants/basic/kustomization.yaml") + "\n  - hand.yaml\n")}
	pool := file(m, "pooled-envs/pool-1.yaml")
	m[templates.Root+"/pooled-envs/pool-2.yaml"] = &fstest.MapFile{Data: []byte(strings.ReplaceAll(pool, "pool-1", "pool-2"))}
	pk := templates.Root + "/pooled-envs/kustomization.yaml"
	m[pk] = &fstest.MapFile{Data: []byte(file(m, "pooled-envs/kustomization.yaml") + "\n  - pool-2.yaml\n")}
	before := snapshot(m)
	if got := outcome(deliver(t, m, msg{"dep-1", message.Deployment, `{"tenant_tier":"basic","release_version":"1.0"}`, 2})); got != "stale" {
		t.Fatalf("the late deployment is %s, want stale", got)
	}
	if after := snapshot(m); after != before {
		t.Fatalf("the late deployment changed the tree: hand %q, pool-2 %q", file(m, "tenants/basic/hand.yaml"), file(m, "pooled-envs/pool-2.yaml"))
	}
}

func snapshot(m fstest.MapFS) string {
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(m)) {
		if !strings.HasPrefix(p, ledgerDir+"/") {
			fmt.Fprintf(&b, "%s\n%s\n", p, m[p].Data)
		}
	}
	return b.String()
}
