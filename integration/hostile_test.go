package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/tenant-worker/tenant-worker/templates"
)

// TestHostileInput sends attacks in every field; each must be refused with
// a clear reason and write nothing.
func TestHostileInput(t *testing.T) {
	h := newHarness(t, true)
	h.start()
	on := func(id, tier, ver string) string {
		return `{"tenant_id":"` + id + `","tenant_tier":"` + tier + `","release_version":"` + ver + `"}`
	}
	big := strings.Repeat("a", 256*1024-64)
	cases := []struct {
		name, body, reason string
	}{
		{"path traversal id", on("../../etc", "premium", "0.0"), "invalid_tenant_id"},
		{"path traversal tier", on("t1", "../../tenants", "0.0"), "unknown_tier"},
		{"absolute path id", on("/etc/passwd", "premium", "0.0"), "invalid_tenant_id"},
		{"absolute path tier", on("t1", "/tmp", "0.0"), "unknown_tier"},
		{"cyrillic look-alike", on("tenаnt-1", "premium", "0.0"), "invalid_tenant_id"},
		{"fullwidth look-alike", on("ｔenant", "premium", "0.0"), "invalid_tenant_id"},
		{"zero-width space", on("ten\u200bant", "premium", "0.0"), "invalid_tenant_id"},
		{"newline in id", on(`t1\nkind: Secret`, "premium", "0.0"), "invalid_tenant_id"},
		{"yaml in id", on(`t1: {a: b}`, "premium", "0.0"), "invalid_tenant_id"},
		{"newline in tier", on("t1", `premium\n`, "0.0"), "unknown_tier"},
		{"newline in version", on("t1", "premium", `0.0\n  evil: true`), "invalid_version"},
		{"yaml in version", on("t1", "premium", `0.0\"}, x: {\"`), "invalid_version"},
		{"sed in version", on("t1", "premium", `0.0|g;s|a|b`), "invalid_version"},
		{"256 KiB body", `{"tenant_id":"` + big + `","tenant_tier":"premium","release_version":"0.0"}`, "too_large"},
		{"number id", `{"tenant_id":1,"tenant_tier":"premium","release_version":"0.0"}`, "invalid_field"},
		{"null tier", `{"tenant_id":"t1","tenant_tier":null,"release_version":"0.0"}`, "invalid_field"},
		{"number version", `{"tenant_id":"t1","tenant_tier":"premium","release_version":1.0}`, "invalid_field"},
		{"array id", `{"tenant_id":["t1"],"tenant_tier":"premium","release_version":"0.0"}`, "invalid_field"},
		{"duplicate key", `{"tenant_id":"t1","tenant_id":"../x","tenant_tier":"premium","release_version":"0.0"}`, "invalid_json"},
		{"nested injection", `{"tenant_id":"t1","tenant_tier":"premium","release_version":"0.0","extra":{"a":1}}`, "invalid_field"},
	}
	head := h.head()
	ids := map[string]string{}
	for _, c := range cases {
		ids[h.send(h.q.onboarding, c.body)] = c.name
	}
	dead := h.deadLetters(h.q.dlq["onboarding"], len(cases))
	for id, name := range ids {
		var want string
		for _, c := range cases {
			if c.name == name {
				want = c.reason
			}
		}
		m, ok := dead[id]
		if got := aws.ToString(m.MessageAttributes["reason"].StringValue); !ok || got != want {
			t.Errorf("%s: dead-lettered with reason %q, want %q", name, got, want)
		}
		if detail := aws.ToString(m.MessageAttributes["error"].StringValue); len(detail) > 1100 || strings.Contains(detail, "\n") {
			t.Errorf("%s: error attribute is not one clear line: %q", name, detail)
		}
	}
	if h.head() != head {
		t.Fatal("hostile input changed the branch")
	}
	// No log line was forged by a newline in a field: every line is JSON.
	for _, l := range strings.Split(strings.TrimSpace(h.logs.String()), "\n") {
		if !strings.HasPrefix(l, "{") {
			t.Fatalf("log line not JSON (forged?): %q", l)
		}
	}

	// A template that renders two documents with the same name breaks every
	// onboarding of its tier: the repository's fault, not the message's. The
	// message is retried, not dead-lettered, and goes through once the
	// template is fixed.
	tmpl := templates.Root + "/tier-templates/advanced_tenant_template.yaml"
	good := template(t, "advanced_tenant_template.yaml")
	doubled := good + "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {TENANT_ID}\n"
	if err := h.git.WriteFile(repoName, "main", tmpl, doubled, "a bad template"); err != nil {
		t.Fatal(err)
	}
	head = h.head()
	id := h.send(h.q.onboarding, on("t2", "advanced", "0.0"))
	h.waitFor("the broken template to be reported", 20*time.Second, func() bool {
		for _, l := range h.logs.lines("message_id", id) {
			if l["message"] == "message failed; SQS will redeliver it" && strings.Contains(fmt.Sprint(l["error"]), "the repository needs a fix") {
				return true
			}
		}
		return false
	})
	if h.head() != head {
		t.Fatal("an invalid render was pushed")
	}
	if err := h.git.WriteFile(repoName, "main", tmpl, good, "fix the template"); err != nil {
		t.Fatal(err)
	}
	if line := h.outcome(id); line["message"] != "tenant change pushed" {
		t.Fatalf("after the fix: %v", line)
	}
}
