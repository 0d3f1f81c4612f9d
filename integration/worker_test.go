package integration

import (
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/tenant-worker/tenant-worker/templates"
)

// withRelease is a file rendered from a tier template after a deployment
// of release v: its chart version line changed, every other byte kept.
func withRelease(file, v string) string {
	return regexp.MustCompile(`(?m)^(\s+version: )"[0-9]+\.[0-9]+\.x"`).ReplaceAllString(file, `${1}"`+v+`.x"`)
}

func template(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(templates.FS, templates.Root+"/tier-templates/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sed is the reference's substitution: s|{TENANT_ID}|id|g; s|{RELEASE_VERSION}|v|g.
func sed(tmpl, id, version string) string {
	return strings.NewReplacer("{TENANT_ID}", id, "{RELEASE_VERSION}", version).Replace(tmpl)
}

const kustomizationHead = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - dummy-configmap.yaml"

func TestOnboardOffboardDeploy(t *testing.T) {
	t.Parallel()
	onEachServer(t, testOnboardOffboardDeploy)
}

func testOnboardOffboardDeploy(t *testing.T, srv server) {
	h := newHarnessOn(t, srv, true)
	h.start()
	seedHead := h.head()

	for _, tc := range []struct{ id, tier string }{{"tenant-1", "premium"}, {"tenant-2", "advanced"}, {"tenant-3", "basic"}} {
		id := h.send(h.q.onboarding, `{"tenant_id":"`+tc.id+`","tenant_tier":"`+tc.tier+`","release_version":"0.0"}`)
		line := h.outcome(id)
		if line["message"] != "tenant change pushed" || line["tenant"] != tc.id || line["tier"] != tc.tier {
			t.Fatalf("onboarding %s: log line %v", tc.id, line)
		}
		if sha, _ := line["commit"].(string); sha != h.head() {
			t.Fatalf("logged commit %s, branch at %s", sha, h.head())
		}
		if got, want := h.file("tenants/"+tc.tier+"/"+tc.id+".yaml"), sed(template(t, tc.tier+"_tenant_template.yaml"), tc.id, "0.0"); got != want {
			t.Fatalf("%s differs from the reference's output:\n%s", tc.id, got)
		}
		if got, want := h.file("tenants/"+tc.tier+"/kustomization.yaml"), kustomizationHead+"\n  - "+tc.id+".yaml"; got != want {
			t.Fatalf("kustomization of %s:\n%q\nwant\n%q", tc.tier, got, want)
		}
		if got := h.gitOut("log", "-1", "--format=%an <%ae>%n%s"); got != "admin <admin@example.com>\nAdding new tenant "+tc.id+" in tier "+tc.tier+"\n" {
			t.Fatalf("commit: %q", got)
		}
	}

	id := h.send(h.q.offboarding, `{"tenant_id":"tenant-2","tenant_tier":"advanced"}`)
	if line := h.outcome(id); line["message"] != "tenant change pushed" {
		t.Fatalf("offboarding: %v", line)
	}
	if h.file("tenants/advanced/tenant-2.yaml") != "<absent>" || h.file("tenants/advanced/kustomization.yaml") != kustomizationHead {
		t.Fatalf("offboarding left:\n%s", h.file("tenants/advanced/kustomization.yaml"))
	}
	if got := h.gitOut("log", "-1", "--format=%s"); got != "Removing tenant tenant-2 in tier advanced\n" {
		t.Fatalf("commit: %q", got)
	}

	premium := h.file("tenants/premium/tenant-1.yaml")
	id = h.send(h.q.deployment, `{"tenant_tier":"basic","release_version":"1.0"}`)
	if line := h.outcome(id); line["message"] != "tenant change pushed" {
		t.Fatalf("deployment: %v", line)
	}
	if got, want := h.file("tenants/basic/tenant-3.yaml"), sed(template(t, "basic_tenant_template.yaml"), "tenant-3", "1.0"); got != want {
		t.Fatalf("tenant-3 after deployment:\n%s", got)
	}
	seedPool, err := fs.ReadFile(templates.FS, templates.Root+"/pooled-envs/pool-1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, pool := h.file("pooled-envs/pool-1.yaml"), withRelease(string(seedPool), "1.0"); got != pool {
		t.Fatalf("pool-1 after deployment:\n%s", got)
	}
	if h.file("tenants/premium/tenant-1.yaml") != premium {
		t.Fatal("basic deployment changed a premium tenant")
	}
	if got := h.gitOut("log", "-1", "--format=%s"); got != "Deploying to basic tenants, version 1.0\n" {
		t.Fatalf("commit: %q", got)
	}
	if n := strings.Count(h.gitOut("rev-list", seedHead+"..main"), "\n"); n != 5 {
		t.Fatalf("%d commits, want 5", n)
	}
	// The worker logs a push before it deletes the message.
	for _, u := range []string{h.q.onboarding, h.q.offboarding, h.q.deployment} {
		h.waitFor("no message left in "+u, 30*time.Second, func() bool { return h.queueCount(u) == 0 })
	}

	// The endpoints the chart probes, and the metrics the issue names.
	if h.httpGet("/healthz") != "ok\n" {
		t.Fatal("/healthz")
	}
	metrics := h.httpGet("/metrics")
	for _, want := range []string{
		`tenant_worker_messages_total{outcome="applied",queue="` + queueName(h.q.onboarding) + `"} 3`,
		`tenant_worker_step_duration_seconds_bucket{step="push"`,
		`tenant_worker_lock_wait_seconds_count 5`,
		`tenant_worker_push_attempts_total{result="success"} 5`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	h.stop()
	assertNoToken(t, h, metrics)
}

func queueName(url string) string { return url[strings.LastIndex(url, "/")+1:] }

// assertNoToken scans every output of the run, and the on-disk clone, for
// the git token.
func assertNoToken(t *testing.T, h *harness, extra ...string) {
	t.Helper()
	assertNoTokenInOutput(t, h, extra...)
	err := filepath.Walk(h.cloneDir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if strings.Contains(string(b), h.token) {
			t.Errorf("clone file %s contains the git token", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	configs, _ := filepath.Glob(filepath.Join(h.cloneDir, "config"))
	more, _ := filepath.Glob(filepath.Join(h.cloneDir, "*", "config"))
	if configs = append(configs, more...); len(configs) == 0 {
		t.Fatal("no clone config found")
	}
	for _, c := range configs {
		cfg, err := os.ReadFile(c)
		if err != nil || !strings.Contains(string(cfg), h.git.RepoURL(repoName)) {
			t.Fatalf("clone config %s %q (%v) does not name the plain remote URL", c, cfg, err)
		}
	}
}

func TestBadInputIsDeadLettered(t *testing.T) { onEachServer(t, testBadInputIsDeadLettered) }

func testBadInputIsDeadLettered(t *testing.T, srv server) {
	h := newHarnessOn(t, srv, true)
	h.start()
	// A tenant to collide with.
	if line := h.outcome(h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`)); line["message"] != "tenant change pushed" {
		t.Fatalf("setup: %v", line)
	}
	head := h.head()
	on := func(id, tier, ver string) string {
		return `{"tenant_id":"` + id + `","tenant_tier":"` + tier + `","release_version":"` + ver + `"}`
	}
	cases := []struct {
		queue, body, reason string
	}{
		{h.q.onboarding, `not json`, "invalid_json"},
		{h.q.onboarding, `{"tenant_id":"t9","tenant_tier":"premium"}`, "missing_field"},
		{h.q.onboarding, `{"tenant_id":9,"tenant_tier":"premium","release_version":"0.0"}`, "invalid_field"},
		{h.q.onboarding, on("t9", "gold", "0.0"), "unknown_tier"},
		{h.q.onboarding, on("../x", "premium", "0.0"), "invalid_tenant_id"},
		{h.q.onboarding, on("Tenant_1", "premium", "0.0"), "invalid_tenant_id"},
		{h.q.onboarding, on(strings.Repeat("a", 60), "premium", "0.0"), "invalid_tenant_id"},
		{h.q.onboarding, on("kustomization", "premium", "0.0"), "reserved_tenant_id"},
		{h.q.onboarding, on("pool-1", "basic", "0.0"), "reserved_tenant_id"},
		{h.q.onboarding, on("t9", "premium", "1"), "invalid_version"},
		{h.q.onboarding, on("t9", "premium", "v1.0"), "invalid_version"},
		{h.q.offboarding, `{"tenant_id":"tenant-1","tenant_tier":"gold"}`, "unknown_tier"},
		{h.q.deployment, `{"tenant_tier":"basic","release_version":"1.0.0"}`, "invalid_version"},
	}
	byQueue := map[string]int{}
	ids := map[string]string{}
	for _, c := range cases {
		ids[h.send(c.queue, c.body)] = c.reason
		byQueue[c.queue]++
	}
	// The dead-letter depth is published as a metric, read from SQS.
	want := fmt.Sprintf(`tenant_worker_dead_letter_messages{queue=%q} %d`, queueName(h.q.onboarding), byQueue[h.q.onboarding])
	h.waitFor("dead-letter depth metric", 15*time.Second, func() bool { return strings.Contains(h.httpGet("/metrics"), want) })
	got := map[string]string{}
	for queue, n := range byQueue {
		kind := map[string]string{h.q.onboarding: "onboarding", h.q.offboarding: "offboarding", h.q.deployment: "deployment"}[queue]
		for id, m := range h.deadLetters(h.q.dlq[kind], n) {
			got[id] = aws.ToString(m.MessageAttributes["reason"].StringValue)
			if aws.ToString(m.MessageAttributes["error"].StringValue) == "" {
				t.Errorf("dead letter %s has no error text", id)
			}
		}
	}
	for id, reason := range ids {
		if got[id] != reason {
			t.Errorf("message %s: dead-lettered with reason %q, want %q", id, got[id], reason)
		}
		lines := h.logs.lines("message_id", id)
		var rejected int
		for _, l := range lines {
			if l["message"] == "message rejected" && l["reason"] == reason && l["error"] != "" {
				rejected++
			}
		}
		if rejected != 1 {
			t.Errorf("message %s: %d rejection log lines, want 1: %v", id, rejected, lines)
		}
	}
	if h.head() != head {
		t.Fatal("a bad message changed the branch")
	}
	for _, u := range []string{h.q.onboarding, h.q.offboarding, h.q.deployment} {
		h.waitFor("source queues empty", 10*time.Second, func() bool { return h.queueCount(u) == 0 })
	}
	if m := h.httpGet("/metrics"); !strings.Contains(m, `tenant_worker_rejections_total{queue="`+queueName(h.q.onboarding)+`",reason="invalid_tenant_id"} 3`) {
		t.Error("rejections not counted by reason")
	}
}

func TestBadInputWithoutDeadLetterQueueIsDeleted(t *testing.T) {
	h := newHarness(t, false)
	h.start()
	id := h.send(h.q.onboarding, `{"tenant_id":"../x","tenant_tier":"premium","release_version":"0.0"}`)
	if line := h.outcome(id); line["reason"] != "invalid_tenant_id" {
		t.Fatalf("outcome: %v", line)
	}
	h.waitFor("message deleted", 10*time.Second, func() bool { return h.queueCount(h.q.onboarding) == 0 })
}

func TestDuplicateMessageIsANoop(t *testing.T) { onEachServer(t, testDuplicateMessageIsANoop) }

func testDuplicateMessageIsANoop(t *testing.T, srv server) {
	h := newHarnessOn(t, srv, true)
	h.start()
	body := `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`
	first := h.outcome(h.send(h.q.onboarding, body))
	head := h.head()
	second := h.outcome(h.send(h.q.onboarding, body))
	// The second copy, sent later, changes nothing but its record in the
	// ledger (so that an older message cannot undo it).
	if first["message"] != "tenant change pushed" || second["message"] != "already carried out; recorded in the ledger" {
		t.Fatalf("outcomes: %v / %v", first, second)
	}
	// main, the branch Flux reads, does not move for it: only the ledger
	// branch does.
	if now := h.head(); now != head {
		t.Fatalf("the repeated onboarding moved main from %s to %s", head, now)
	}
	if log := h.gitOut("log", "-1", "--format=%s", "tenant-worker/ledger"); log != "Already in place: Adding new tenant tenant-1 in tier premium\n" {
		t.Fatalf("the ledger branch's last commit: %q", log)
	}
	if got := h.file("tenants/premium/kustomization.yaml"); strings.Count(got, "tenant-1.yaml") != 1 {
		t.Fatalf("kustomization:\n%s", got)
	}
	// Offboarding an absent tenant is also a no-op success.
	if line := h.outcome(h.send(h.q.offboarding, `{"tenant_id":"nobody","tenant_tier":"premium"}`)); line["message"] != "already carried out; recorded in the ledger" {
		t.Fatalf("offboarding absent tenant: %v", line)
	}
	h.waitFor("queues empty", 10*time.Second, func() bool {
		return h.queueCount(h.q.onboarding)+h.queueCount(h.q.offboarding) == 0
	})
}

func TestPushLosesRaceToImageAutomation(t *testing.T) {
	t.Parallel()
	onEachServer(t, testPushLosesRaceToImageAutomation)
}

func testPushLosesRaceToImageAutomation(t *testing.T, srv server) {
	h := newHarnessOn(t, srv, true)
	h.start()
	var fired atomic.Int32
	automation := make(chan error, 1)
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") && fired.Add(1) == 1 {
			// Flux image automation rewrites a tag between our fetch and push.
			pool := strings.Replace(h.file("pooled-envs/pool-1.yaml"), `tag: "0.1" # {"$imagepolicy": "flux-system:consumer`, `tag: "0.2" # {"$imagepolicy": "flux-system:consumer`, 1)
			automation <- h.git.WriteFile(repoName, "main", templates.Root+"/pooled-envs/pool-1.yaml", pool, "Update image tags")
		}
		return true
	})
	line := h.outcome(h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`))
	if err := <-automation; err != nil {
		t.Fatal(err)
	}
	if line["message"] != "tenant change pushed" || line["attempts"] != float64(2) {
		t.Fatalf("outcome: %v", line)
	}
	if !strings.Contains(h.file("pooled-envs/pool-1.yaml"), `tag: "0.2"`) || h.file("tenants/premium/tenant-1.yaml") == "<absent>" {
		t.Fatal("one of the two changes is missing from the branch")
	}
	if got := h.gitOut("log", "--format=%s", "-2"); got != "Adding new tenant tenant-1 in tier premium\nUpdate image tags\n" {
		t.Fatalf("history:\n%s", got)
	}
}

func TestGitOutageIsRetriedNotLost(t *testing.T) {
	h := newHarness(t, true)
	h.start()
	var down atomic.Bool
	down.Store(true)
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if down.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return false
		}
		return true
	})
	id := h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`)
	h.waitFor("a failed attempt", 20*time.Second, func() bool {
		for _, l := range h.logs.lines("message_id", id) {
			if l["message"] == "message failed; SQS will redeliver it" {
				return true
			}
		}
		return false
	})
	if n := h.queueCount(h.q.onboarding); n != 1 {
		t.Fatalf("message not kept in the queue during the outage (%d)", n)
	}
	down.Store(false)
	if line := h.outcome(id); line["message"] != "tenant change pushed" {
		t.Fatalf("after the outage: %v", line)
	}
	h.waitFor("queue empty", 10*time.Second, func() bool { return h.queueCount(h.q.onboarding) == 0 })
	assertNoToken(t, h, h.httpGet("/metrics"))
}

// assertNoTokenInOutput scans logs and the extra outputs for the git token.
func assertNoTokenInOutput(t *testing.T, h *harness, extra ...string) {
	t.Helper()
	for i, s := range append(extra, h.logs.String()) {
		if strings.Contains(s, h.token) {
			t.Errorf("output %d contains the git token", i)
		}
	}
}
