package integration

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/kustomization"
	"github.com/tenant-worker/tenant-worker/internal/validate"
	"github.com/tenant-worker/tenant-worker/templates"
)

// model is the simplest possible account of what the worker must do to the
// repository, written apart from the worker's own: every message that
// arrived, and the rule that each tenant is where its messages, in the
// order they were sent (send time, then message id), leave it, and each
// tier's deployments with it. A message that, in send order, does not fit
// where its tenant is (another tier; a deployment to a tenant not there)
// changes nothing and waits. Kustomization entries are kept in the order
// the worker's edits leave them: a tenant that arrives in a tier is
// appended, one that leaves is taken out.
type model struct {
	order   map[string][]string // tier -> tenant ids, in kustomization order
	version map[string]string   // tenant -> release version
	tierOf  map[string]string   // tenant -> tier
	pool    string              // pool-1 version

	clock   int    // send times handed out by step
	arrived []mmsg // every message recorded, in arrival order
	poolAt  int    // send time of the deployment pool-1 is at
}

// mmsg is a message the model recorded.
type mmsg struct {
	kind, id, tier, version string // id: the tenant's; tier canonical
	sent                    int
	msg                     string // the message's own id: equal send times are ordered by it
}

func newModel() *model {
	// pool-1 as the platform's file has it: at 0.0.
	return &model{order: map[string][]string{}, version: map[string]string{}, tierOf: map[string]string{}, pool: "0.0"}
}

var aliases = map[string]string{"silo": "premium", "hybrid": "advanced", "pool": "basic"}

func canonical(tier string) string {
	if c, ok := aliases[tier]; ok {
		return c
	}
	return tier
}

// place is where the model's fold puts a tenant.
type place struct{ tier, version string }

// fold is where msgs, in send order, leave tenant id, and whether the
// message msg fits where it meets the tenant.
func fold(msgs []mmsg, id, msg string) (place, bool) {
	sorted := slices.Clone(msgs)
	slices.SortFunc(sorted, func(a, b mmsg) int {
		if a.sent != b.sent {
			return a.sent - b.sent
		}
		return strings.Compare(a.msg, b.msg)
	})
	var at place
	fits := true
	for _, m := range sorted {
		if m.kind == "deployment" {
			if at.tier == m.tier {
				at.version = m.version
			}
			continue
		}
		if m.id != id {
			continue
		}
		ok := true
		switch {
		case m.kind == "onboarding" && at.tier == "":
			at = place{m.tier, m.version}
		case m.kind == "onboarding":
			ok = at.tier == m.tier // in place, or waiting
		case m.kind == "offboarding" && at.tier == m.tier:
			at = place{}
		case m.kind == "offboarding":
			ok = at.tier == "" // nothing to take away, or waiting
		}
		if m.msg == msg {
			fits = ok
		}
	}
	return at, fits
}

// step applies a message sent now (after every earlier one) to the model
// and returns the expected outcome: "applied", "noop", "stale", "held" or
// "rejected:<reason>".
func (m *model) step(kind, id, tier, version string) string {
	m.clock++
	return m.stepAt(kind, id, tier, version, "", m.clock)
}

// tenants are the tenant ids the model knows.
func (m *model) tenants() []string {
	ids := map[string]bool{}
	for _, a := range m.arrived {
		if a.kind != "deployment" {
			ids[a.id] = true
		}
	}
	return slices.Sorted(maps.Keys(ids))
}

