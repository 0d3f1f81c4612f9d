package gitops

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/history"
	"github.com/tenant-worker/tenant-worker/internal/kustomization"
	"github.com/tenant-worker/tenant-worker/internal/ledger"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/internal/render"
)

// removeEntry takes an entry out of a kustomization.
var removeEntry = kustomization.Remove

// wording is the reference platform's commit subject for req.
func wording(req message.Request) string {
	switch {
	case req.Kind == message.Onboarding:
		return fmt.Sprintf("Adding new tenant %s in tier %s", req.TenantID, req.Tier)
	case req.Kind == message.Offboarding:
		return fmt.Sprintf("Removing tenant %s in tier %s", req.TenantID, req.Tier)
	case req.TenantID != "":
		return fmt.Sprintf("Deploying to tenant %s in tier %s, version %s", req.TenantID, req.Tier, req.ReleaseVersion)
	}
	return fmt.Sprintf("Deploying to %s tenants, version %s", req.Tier, req.ReleaseVersion)
}

// eventFor is the history event of a message about a tenant.
func eventFor(req message.Request, sent int64, key string) history.Event {
	kind := map[message.Kind]history.Kind{message.Onboarding: history.Onboard, message.Offboarding: history.Offboard,
		message.Deployment: history.Deploy}[req.Kind]
	return history.Event{Sent: sent, ID: key, Kind: kind, Tier: req.Tier, Release: req.ReleaseVersion}
}

// requestOf is the request an event of tenant id stands for.
func requestOf(id string, e history.Event) message.Request {
	switch e.Kind {
	case history.Onboard:
		return onboarding(e.Tier, id, e.Release)
	case history.Offboard:
		return offboarding(e.Tier, id)
	}
	return deployment(e.Tier, id, e.Release)
}

func onboarding(tier, id, release string) message.Request {
	return message.Request{Kind: message.Onboarding, TenantID: id, Tier: tier, ReleaseVersion: release}
}

func offboarding(tier, id string) message.Request {
	return message.Request{Kind: message.Offboarding, TenantID: id, Tier: tier}
}

func deployment(tier, id, release string) message.Request {
	return message.Request{Kind: message.Deployment, TenantID: id, Tier: tier, ReleaseVersion: release}
}

// effect adds what the change's files do to its effects.
func (p *planner) effect(req message.Request) { p.effects = append(p.effects, req) }

// report records that the outcome of st, a message of tenant id, is now
// outcome, and says so in the commit message.
func (p *planner) report(id string, st history.Step, outcome history.Outcome) {
	if st.Kind == history.Set {
		return // not a message: a release an earlier version recorded
	}
	req := requestOf(id, st.Event)
	r := Resolution{MessageID: st.ID, Sent: time.UnixMilli(st.Sent).UTC(), Request: req, Outcome: string(outcome)}
	if outcome.Conflict() {
		r.Reason = st.Reason
	}
	if !strings.HasPrefix(st.ID, "legacy-") {
		// An earlier version kept no id of a message it held: the commit
		// says what became of it, no result event can.
		p.resolved = append(p.resolved, r)
	}
	what := map[history.Outcome]string{
		history.Applied:   "now takes effect",
		history.Unchanged: "is now in place",
		history.Held:      "is now held (" + string(st.Reason) + "), a message sent before it having arrived",
		history.Rejected:  "is rejected (" + string(st.Reason) + "): its hold ended",
	}[outcome]
	p.notes = append(p.notes, fmt.Sprintf("%s (message %s, sent %s) %s.", wording(req), st.ID,
		r.Sent.Format(time.RFC3339Nano), what))
}

