package gitops

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/tenant-worker/tenant-worker/internal/history"
	"github.com/tenant-worker/tenant-worker/internal/ledger"
	"github.com/tenant-worker/tenant-worker/internal/render"
)

// tenantHistory is what the fold of one tenant needs, read once per job:
// its records (or, without any, what an earlier version's records and the
// tree say), and where the tree has it.
type tenantHistory struct {
	id     string
	base   history.Base
	events []history.Event // its own messages
	// stored are its records as read (log and base keys), so that a write
	// changes only what differs; legacy are an earlier version's records
	// of it, deleted once its own are written.
	stored map[string]ledger.Record
	legacy []string
	// legacyAt is the send time of the last change of existence an
	// earlier version recorded (0: none).
	legacyAt int64
	// tree: the tiers whose kustomization lists it, and its state in each
	// tier looked up.
	tree   []string
	states map[string]tenantState
	// dirty: the records must be written (re-anchored, a hold ended).
	dirty bool
}

// history reads tenant id's history. tree, when not nil, lists the tiers
// known to list it (a tier deployment reads every tier's lists once);
// deployed, when set, is the tier a deployment of a whole tier decides
// for: the tenant's records are read as far as they bear on it, and the
// release its file holds is not read (the deployment sets it anyway).
func (p *planner) history(id string, tree []string, deployed string) (*tenantHistory, error) {
	h := &tenantHistory{id: id, stored: map[string]ledger.Record{}, states: map[string]tenantState{}, tree: tree}
	if tree == nil {
		if err := p.lookTree(h); err != nil {
			return nil, err
		}
	}
	own := deployed == "" // the tenant's own message: its records are written
	if p.ledger == nil {
		return h, p.treeBase(h, true)
	}
	prefix := ledger.LogPrefix(id)
	for _, kr := range p.ledger.Scan(prefix) {
		e, err := eventOf(strings.TrimPrefix(kr.Key, prefix), kr.Record)
		if err != nil {
			return nil, fmt.Errorf("%w: the ledger branch: tenant %s: %v", ErrBroken, id, err)
		}
		h.events = append(h.events, e)
		h.stored[kr.Key] = kr.Record
	}
	legacy, existence, err := p.legacy(h, deployed)
	if err != nil {
		return nil, err
	}
	switch rec, ok := p.ledger.Get(ledger.Base(id)); {
	case ok:
		b, err := baseOf(rec)
		if err != nil {
			return nil, fmt.Errorf("%w: the ledger branch: tenant %s: %v", ErrBroken, id, err)
		}
		h.base = b
		h.stored[ledger.Base(id)] = rec
	case len(h.events) > 0:
		// Messages recorded and no base: absent before them all (a base
		// that says so is not written).
	case len(h.legacy) > 0:
		// An earlier version's records: the tree's state at the tenant's
		// last change of existence, and what came after it as events.
		h.base = history.Base{State: p.treeState(h, own), Sent: existence}
	default:
		if err := p.treeBase(h, own); err != nil {
			return nil, err
		}
	}
	// Records an earlier version wrote after this one's (a replica of it
	// during a rolling update) count too: folded in, the ones about a
	// tenant's existence by the tree's word (see anchor).
	for _, e := range legacy {
		// One event of each kind an earlier version recorded: the latest.
		i := slices.IndexFunc(h.events, func(o history.Event) bool { return o.ID == e.ID })
		switch {
		case i < 0:
			h.events = append(h.events, e)
		case e.Sent > h.events[i].Sent: // written again since it was read in
			h.events[i] = e
		}
	}
	h.legacyAt = existence
	return h, nil
}

// lookTree finds every tier whose kustomization lists the tenant.
func (p *planner) lookTree(h *tenantHistory) error {
	h.tree = nil
	for _, t := range p.tiers {
		s, err := p.tenantIn(p.r, t, h.id)
		if err != nil {
			return fmt.Errorf("look up tenant %s in tier %s: %w", h.id, t, err)
		}
		h.states[t] = s
		if s.listed {
			h.tree = append(h.tree, t)
		}
	}
	return nil
}

