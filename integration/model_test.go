package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/kustomization"
	"github.com/tenant-worker/tenant-worker/internal/validate"
	"github.com/tenant-worker/tenant-worker/templates"
)

// model is the simplest possible account of what the worker must do to the
// repository: tenants per tier in onboarding order, each with its version.
type model struct {
	order   map[string][]string // tier -> tenant ids, in kustomization order
	version map[string]string   // tenant -> release version
	tierOf  map[string]string   // tenant -> tier
	pool    string              // pool-1 version, "" while untouched
}

func newModel() *model {
	return &model{order: map[string][]string{}, version: map[string]string{}, tierOf: map[string]string{}}
}

var aliases = map[string]string{"silo": "premium", "hybrid": "advanced", "pool": "basic"}

func canonical(tier string) string {
	if c, ok := aliases[tier]; ok {
		return c
	}
	return tier
}

// step applies a message to the model and returns the expected outcome:
// "applied", "noop" or "rejected:<reason>".
func (m *model) step(kind, id, tier, version string) string {
	tier = canonical(tier)
	if tier != "premium" && tier != "advanced" && tier != "basic" {
		return "rejected:unknown_tier"
	}
	switch kind {
	case "onboarding":
		if t, ok := m.tierOf[id]; ok {
			if t != tier {
				return "rejected:tier_conflict"
			}
			return "noop"
		}
		m.tierOf[id], m.version[id] = tier, version
		m.order[tier] = append(m.order[tier], id)
		return "applied"
	case "offboarding":
		t, ok := m.tierOf[id]
		if !ok {
			return "noop"
		}
		if t != tier {
			return "rejected:tier_conflict"
		}
		delete(m.tierOf, id)
		delete(m.version, id)
		m.order[tier] = slices.DeleteFunc(m.order[tier], func(s string) bool { return s == id })
		return "applied"
	default: // deployment to a whole tier
		changed := false
		for _, t := range m.order[tier] {
			if m.version[t] != version {
				m.version[t], changed = version, true
			}
		}
		if tier == "basic" && m.pool != version {
			m.pool, changed = version, true
		}
		if changed {
			return "applied"
		}
		return "noop"
	}
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
		files["pooled-envs/pool-1.yaml"] = strings.NewReplacer("{ENVIRONMENT_ID}", "pool-1", "{RELEASE_VERSION}", m.pool).
			Replace(template(t, "basic_env_template.yaml"))
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
			for i := 0; i < steps; i++ {
				kind, body := randomMessage(r)
				if last != nil && r.IntN(8) == 0 {
					kind, body = last[0], last[1] // an exact duplicate
				}
				want := expect(m, kind, body)
				last = []string{kind, body}
				msgID := h.send(queueOf[kind], body)
				line := h.outcome(msgID)
				got := map[string]string{
					"tenant change pushed":                                   "applied",
					"already carried out; nothing to push":                   "noop",
					"already carried out; recorded in the ledger":            "noop",
					"already applied by an earlier delivery of this message": "noop",
				}[fmt.Sprint(line["message"])]
				if line["message"] == "message rejected" {
					got = "rejected:" + fmt.Sprint(line["reason"])
					rejected[msgID] = fmt.Sprint(line["reason"])
				}
				if got != want {
					t.Fatalf("step %d: %s %s: outcome %s, model says %s", i, kind, body, got, want)
				}
			}
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

// expect steps the model with a message body (as generated above).
func expect(m *model, kind, body string) string {
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
	return m.step(kind, id, field("tenant_tier"), field("release_version"))
}