// stepAt applies a message that was sent at time sent and arrives now.
func (m *model) stepAt(kind, id, tier, version, msg string, sent int) string {
	if msg == "" {
		msg = fmt.Sprintf("~%09d", sent) // a message of its own, after any id at its send time
	}
	tier = canonical(tier)
	known := tier == "premium" || tier == "advanced" || tier == "basic"
	this := mmsg{kind, id, tier, version, sent, msg}
	if kind == "deployment" {
		superseded := false
		for _, a := range m.arrived {
			if a.kind == "deployment" && a.tier == tier && (a.sent > sent || a.sent == sent && a.msg > msg) {
				superseded = true
			}
		}
		if superseded {
			return "stale"
		}
		if !known {
			return "rejected:unknown_tier"
		}
		changed := false
		after := append(slices.Clone(m.arrived), this)
		for _, t := range m.tenants() {
			at, _ := fold(after, t, "")
			if at.tier == tier && m.version[t] != at.version {
				m.version[t], changed = at.version, true
			}
		}
		if tier == "basic" && sent >= m.poolAt {
			m.poolAt = sent
			if m.pool != version {
				m.pool, changed = version, true
			}
		}
		m.arrived = after
		if changed {
			return "applied"
		}
		return "noop"
	}
	before, _ := fold(m.arrived, id, "")
	after, fits := fold(append(slices.Clone(m.arrived), this), id, msg)
	switch {
	case !known && (!fits || before != after):
		return "rejected:unknown_tier"
	case !known:
		return "stale" // changes nothing, in a tier the repository lacks: not recorded
	}
	m.arrived = append(m.arrived, this)
	if before != after {
		if before.tier != after.tier {
			if before.tier != "" {
				m.order[before.tier] = slices.DeleteFunc(m.order[before.tier], func(s string) bool { return s == id })
				delete(m.tierOf, id)
				delete(m.version, id)
			}
			if after.tier != "" {
				m.order[after.tier] = append(m.order[after.tier], id)
				m.tierOf[id] = after.tier
			}
		}
		if after.tier != "" {
			m.version[id] = after.version
		}
		return "applied"
	}
	if !fits {
		return "held"
	}
	// In place, or undone by messages sent after it.
	asked := map[string]bool{
		"onboarding":  after.tier == tier,
		"offboarding": after.tier != tier,
	}[kind]
	if !asked {
		return "stale"
	}
	return "noop"
}

// tree is the expected content of every file below tenants/ and pooled-envs/.
func (m *model) tree(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, p := range []string{"tenants/kustomization.yaml", "pooled-envs/kustomization.yaml", "pooled-envs/pool-1.yaml"} {
		b, err := templates.FS.ReadFile(templates.Root + "/" + p)
		if err != nil {
			t.Fatal(err)
		}
		files[p] = string(b)
	}
	if m.pool != "" {
		// A deployment sets the release and keeps every other byte of the
		// platform's file (which lacks the template's storageNamespace).
		files["pooled-envs/pool-1.yaml"] = withRelease(files["pooled-envs/pool-1.yaml"], m.pool)
	}
	for _, tier := range []string{"premium", "advanced", "basic"} {
		dummy, _ := templates.FS.ReadFile(templates.Root + "/tenants/" + tier + "/dummy-configmap.yaml")
		files["tenants/"+tier+"/dummy-configmap.yaml"] = string(dummy)
		k := kustomizationHead
		for _, id := range m.order[tier] {
			k += "\n  - " + id + ".yaml"
			files["tenants/"+tier+"/"+id+".yaml"] = sed(template(t, tier+"_tenant_template.yaml"), id, m.version[id])
		}
		files["tenants/"+tier+"/kustomization.yaml"] = k
	}
	return files
}

// remoteTree reads every file below tenants/ and pooled-envs/ on the branch.
func (h *harness) remoteTree() map[string]string {
	h.t.Helper()
	files := map[string]string{}
	for _, dir := range []string{"tenants", "pooled-envs"} {
		for _, p := range strings.Fields(h.gitOut("ls-tree", "-r", "--name-only", "main", templates.Root+"/"+dir)) {
			rel := strings.TrimPrefix(p, templates.Root+"/")
			files[rel] = h.file(rel)
		}
	}
	return files
}