// treeState is where the tree has the tenant: absent, or in its one tier
// at the release its file holds (with release, else and when it cannot
// be read, empty: as the file has it).
func (p *planner) treeState(h *tenantHistory, release bool) history.State {
	if len(h.tree) != 1 {
		return history.Absent
	}
	tier := h.tree[0]
	s := history.State{Present: true, Tier: tier}
	if !release {
		return s
	}
	file, err := p.tenantFile(tier, h.id)
	if err != nil || file == "" {
		return s
	}
	content, err1 := p.r.ReadFile(file)
	tmpl, err2 := p.r.ReadFile(p.TenantTemplate(tier))
	if err1 != nil || err2 != nil {
		return s
	}
	s.Release, _ = render.ReleaseOf(content, tmpl, render.Vars{TenantID: h.id})
	s.Asked = s.Release
	return s
}

// treeBase is the base of a tenant nothing recorded: the tree's, before
// every message; in a tier, a Set at the tier's last deployment stands
// for what that deployment gave it (so that a deployment sent before it,
// arriving late, does not roll it back, while its existence answers to
// every message).
func (p *planner) treeBase(h *tenantHistory, release bool) error {
	s := p.treeState(h, release)
	h.base = history.Base{State: s}
	if !s.Present || p.ledger == nil {
		return nil
	}
	log, err := p.tierLog(s.Tier)
	if err != nil {
		return err
	}
	if n := len(log); n > 0 {
		last := log[n-1]
		// The release its file holds, or, unread, "as the file has it": a
		// deployment sent after it changes it, one sent before does not.
		h.events = append(h.events, history.Event{Sent: last.Sent, ID: last.ID, Kind: history.Set, Tier: s.Tier, Release: s.Release})
	}
	return nil
}

// legacy reads an earlier version's records of the tenant (before the
// tenants' histories: its existence, its release in each tier, held
// onboardings and deployments) as events, and the send time of its last
// change of existence; h.legacy lists the keys read, which are deleted
// once the tenant's own records are written. For a deployment of tier
// known, only what bears on the release in that tier is read.
func (p *planner) legacy(h *tenantHistory, known string) ([]history.Event, int64, error) {
	id := h.id
	tiers := p.tiers
	if known != "" {
		tiers = []string{known}
	}
	var events []history.Event
	var existence int64
	if rec, ok := p.ledger.Get(ledger.Tenant(id)); ok {
		h.legacy = append(h.legacy, ledger.Tenant(id))
		existence = rec.MS
	}
	// A release an earlier version recorded is the file's, where the tree
	// has the tenant: an empty release, "as the file has it", unless read.
	tree := p.treeState(h, known == "")
	for _, t := range tiers {
		if rec, ok := p.ledger.Get(ledger.ReleaseIn(t, id)); ok {
			h.legacy = append(h.legacy, ledger.ReleaseIn(t, id))
			switch {
			case rec.Value != "": // a deployment held for the onboarding
				events = append(events, history.Event{Sent: rec.MS, ID: "legacy-deploy-" + t, Kind: history.Deploy, Tier: t, Release: rec.Value})
			case tree.Present && tree.Tier == t:
				events = append(events, history.Event{Sent: rec.MS, ID: "legacy-release-" + t, Kind: history.Set, Tier: t, Release: tree.Release})
			}
		}
		if known != "" {
			continue
		}
		if rec, ok := p.ledger.Get(ledger.HeldIn(t, id)); ok {
			h.legacy = append(h.legacy, ledger.HeldIn(t, id))
			if release, sent, ok := heldOf(rec.Value); ok {
				events = append(events, history.Event{Sent: sent, ID: "legacy-held-" + t, Kind: history.Onboard, Tier: t, Release: release})
			}
		}
	}
	if rec, ok := p.ledger.Get(ledger.Release(id)); ok {
		h.legacy = append(h.legacy, ledger.Release(id))
		if rec.Value == "" && tree.Present {
			events = append(events, history.Event{Sent: rec.MS, ID: "legacy-release", Kind: history.Set, Tier: tree.Tier, Release: tree.Release})
		}
	}
	return events, existence, p.ledger.Err()
}

// heldOf reads the value of an earlier version's held onboarding: its
// release and send time (Unix ms).
func heldOf(value string) (release string, sent int64, ok bool) {
	release, ms, ok := strings.Cut(value, ",")
	_, err := fmt.Sscan(ms, &sent)
	return release, sent, ok && err == nil && release != ""
}

