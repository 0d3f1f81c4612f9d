package integration

import (
	"context"
	"fmt"
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
// repository: tenants per tier in onboarding order, each with its version,
// and the rule that the latest send time wins per tenant, written the plain
// way: a message carries the time it was sent; what it names remembers the
// time of the last message that changed it.
type model struct {
	order   map[string][]string // tier -> tenant ids, in kustomization order
	version map[string]string   // tenant -> release version
	tierOf  map[string]string   // tenant -> tier
	pool    string              // pool-1 version, "" while untouched

	clock   int            // send times handed out by step
	exists  map[string]int // tenant -> send time of the last onboarding or offboarding applied
	release map[string]int // "tier/tenant" -> send time of its release in that tier
	poolAt  int
	tierAt  map[string]int // tier -> send time of its last deployment
	tierRel map[string]string
	// held: an onboarding to another tier than the tenant's, sent after
	// everything applied to the tenant, waiting for the offboarding of the
	// move (sent before it) to complete the move.
	held map[string]map[string]heldOnboarding // tenant -> tier -> the first sent
}

type heldOnboarding struct {
	tier, version string
	sent          int
}

func newModel() *model {
	return &model{order: map[string][]string{}, version: map[string]string{}, tierOf: map[string]string{},
		exists: map[string]int{}, release: map[string]int{}, tierAt: map[string]int{}, tierRel: map[string]string{},
		held: map[string]map[string]heldOnboarding{}}
}

var aliases = map[string]string{"silo": "premium", "hybrid": "advanced", "pool": "basic"}

func canonical(tier string) string {
	if c, ok := aliases[tier]; ok {
		return c
	}
	return tier
}

// step applies a message sent now (after every earlier one) to the model
// and returns the expected outcome: "applied", "noop", "stale", "held" or
// "rejected:<reason>".
func (m *model) step(kind, id, tier, version string) string {
	m.clock++
	return m.stepAt(kind, id, tier, version, m.clock)
}

// stepAt applies a message that was sent at time sent and arrives now.
func (m *model) stepAt(kind, id, tier, version string, sent int) string {
	tier = canonical(tier)
	if tier != "premium" && tier != "advanced" && tier != "basic" {
		return "rejected:unknown_tier"
	}
	switch kind {
	case "onboarding":
		if m.exists[id] > sent {
			return "stale"
		}
		if t, ok := m.tierOf[id]; ok {
			if t != tier {
				if m.held[id] == nil {
					m.held[id] = map[string]heldOnboarding{}
				}
				if h, ok := m.held[id][tier]; !ok || sent < h.sent {
					m.held[id][tier] = heldOnboarding{tier, version, sent}
				}
				return "held"
			}
			m.exists[id] = max(m.exists[id], sent)
			return "noop"
		}
		m.exists[id] = max(m.exists[id], sent)
		m.add(id, tier, version, sent)
		return "applied"
	case "offboarding":
		if m.exists[id] > sent {
			return "stale"
		}
		t, ok := m.tierOf[id]
		if ok && t != tier {
			// An onboarding to this tier held since before it was sent came
			// first in send order, and this removes it.
			if h, held := m.held[id][tier]; held && h.sent <= sent {
				delete(m.held[id], tier)
				return "noop"
			}
			return "rejected:tier_conflict"
		}
		m.exists[id] = max(m.exists[id], sent)
		if ok {
			delete(m.tierOf, id)
			delete(m.version, id)
			m.order[tier] = slices.DeleteFunc(m.order[tier], func(s string) bool { return s == id })
		}
		// The first held onboarding sent after this offboarding completes
		// the move; those sent before it (or at the same time, handled
		// first) met the tenant in its old tier, those after it met it in
		// its new one.
		var first *heldOnboarding
		for _, h := range m.held[id] {
			if h.tier != tier && h.sent > sent && (first == nil || h.sent < first.sent) {
				first = &h
			}
		}
		delete(m.held, id)
		if first != nil {
			m.exists[id] = max(m.exists[id], first.sent)
			m.add(id, first.tier, first.version, first.sent)
			return "applied"
		}
		if !ok {
			return "noop"
		}
		return "applied"
	default: // deployment to a whole tier
		changed, fresh, stale := false, false, false
		for _, t := range m.order[tier] {
			if m.release[tier+"/"+t] > sent {
				stale = true
				continue
			}
			fresh, m.release[tier+"/"+t] = true, sent
			if m.version[t] != version {
				m.version[t], changed = version, true
			}
		}
		if tier == "basic" {
			if m.poolAt > sent {
				stale = true
			} else {
				fresh, m.poolAt = true, sent
				if m.pool != version {
					m.pool, changed = version, true
				}
			}
		}
		if m.tierAt[tier] > sent {
			stale = true
		} else {
			fresh, m.tierAt[tier], m.tierRel[tier] = true, sent, version
		}
		switch {
		case changed:
			return "applied"
		case stale && !fresh:
			return "stale"
		}
		return "noop"
	}
}

// add puts tenant id in tier as an onboarding sent at sent asking for
// version does.
func (m *model) add(id, tier, version string, sent int) {
	m.release[tier+"/"+id] = max(m.release[tier+"/"+id], sent)
	if at := m.tierAt[tier]; at > sent {
		version, m.release[tier+"/"+id] = m.tierRel[tier], max(m.release[tier+"/"+id], at) // a deployment sent later already ran
	}
	m.tierOf[id], m.version[id] = tier, version
	m.order[tier] = append(m.order[tier], id)
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
							want2, want1 := expect(m, kind2, body2, m.clock), expect(m, kind, body, sentFirst)
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
						if got, want := outcomeOf(id1), expect(m, kind, body, m.clock); got != want {
							t.Fatalf("step %d: %s %s: outcome %s, model says %s", i, kind, body, got, want)
						}
						continue
					}
				}
				m.clock++
				want := expect(m, kind, body, m.clock)
				msgID := h.send(queueOf[kind], body)
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
func expect(m *model, kind, body string, sent int) string {
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
	return m.stepAt(kind, id, field("tenant_tier"), field("release_version"), sent)
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