// tenantMessage decides an onboarding, an offboarding or a deployment to
// one tenant: the tenant's messages, this one among them, folded in send
// order, and the tree edited from where it has the tenant to where the
// fold puts it.
func (p *planner) tenantMessage(req message.Request, key string) error {
	id := req.TenantID
	p.message = wording(req)
	ev := eventFor(req, p.sent, key)
	h, err := p.history(id, nil, "")
	if err != nil {
		return err
	}
	if p.ledger != nil && coveredBy(h.base, ev) {
		// Sent before what the ledger folded away: no message of then can
		// still be delivered, but a hand-written ledger could say so.
		p.verdict = verdictCovered
		return nil
	}
	tierErr := p.checkTier(req.Tier)
	if req.Kind == message.Onboarding && tierErr == nil {
		if err := p.checkNotPooledEnv(id); err != nil {
			return err
		}
	}
	if len(h.tree) > 1 {
		return reject.Errorf(reject.TierConflict, "tenant %s is in tiers %s at once (an edit by hand): nothing is "+
			"changed until all but one of them are removed by hand; then send the message again",
			id, strings.Join(h.tree, " and "))
	}
	p.anchor(h, true)
	p.expire(h, "")
	before, was := p.fold(h)
	h.events = append(h.events, ev)
	// A message the new one puts in conflict whose hold is over is
	// rejected now, as it would be arriving in conflict.
	p.expire(h, ev.ID)
	after, steps := p.fold(h)
	for _, st := range steps {
		if st.ID != ev.ID || !tenantEvent(st.Event) {
			continue
		}
		switch {
		case tierErr != nil && (st.Outcome == history.Held || !before.Same(after)):
			return tierErr // it would act on a tier the repository no longer has
		case tierErr != nil:
			// Undone by messages sent after it (or in place), in a tier
			// gone since: nothing to record.
			p.verdict = verdictCovered
			return nil
		case st.Outcome.Conflict() && p.holdEnded(ev.Sent):
			return reject.Errorf(st.Reason, "%s", p.conflict(req, before))
		case st.Outcome == history.Held:
			p.verdict = verdictHeld
			p.message = held(req, st.After)
		case before.Same(after) && !asks(req, after):
			// What it asks is undone by messages sent after it.
			p.verdict = verdictStale
		}
	}
	p.compare(h, was, steps, ev.ID)
	if err := p.reach(h, before, after); err != nil {
		return err
	}
	p.record(h)
	return nil
}

// asks reports whether s is what req asks of its tenant.
func asks(req message.Request, s history.State) bool {
	switch req.Kind {
	case message.Onboarding:
		return s.Present && s.Tier == req.Tier
	case message.Offboarding:
		return !s.Present || s.Tier != req.Tier
	}
	return s.Present && s.Tier == req.Tier && s.Release == req.ReleaseVersion
}

// held is the commit message of req held where its tenant is, at.
func held(req message.Request, at history.State) string {
	id, tier := req.TenantID, req.Tier
	switch {
	case req.Kind == message.Onboarding:
		return fmt.Sprintf("Held: tenant %s is in tier %s; it moves to tier %s when an offboarding from %s sent "+
			"before this onboarding arrives", id, at.Tier, tier, at.Tier)
	case req.Kind == message.Offboarding:
		return fmt.Sprintf("Held: tenant %s is in tier %s, not %s; the offboarding waits for the onboarding to %s "+
			"sent before it", id, at.Tier, tier, tier)
	case !at.Present:
		return fmt.Sprintf("Held: tenant %s is not in tier %s; an onboarding of it to %s sent before "+
			"this deployment takes release %s", id, tier, tier, req.ReleaseVersion)
	}
	return fmt.Sprintf("Held: tenant %s is in tier %s, not %s; the deployment waits for the onboarding to %s "+
		"sent before it", id, at.Tier, tier, tier)
}

// coveredBy reports whether e is at or before b: folded away already.
func coveredBy(b history.Base, e history.Event) bool {
	return e.Sent < b.Sent || e.Sent == b.Sent && e.ID <= b.ID
}

// conflict says why req cannot take effect where the tenant is.
func (p *planner) conflict(req message.Request, at history.State) string {
	if !at.Present {
		return fmt.Sprintf("tenant %s does not exist in tier %s", req.TenantID, req.Tier)
	}
	return fmt.Sprintf("tenant %s is in tier %s, not %s", req.TenantID, at.Tier, req.Tier)
}

