// Package sendorder makes histories of tenant messages that are valid in
// the order they were sent, orders of their arrival, and the model that
// says where such messages, in send order, leave every tenant: the oracle
// of the tests of arrival order (issue 44). The model is written apart
// from the worker's own fold (internal/history), so that the tests compare
// two readings of the rule, not one with itself.
package sendorder

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/tenant-worker/tenant-worker/internal/message"
)

// Tiers and Releases are what histories use.
var (
	Tiers    = []string{"basic", "advanced", "premium"}
	Releases = []string{"0.0", "1.0", "2.0", "3.0"}
)

// Msg is a message of a history.
type Msg struct {
	ID      string
	Kind    message.Kind
	Tenant  string // empty for a tier's deployment
	Tier    string
	Release string
	Sent    int // seconds after the history's start
}

// Body is the message's body as the platform sends it.
func (o Msg) Body() string {
	switch {
	case o.Kind == message.Onboarding:
		return fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q,"release_version":%q}`, o.Tenant, o.Tier, o.Release)
	case o.Kind == message.Offboarding:
		return fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q}`, o.Tenant, o.Tier)
	case o.Tenant != "":
		return fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q,"release_version":%q}`, o.Tenant, o.Tier, o.Release)
	}
	return fmt.Sprintf(`{"tenant_tier":%q,"release_version":%q}`, o.Tier, o.Release)
}

func (o Msg) String() string {
	switch {
	case o.Kind == message.Onboarding:
		return fmt.Sprintf("on %s %s %s@%d", o.Tenant, o.Tier, o.Release, o.Sent)
	case o.Kind == message.Offboarding:
		return fmt.Sprintf("off %s %s@%d", o.Tenant, o.Tier, o.Sent)
	case o.Tenant != "":
		return fmt.Sprintf("deploy %s %s %s@%d", o.Tenant, o.Tier, o.Release, o.Sent)
	}
	return fmt.Sprintf("deploy-tier %s %s@%d", o.Tier, o.Release, o.Sent)
}

// Where is a tenant in the model.
type Where struct{ Tier, Release string }

// String is "nowhere" or tier@release.
func (w Where) String() string {
	if w.Tier == "" {
		return "nowhere"
	}
	return w.Tier + "@" + w.Release
}

// Tree is where msgs, in send order (send time, then id), leave every
// tenant, and the release of the pooled environments (basic's).
func Tree(msgs []Msg) (map[string]Where, string) {
	tenants, pool, _ := Fold(msgs, nil)
	return tenants, pool
}

// Fold is Tree less the messages rejected, and the messages that do not
// fit where their tenant is (another tier; a deployment to an absent
// tenant), which change nothing: they wait for a message sent before them.
// A message id counts once.
func Fold(msgs []Msg, rejected map[string]bool) (map[string]Where, string, []Msg) {
	sorted := slices.Clone(msgs)
	slices.SortFunc(sorted, func(a, b Msg) int {
		if a.Sent != b.Sent {
			return a.Sent - b.Sent
		}
		return strings.Compare(a.ID, b.ID)
	})
	seen := map[string]bool{}
	tenants, pool := map[string]Where{}, "0.0"
	var misfits []Msg
	for _, m := range sorted {
		if seen[m.ID] || rejected[m.ID] {
			continue
		}
		seen[m.ID] = true
		w := tenants[m.Tenant]
		switch {
		case m.Tenant == "": // a tier's deployment
			for id, w := range tenants {
				if w.Tier == m.Tier {
					tenants[id] = Where{m.Tier, m.Release}
				}
			}
			if m.Tier == "basic" {
				pool = m.Release
			}
		case w.Tier != "" && w.Tier != m.Tier, m.Kind == message.Deployment && w.Tier == "":
			misfits = append(misfits, m)
		case m.Kind == message.Onboarding && w.Tier == "":
			tenants[m.Tenant] = Where{m.Tier, m.Release}
		case m.Kind == message.Offboarding:
			tenants[m.Tenant] = Where{}
		case m.Kind == message.Deployment:
			tenants[m.Tenant] = Where{m.Tier, m.Release}
		}
	}
	return tenants, pool, misfits
}

// Generate is a history of at least n messages about tenants, each
// message valid where the ones sent before it leave its tenant:
// onboardings, offboardings, moves (an offboarding, then an onboarding to
// another tier), per-tenant and tier deployments, repeats under new ids;
// a quarter share their send time with the next. Ids sort in send order
// within a send time.
func Generate(rng *rand.Rand, n int, tenants []string) []Msg {
	var out []Msg
	sent := 1
	add := func(o Msg) {
		o.ID = fmt.Sprintf("m%03d-%04x", len(out), rng.IntN(1<<16))
		o.Sent = sent
		out = append(out, o)
		if rng.IntN(4) > 0 { // else the next one shares its send time
			sent += 1 + rng.IntN(3)
		}
	}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	state := map[string]Where{}
	for len(out) < n {
		id := pick(tenants)
		w := state[id]
		switch r := rng.IntN(10); {
		case r < 2 && w.Tier == "":
			add(Msg{Kind: message.Onboarding, Tenant: id, Tier: pick(Tiers), Release: pick(Releases)})
		case r < 2:
			add(Msg{Kind: message.Offboarding, Tenant: id, Tier: w.Tier})
		case r < 4 && w.Tier != "":
			add(Msg{Kind: message.Offboarding, Tenant: id, Tier: w.Tier})
			others := slices.DeleteFunc(slices.Clone(Tiers), func(t string) bool { return t == w.Tier })
			add(Msg{Kind: message.Onboarding, Tenant: id, Tier: pick(others), Release: pick(Releases)})
		case r < 6 && w.Tier != "":
			add(Msg{Kind: message.Deployment, Tenant: id, Tier: w.Tier, Release: pick(Releases)})
		case r < 8:
			add(Msg{Kind: message.Deployment, Tier: pick(Tiers), Release: pick(Releases)})
		case len(out) > 0: // a repeat under a new id, when it is still valid
			o := out[rng.IntN(len(out))]
			cur := state[o.Tenant]
			if o.Tenant == "" || o.Kind == message.Onboarding && cur.Tier == o.Tier ||
				o.Kind == message.Offboarding && cur.Tier != "" && cur.Tier == o.Tier ||
				o.Kind == message.Deployment && cur.Tier == o.Tier {
				add(o)
			}
		}
		state, _ = Tree(out)
	}
	return out
}

// Shuffled is a random order of arrival of h, with up to two
// redeliveries.
func Shuffled(rng *rand.Rand, h []Msg) []Msg {
	out := slices.Clone(h)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	for range rng.IntN(3) {
		at := rng.IntN(len(out) + 1)
		out = slices.Insert(out, at, out[rng.IntN(len(out))])
	}
	return out
}

// Delivery is a message delivered at a time (seconds after the start).
type Delivery struct {
	Msg
	At int
}

// Delayed delivers each message of h after a random delay of up to 1.5
// retention periods, in the order of those times; one delayed a retention
// period or more is never delivered (SQS dropped it), and an eighth are
// delivered again within their retention.
func Delayed(rng *rand.Rand, h []Msg, retention int) []Delivery {
	var out []Delivery
	for _, o := range h {
		delay := rng.IntN(retention * 3 / 2)
		if delay >= retention {
			continue
		}
		out = append(out, Delivery{o, o.Sent + delay})
		if rng.IntN(8) == 0 {
			out = append(out, Delivery{o, o.Sent + delay + rng.IntN(retention-delay)})
		}
	}
	slices.SortStableFunc(out, func(a, b Delivery) int { return a.At - b.At })
	return out
}