// checkInvariants compares the branch with the model and checks it the way
// Flux will read it. With anyOrder, kustomization entries may stand in any
// order (messages handled concurrently).
func (h *harness) checkInvariants(m *model, anyOrder bool) {
	t := h.t
	t.Helper()
	want, got := m.tree(t), h.remoteTree()
	for p := range want {
		if anyOrder && strings.HasSuffix(p, "/kustomization.yaml") {
			if sortedLines(got[p]) != sortedLines(want[p]) {
				t.Errorf("%s lists other entries than the model:\n got %q\nwant %q", p, got[p], want[p])
			}
			continue
		}
		if got[p] != want[p] {
			t.Errorf("%s differs from the model:\n got %q\nwant %q", p, got[p], want[p])
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("unexpected file %s", p)
		}
	}
	for _, tier := range []string{"premium", "advanced", "basic"} {
		entries, err := kustomization.Resources([]byte(got["tenants/"+tier+"/kustomization.yaml"]))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range entries {
			if seen[e] {
				t.Errorf("duplicate entry %s in %s", e, tier)
			}
			seen[e] = true
			if _, ok := got["tenants/"+tier+"/"+e]; !ok {
				t.Errorf("dangling entry %s in %s", e, tier)
			}
		}
	}
	repo, err := gitrepo.Open(context.Background(), gitrepo.Options{URL: h.git.RepoURL(repoName), Branch: "main", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := repo.Snapshot(repo.Head())
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"tenants", "pooled-envs"} {
		if err := validate.Build(snap, templates.Root+"/"+dir); err != nil {
			t.Errorf("kustomize build: %v", err)
		}
	}
}

func sortedLines(s string) string {
	lines := strings.Split(s, "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// randomMessage draws a message: mostly valid, over a small set of tenants
// so that duplicates, absent tenants and wrong tiers are common.
func randomMessage(r *rand.Rand) (kind, body string) {
	kinds := []string{"onboarding", "onboarding", "offboarding", "deployment"}
	tiers := []string{"premium", "advanced", "basic", "silo", "hybrid", "pool", "gold"}
	kind = kinds[r.IntN(len(kinds))]
	id := "t" + strconv.Itoa(r.IntN(6))
	tier := tiers[r.IntN(len(tiers))]
	version := strconv.Itoa(r.IntN(3)) + ".0"
	switch kind {
	case "onboarding":
		body = fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q,"release_version":%q}`, id, tier, version)
	case "offboarding":
		body = fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q}`, id, tier)
	default:
		body = fmt.Sprintf(`{"tenant_tier":%q,"release_version":%q}`, tier, version)
	}
	if r.IntN(12) == 0 { // a bad message now and then
		kind, body = "onboarding", fmt.Sprintf(`{"tenant_id":"%s_X","tenant_tier":"basic","release_version":"1.0"}`, id)
	}
	return kind, body
}

// TestModel sends random message sequences through the real worker, one at
// a time, and checks the outcome of each and the tree after each run
// against the model. MODEL_SEEDS and MODEL_STEPS make it longer.
func TestModel(t *testing.T) {
	t.Parallel()
	seeds, steps := 3, 40
	if v, err := strconv.Atoi(os.Getenv("MODEL_SEEDS")); err == nil {
		seeds = v
	}
	if v, err := strconv.Atoi(os.Getenv("MODEL_STEPS")); err == nil {
		steps = v
	}
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			h := newHarness(t, true)
			h.start()
			r := rand.New(rand.NewPCG(uint64(seed), 42))
			m := newModel()
			queueOf := map[string]string{"onboarding": h.q.onboarding, "offboarding": h.q.offboarding, "deployment": h.q.deployment}
			rejected := map[string]string{}
			var last []string
			outcomeOf := func(msgID string) string {
				line := h.outcome(msgID)
				got := map[string]string{
					"tenant change pushed":                        "applied",
					"already carried out; nothing to push":        "noop",
					"already carried out; recorded in the ledger": "noop",
					heldLine: "held",
					"already applied by an earlier delivery of this message": "noop",
					staleLine: "stale",
				}[fmt.Sprint(line["message"])]
				if line["message"] == "message rejected" {
					got = "rejected:" + fmt.Sprint(line["reason"])
					rejected[msgID] = fmt.Sprint(line["reason"])
				}
				return got
			}
			hold := newPushHold(h)
			overtaken := 0
			for i := 0; i < steps; i++ {
				kind, body := randomMessage(r)
				if last != nil && r.IntN(8) == 0 {
					kind, body = last[0], last[1] // an exact duplicate
				}
				last = []string{kind, body}
				if r.IntN(4) == 0 {
					// Out of order: the worker's push of this message is held
					// until a message sent after it, from another queue, is in
					// its hands; then the push fails, the later one goes
					// first, and this one comes back: a redelivery of an old
					// message.
					kind2, body2 := randomMessage(r)
					if kind2 != kind {
						first := hold.arm()
						sentFirst := m.clock + 1
						id1 := h.send(queueOf[kind], body)
						if hold.held(first, func() bool { return h.finished(id1) }) {
							id2 := h.send(queueOf[kind2], body2)
							h.waitFor("the later message in the worker's hands", 20*time.Second, func() bool {
								return h.inFlight(id2) || h.finished(id2)
							})
							hold.fail(first)
							m.clock += 2
							want2, want1 := expect(m, kind2, body2, m.clock, id2), expect(m, kind, body, sentFirst, id1)
							if got := outcomeOf(id2); got != want2 {
								t.Fatalf("step %d: %s %s overtaking: outcome %s, model says %s", i, kind2, body2, got, want2)
							}
							if got := outcomeOf(id1); got != want1 {
								t.Fatalf("step %d: %s %s overtaken: outcome %s, model says %s", i, kind, body, got, want1)
							}
							overtaken++
							continue
						}
						// It needed no push: it was handled in order.
						m.clock++
						if got, want := outcomeOf(id1), expect(m, kind, body, m.clock, id1); got != want {
							t.Fatalf("step %d: %s %s: outcome %s, model says %s", i, kind, body, got, want)
						}
						continue
					}
				}
				m.clock++
				msgID := h.send(queueOf[kind], body)
				want := expect(m, kind, body, m.clock, msgID)
				if got := outcomeOf(msgID); got != want {
					t.Fatalf("step %d: %s %s: outcome %s, model says %s", i, kind, body, got, want)
				}
			}
			t.Logf("%d of %d steps delivered out of order", overtaken, steps)
			h.checkInvariants(m, false)
			dead := map[string]string{}
			h.waitFor("every rejected message in a dead-letter queue", 10*time.Second, func() bool {
				for _, kind := range []string{"onboarding", "offboarding", "deployment"} {
					for id, reason := range h.drainDLQ(h.q.dlq[kind]) {
						dead[id] = reason
					}
				}
				return len(dead) >= len(rejected)
			})
			for id, reason := range rejected {
				if dead[id] != reason {
					t.Errorf("rejected message %s: dead letter reason %q, want %q", id, dead[id], reason)
				}
			}
			if len(dead) != len(rejected) {
				t.Errorf("%d dead letters for %d rejections", len(dead), len(rejected))
			}
		})
	}
}