// compare reports the messages, other than the one being decided, whose
// outcome differs between the fold before it arrived and after.
func (p *planner) compare(h *tenantHistory, was, now []history.Step, own string) {
	old := map[string]history.Outcome{}
	for _, st := range was {
		if tenantEvent(st.Event) {
			old[st.ID] = st.Outcome
		}
	}
	for _, st := range now {
		o, ok := old[st.ID]
		if !ok || st.ID == own || !tenantEvent(st.Event) || o == st.Outcome {
			continue
		}
		switch {
		case o == history.Held:
			p.report(h.id, st, st.Outcome)
		case st.Outcome == history.Held:
			p.report(h.id, st, history.Held)
		case o == history.Applied || st.Outcome == history.Applied:
			// A repeat that turns out to be the first, or the other way
			// round: the commit says so; the message's result stands.
			p.notes = append(p.notes, fmt.Sprintf("%s (message %s) %s in send order, not %s.",
				wording(requestOf(h.id, st.Event)), st.ID, st.Outcome, o))
		}
	}
}

// deployTier decides a deployment of a whole tier: each tenant the tree
// has in the tier folded with it among the tier's deployments, and its
// file given the release the fold ends at; the tier's pooled environments
// take it unless a deployment sent later did.
func (p *planner) deployTier(req message.Request, key string) error {
	p.message = wording(req)
	ev := history.Event{Sent: p.sent, ID: key, Kind: history.TierDeploy, Tier: req.Tier, Release: req.ReleaseVersion}
	log, err := p.tierLog(req.Tier)
	if err != nil {
		return err
	}
	superseded := len(log) > 0 && history.Compare(ev, log[len(log)-1]) < 0
	if err := p.checkTier(req.Tier); err != nil {
		if superseded {
			p.verdict = verdictCovered // a later deployment ran while it existed
			return nil
		}
		return err
	}
	tenants, err := p.Tenants(p.r, req.Tier)
	if err != nil {
		return fmt.Errorf("list tenants of tier %s: %w", req.Tier, err)
	}
	// Every tier's lists, read once: a tenant listed in two tiers (an edit
	// by hand) is left alone.
	listedIn := map[string][]string{}
	for _, tier := range p.tiers {
		ids, err := p.Listed(p.r, tier)
		if err != nil {
			return fmt.Errorf("list tenants of tier %s: %w", tier, err)
		}
		for id := range ids {
			listedIn[id] = append(listedIn[id], tier)
		}
	}
	tmplName := p.TenantTemplate(req.Tier)
	tmpl, err := p.r.ReadFile(tmplName)
	if err != nil {
		return fmt.Errorf("read template: %w", err)
	}
	for _, t := range tenants {
		tree := listedIn[t.ID]
		if message.ValidateTenantID(t.ID) != nil || !slices.Contains(tree, req.Tier) {
			continue // not a tenant file this worker wrote, or one nobody applies: left alone
		}
		if len(tree) > 1 {
			p.notes = append(p.notes, fmt.Sprintf("Tenant %s is in tiers %s at once (an edit by hand): left as it is.",
				t.ID, strings.Join(tree, " and ")))
			continue
		}
		h, err := p.history(t.ID, tree, req.Tier)
		if err != nil {
			return err
		}
		p.anchor(h, false)
		p.expire(h, "")
		before, _ := p.fold(h)
		after, _ := p.fold(h, ev)
		if !before.Same(after) && after.Present && after.Tier == req.Tier {
			if err := p.rerender(t.File, tmplName, tmpl, render.Vars{TenantID: t.ID, ReleaseVersion: after.Release}, true); err != nil {
				return err
			}
		}
		if h.dirty {
			p.record(h)
		}
	}
	if superseded {
		p.verdict = verdictStale
		if len(p.files) == 0 {
			p.verdict = verdictCovered // changes nothing, now or later: not recorded
			return nil
		}
	}
	p.effect(req)
	p.recordTier(req.Tier, ev)
	return p.deployEnvs(req, superseded)
}