// tierLog is the deployments of tier recorded, in send order, read once
// per plan; an earlier version's last deployment (Tier) among them.
func (p *planner) tierLog(tier string) ([]history.Event, error) {
	if log, ok := p.tierLogs[tier]; ok || p.ledger == nil {
		return log, nil
	}
	var log []history.Event
	prefix := ledger.TierLogPrefix(tier)
	for _, kr := range p.ledger.Scan(prefix) {
		log = append(log, history.Event{Sent: kr.MS, ID: strings.TrimPrefix(kr.Key, prefix), Kind: history.TierDeploy, Tier: tier, Release: kr.Value})
	}
	if rec, ok := p.ledger.Get(ledger.Tier(tier)); ok && rec.Value != "" {
		log = append(log, history.Event{Sent: rec.MS, ID: "legacy-tier", Kind: history.TierDeploy, Tier: tier, Release: rec.Value})
	}
	slices.SortFunc(log, history.Compare)
	if p.tierLogs == nil {
		p.tierLogs = map[string][]history.Event{}
	}
	p.tierLogs[tier] = log
	return log, p.ledger.Err()
}

// inputs are the events h folds: its own, and the deployments of every
// tier it names (with extra, a deployment being decided).
func (p *planner) inputs(h *tenantHistory, extra ...history.Event) []history.Event {
	tiers := map[string]bool{}
	if h.base.Present {
		tiers[h.base.Tier] = true
	}
	for _, e := range h.events {
		tiers[e.Tier] = true
	}
	for _, t := range h.tree {
		tiers[t] = true
	}
	all := slices.Clone(h.events)
	for _, t := range slices.Sorted(maps.Keys(tiers)) {
		log, _ := p.tierLog(t) // read once, errors are the ledger's Err
		all = append(all, log...)
	}
	return append(all, extra...)
}

// fold is h's state and steps, with extra events.
func (p *planner) fold(h *tenantHistory, extra ...history.Event) (history.State, []history.Step) {
	return history.Fold(h.base, p.inputs(h, extra...))
}

// tenantEvent reports whether e is one of the tenant's own (not a tier's).
func tenantEvent(e history.Event) bool { return e.Kind != history.TierDeploy }

// anchor makes the tree's word the tenant's base when the tree does not
// have it where its records say (an edit by hand): the edit counts as made
// after every message recorded, which are folded into the base. A held
// message among them can no longer take effect: its hold ends. With
// release, the release its file holds counts too (read only for the
// tenant's own message: a tier's deployment sets it anyway).
func (p *planner) anchor(h *tenantHistory, release bool) {
	s, steps := p.fold(h)
	tree := p.treeState(h, false)
	if s.Present == tree.Present && (!s.Present || s.Tier == tree.Tier) {
		if !release || !s.Present || s.Release == "" {
			return
		}
		// With the release its file holds: a file set back by hand.
		if tree = p.treeState(h, true); tree.Release == "" || tree.Release == s.Release {
			return
		}
	} else {
		tree = p.treeState(h, true)
	}
	last := history.Event{Sent: h.base.Sent, ID: h.base.ID}
	if h.legacyAt > last.Sent {
		last = history.Event{Sent: h.legacyAt}
	}
	for _, st := range steps {
		if history.Compare(st.Event, last) > 0 {
			last = st.Event
		}
		if tenantEvent(st.Event) && st.Outcome == history.Held {
			p.report(h.id, st, history.Rejected)
		}
	}
	h.base = history.Base{State: tree, Sent: last.Sent, ID: last.ID}
	h.events = nil
	h.dirty = true
	p.notes = append(p.notes, fmt.Sprintf("Tenant %s was %s in the tree, not %s as its messages leave it "+
		"(an edit by hand?): the tree's word is taken as the latest", h.id, describe(tree), describe(s)))
}

// expire ends the holds that have run out: those messages are rejected
// for good, each reported (but except, the message being decided, which
// is refused instead).
func (p *planner) expire(h *tenantHistory, except string) {
	_, steps := p.fold(h)
	for _, st := range steps {
		if !tenantEvent(st.Event) || st.Outcome != history.Held || !p.holdEnded(st.Sent) || st.ID == except {
			continue
		}
		for i := range h.events {
			if slot(h.events[i]) == slot(st.Event) {
				h.events[i].Rejected = true
			}
		}
		h.dirty = true
		p.report(h.id, st, history.Rejected)
	}
}

// holdEnded reports whether a message sent at sent can be held no longer.
func (p *planner) holdEnded(sent int64) bool {
	return p.ledger == nil || sent+p.hold.Milliseconds() <= p.now
}