// expect steps the model with a message body (as generated above) sent at
// time sent.
func expect(m *model, kind, body string, sent int, msg string) string {
	field := func(k string) string {
		i := strings.Index(body, `"`+k+`":"`)
		if i < 0 {
			return ""
		}
		rest := body[i+len(k)+4:]
		return rest[:strings.Index(rest, `"`)]
	}
	id := field("tenant_id")
	if strings.Contains(id, "_X") {
		return "rejected:invalid_tenant_id"
	}
	return m.stepAt(kind, id, field("tenant_tier"), field("release_version"), msg, sent)
}

// pushHold holds the worker's next push at the git server until told to
// fail it.
type pushHold struct {
	mu      sync.Mutex
	armed   *holdState
	harness *harness
}

type holdState struct {
	held, fail chan struct{}
}

func newPushHold(h *harness) *pushHold {
	p := &pushHold{harness: h}
	h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "git-receive-pack") {
			return true
		}
		p.mu.Lock()
		s := p.armed
		p.armed = nil
		p.mu.Unlock()
		if s == nil {
			return true
		}
		close(s.held)
		<-s.fail
		http.Error(w, "held, then failed", http.StatusInternalServerError)
		return false
	})
	return p
}

// arm holds the next push.
func (p *pushHold) arm() *holdState {
	s := &holdState{held: make(chan struct{}), fail: make(chan struct{})}
	p.mu.Lock()
	p.armed = s
	p.mu.Unlock()
	return s
}

// held waits until the armed push is held (true) or done() says the
// message finished without one (false, and the hold is disarmed).
func (p *pushHold) held(s *holdState, done func() bool) bool {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.held:
			return true
		case <-time.After(20 * time.Millisecond):
		}
		if done() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.armed == s {
				p.armed = nil
				return false
			}
			// The hold fired meanwhile.
			return true
		}
	}
	p.harness.t.Fatal("the message neither pushed nor finished")
	return false
}

// fail lets the held push fail.
func (p *pushHold) fail(s *holdState) { close(s.fail) }