// recordTier adds ev to the tier's deployments; those older than the
// retention go, but the last (what a tenant nothing recorded takes).
func (p *planner) recordTier(tier string, ev history.Event) {
	if p.ledger == nil {
		return
	}
	p.ledger.Set(ledger.TierLog(tier, ev.ID), ev.Sent, ev.Release)
	if p.retention <= 0 {
		return
	}
	log, _ := p.tierLog(tier)
	bound := p.now - p.retention.Milliseconds()
	newest := ev
	for _, e := range log {
		if history.Compare(e, newest) > 0 {
			newest = e
		}
	}
	for _, e := range log {
		switch {
		case e.Sent >= bound || e == newest:
		case e.ID == "legacy-tier":
			p.ledger.Delete(ledger.Tier(tier))
		default:
			p.ledger.Delete(ledger.TierLog(tier, e.ID))
		}
	}
}

// deployEnvs gives the tier's pooled environments the release, each
// unless a deployment sent later gave it its own (one without a record
// takes its tier's last deployment as its record).
func (p *planner) deployEnvs(req message.Request, superseded bool) error {
	envName := p.EnvTemplate(req.Tier)
	envTmpl, err := p.r.ReadFile(envName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // this tier shares no pooled environment
	}
	if err != nil {
		return fmt.Errorf("read template: %w", err)
	}
	envs, err := p.PooledEnvs(p.r)
	if err != nil {
		return fmt.Errorf("list pooled environments: %w", err)
	}
	for _, env := range envs {
		if p.ledger != nil {
			rec, ok := p.ledger.Get(ledger.Env(env))
			if ok && p.sent < rec.MS || !ok && superseded {
				continue
			}
			p.ledger.Touch(ledger.Env(env), p.sent)
		}
		if err := p.rerender(path.Join(p.PooledEnvsDir(), env+".yaml"), envName, envTmpl,
			render.Vars{EnvironmentID: env, ReleaseVersion: req.ReleaseVersion}, true); err != nil {
			return err
		}
	}
	return nil
}

// EndHolds is the request, made by the worker (no message carries it),
// that rejects the held messages whose hold has ended, with a change of
// the ledger alone: each is a Resolution of the change. Its Stamp's Sent
// is the time it is made.
const EndHolds message.Kind = "end-holds"

// endHolds ends every hold that has run out, as the holds' index lists
// them (one group file): each such tenant's history is read and written.
func (p *planner) endHolds() error {
	p.message = "Ending holds"
	due := map[string]bool{}
	for _, kr := range p.ledger.Scan(ledger.HoldPrefix) {
		id, _, ok := strings.Cut(strings.TrimPrefix(kr.Key, ledger.HoldPrefix), "/")
		if ok && p.holdEnded(kr.MS) {
			due[id] = true
		}
	}
	if _, indexed := p.ledger.Get(ledger.EarlierHoldsIndexed); !indexed {
		// Once: the held messages an earlier version recorded are in no
		// index; their tenants are read and written, which indexes them.
		err := p.ledger.Walk(func(k string) {
			if r, ok := p.ledger.Get(k); ok {
				if id, held := ledger.EarlierHold(k, r.Value); held {
					due[id] = true
				}
			}
		})
		if err != nil {
			return fmt.Errorf("%w: the ledger branch: %v", ErrBroken, err)
		}
		p.ledger.Set(ledger.EarlierHoldsIndexed, p.now, "")
		p.message = "Indexing the held messages of earlier versions"
	} else if len(due) == 0 {
		p.verdict = verdictCovered // nothing to write
		return nil
	}
	for _, id := range slices.Sorted(maps.Keys(due)) {
		h, err := p.history(id, nil, "")
		if err != nil {
			return err
		}
		if len(h.tree) > 1 {
			continue // every message about it is refused until a person mends it
		}
		p.anchor(h, true)
		p.expire(h, "")
		p.record(h)
	}
	if n := len(p.resolved); n > 0 {
		p.message = fmt.Sprintf("Rejecting %d held message(s) whose hold ended", n)
	}
	return nil
}