// record writes h's records as they now are: its events of the retention
// period (the older ones folded into its base), its base, and an index
// entry for each held message; an earlier version's records of it go.
func (p *planner) record(h *tenantHistory) {
	if p.ledger == nil {
		return
	}
	_, steps := p.fold(h)
	held := map[string]bool{} // by slot
	for _, st := range steps {
		if tenantEvent(st.Event) && st.Outcome == history.Held {
			held[slot(st.Event)] = true
		}
	}
	base, rest := h.base, p.inputs(h)
	if p.retention > 0 {
		base, rest = history.Compact(h.base, rest, p.now-p.retention.Milliseconds())
	}
	want := map[string]ledger.Record{}
	if base != (history.Base{}) {
		// An absent tenant before every message needs no record: the
		// empty ledger says as much.
		want[ledger.Base(h.id)] = baseRecord(base)
	}
	for _, e := range rest {
		if tenantEvent(e) {
			want[ledger.Log(h.id, slot(e))] = ledger.Record{MS: e.Sent, Value: eventValue(e)}
		}
	}
	for k, r := range want {
		if old, ok := h.stored[k]; !ok || old != r {
			p.ledger.Set(k, r.MS, r.Value)
		}
	}
	for k := range h.stored {
		if _, ok := want[k]; !ok {
			p.ledger.Delete(k)
		}
	}
	for _, k := range h.legacy {
		p.ledger.Delete(k)
	}
	// The holds' index: one entry for each message held now and kept, and
	// none left behind.
	slots := map[string]bool{}
	for k := range want {
		if sl, ok := strings.CutPrefix(k, ledger.LogPrefix(h.id)); ok {
			slots[sl] = true
		}
	}
	indexed := map[string]bool{}
	for _, kr := range p.ledger.Scan(ledger.HoldsOf(h.id)) {
		sl := strings.TrimPrefix(kr.Key, ledger.HoldsOf(h.id))
		indexed[sl] = true
		if !held[sl] || !slots[sl] {
			p.ledger.Delete(kr.Key)
		}
	}
	for sl := range held {
		if slots[sl] && !indexed[sl] {
			r := want[ledger.Log(h.id, sl)]
			p.ledger.Set(ledger.Hold(h.id, sl), r.MS, "")
		}
	}
	h.stored = want
	h.legacy = nil
	h.dirty = false
}

// describe is a state in words.
func describe(s history.State) string {
	switch {
	case !s.Present:
		return "absent"
	case s.Release == "":
		return "in tier " + s.Tier
	}
	return "in tier " + s.Tier + " at " + s.Release
}

// reach edits the tree from where before has tenant id to where after
// has it, and says what that does (for the intent check).
func (p *planner) reach(h *tenantHistory, before, after history.State) error {
	id := h.id
	if before.Same(after) {
		return nil
	}
	moved := before.Present && (!after.Present || after.Tier != before.Tier)
	if moved {
		if err := p.remove(before.Tier, id); err != nil {
			return err
		}
	}
	if after.Present && (!before.Present || moved) {
		release := after.Release
		if release == "" {
			release = after.Asked
		}
		return p.add(after.Tier, id, release)
	}
	if !after.Present || after.Release == "" || after.Release == before.Release {
		return nil
	}
	file, err := p.tenantFile(after.Tier, id)
	if err != nil {
		return fmt.Errorf("look up tenant %s in tier %s: %w", id, after.Tier, err)
	}
	if file == "" {
		// Listed without its file: written again whole.
		return p.add(after.Tier, id, after.Release)
	}
	tmplName := p.TenantTemplate(after.Tier)
	tmpl, err := p.r.ReadFile(tmplName)
	if err != nil {
		return fmt.Errorf("read template: %w", err)
	}
	p.effect(deployment(after.Tier, id, after.Release))
	return p.rerender(file, tmplName, tmpl, render.Vars{TenantID: id, ReleaseVersion: after.Release}, false)
}

// remove takes tenant id out of tier: its file and its entry.
func (p *planner) remove(tier, id string) error {
	state, err := p.tenantIn(p.r, tier, id)
	if err != nil {
		return err
	}
	p.effect(offboarding(tier, id))
	if state.file {
		p.files[path.Join(state.dir, id+".yaml")] = nil
	}
	if state.listed {
		return p.editKustomization(tier, state.dir, id+".yaml", removeEntry)
	}
	return nil
}
