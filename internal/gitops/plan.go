package gitops

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/kustomization"
	"github.com/tenant-worker/tenant-worker/internal/ledger"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/internal/render"
)

// ErrBroken marks a fault of the repository itself: a template that does
// not render, a branch that does not build. No message can succeed until
// someone fixes it, so messages are retried, never rejected for it.
var ErrBroken = errors.New("the repository needs a fix")

// IsBroken reports whether err is a fault of the repository.
func IsBroken(err error) bool { return errors.Is(err, ErrBroken) }

// Change is what a request does to the repository.
type Change struct {
	// Files maps a path to its new content; a nil value deletes the file.
	// An empty map means the request is already carried out.
	Files map[string][]byte
	// Message is the commit message, in the reference platform's wording.
	Message string
	// Duplicate: the message was applied already (its id is in the ledger).
	Duplicate bool
	// Stale: the message was sent before the last change applied to every
	// tenant or pooled environment it names; it changes nothing.
	Stale bool
	// Recorded: the change only records the message in the ledger (what it
	// asks for is in place already, and it is newer than what was).
	Recorded bool
}

// Empty reports whether the change is a no-op.
func (c Change) Empty() bool { return len(c.Files) == 0 }

// Paths lists the changed paths, sorted.
func (c Change) Paths() []string {
	paths := make([]string, 0, len(c.Files))
	for p := range c.Files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths
}

// Stamp is what the ledger needs of the message a request came from.
type Stamp struct {
	MessageID string
	// Sent is SQS's SentTimestamp; zero keeps no ledger (a dry run of a
	// request that came from no queue).
	Sent time.Time
	// Now and Retention bound what the ledger keeps: nothing older than the
	// queues' retention period, which no message can still be.
	Now       time.Time
	Retention time.Duration
}

// pruneSlack lets ledger records outlive the retention period by a day, so
// the files are pruned once a day rather than edited at both ends by every
// commit.
const pruneSlack = 24 * time.Hour

// Plan computes the change that carries out req on the snapshot r, without
// a ledger. Errors caused by the request are reject.Error; others are
// problems reading r.
func (l Layout) Plan(r Reader, req message.Request) (Change, error) {
	return l.PlanAt(r, req, Stamp{})
}

// PlanAt is Plan for a message stamped st: latest send time wins, per
// tenant and pooled environment. A message already applied is a Duplicate;
// one sent before the last change applied to what it names changes nothing
// of it (Stale when that is all it names); otherwise its change includes
// the ledger's record of it, even when nothing else changes (Recorded).
func (l Layout) PlanAt(r Reader, req message.Request, st Stamp) (Change, error) {
	tiers, err := l.Tiers(r)
	if err != nil {
		return Change{}, fmt.Errorf("list tiers: %w", err)
	}
	if !slices.Contains(tiers, req.Tier) {
		return Change{}, reject.Errorf(reject.UnknownTier, "tier %q does not exist (tiers: %s)",
			req.Tier, strings.Join(tiers, ", "))
	}
	p := planner{Layout: l, r: r, tiers: tiers, files: map[string][]byte{}}
	if !st.Sent.IsZero() {
		if p.ledger, err = l.readLedger(r); err != nil {
			return Change{}, err
		}
		if st.MessageID != "" && p.ledger.Seen(st.MessageID) {
			return Change{Duplicate: true}, nil
		}
		p.sent = st.Sent.UnixMilli()
	}
	switch req.Kind {
	case message.Onboarding:
		err = p.onboard(req)
	case message.Offboarding:
		err = p.offboard(req)
	case message.Deployment:
		err = p.deploy(req)
	default:
		err = fmt.Errorf("unknown request kind %q", req.Kind)
	}
	if err != nil {
		return Change{}, err
	}
	if p.ledger == nil {
		return Change{Files: p.files, Message: p.message}, nil
	}
	if p.touched == 0 && p.stale > 0 {
		return Change{Stale: true, Message: p.message}, nil
	}
	changed := len(p.files) > 0
	if st.MessageID != "" {
		p.ledger.Note(st.MessageID, p.sent)
	}
	if st.Retention > 0 {
		p.ledger.Prune(st.Now.Add(-st.Retention).UnixMilli(), pruneSlack.Milliseconds())
	}
	if err := p.writeLedger(); err != nil {
		return Change{}, err
	}
	c := Change{Files: p.files, Message: p.message}
	if !changed && len(p.files) > 0 {
		c.Recorded, c.Message = true, "Already in place: "+p.message
	}
	return c, nil
}

// LedgerFiles are the ledger's paths in the repository.
func (l Layout) LedgerFiles() (targets, messages string) {
	return path.Join(l.Root, ledger.TargetsFile), path.Join(l.Root, ledger.MessagesFile)
}

func (l Layout) readLedger(r Reader) (*ledger.Ledger, error) {
	tp, mp := l.LedgerFiles()
	var files [2][]byte
	for i, name := range []string{tp, mp} {
		b, err := r.ReadFile(name)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		files[i] = b
	}
	led, err := ledger.Parse(files[0], files[1])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBroken, err)
	}
	return led, nil
}

// writeLedger puts the ledger's files in the change where they differ.
func (p *planner) writeLedger() error {
	tp, mp := p.LedgerFiles()
	t, m := p.ledger.Files()
	for _, f := range []struct {
		name    string
		content []byte
	}{{tp, t}, {mp, m}} {
		cur, err := p.r.ReadFile(f.name)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("read %s: %w", f.name, err)
		}
		if !bytes.Equal(cur, f.content) {
			p.files[f.name] = f.content
		}
	}
	return nil
}

// release is the release a new tenant gets: the message's own, or that of
// a deployment of its tier sent after the message and applied already (in
// send order, that deployment would have found the tenant and moved it).
func (p *planner) release(req message.Request) string {
	if p.ledger == nil {
		return req.ReleaseVersion
	}
	p.ledger.Touch(ledger.Release(req.TenantID), p.sent)
	if tier, ok := p.ledger.Get(ledger.Tier(req.Tier)); ok && tier.MS > p.sent && tier.Value != "" {
		p.ledger.Touch(ledger.Release(req.TenantID), tier.MS)
		return tier.Value
	}
	return req.ReleaseVersion
}

// fresh reports whether the message may change target: it is not older
// than the last change applied to it. A fresh target is recorded.
func (p *planner) fresh(target string) bool {
	if p.ledger == nil {
		return true
	}
	if p.ledger.Stale(target, p.sent) {
		p.stale++
		return false
	}
	p.ledger.Touch(target, p.sent)
	p.touched++
	return true
}

// freshOr is fresh for an item that may have no record of its own (a
// tenant or pooled environment added by hand): it then takes the record of
// what it belongs to (its tier's last deployment), so a late deployment does
// not roll it back either.
func (p *planner) freshOr(target, owner string) bool {
	if p.ledger != nil {
		if _, ok := p.ledger.Get(target); !ok && p.ledger.Stale(owner, p.sent) {
			p.stale++
			return false
		}
	}
	return p.fresh(target)
}

type planner struct {
	Layout
	r       Reader
	tiers   []string
	files   map[string][]byte
	message string
	// ledger is nil when the request has no send time.
	ledger         *ledger.Ledger
	sent           int64 // Unix ms
	stale, touched int   // targets the message is too old for, and fresh ones
}

// otherTier returns a tier other than tier that holds the tenant, if any.
func (p *planner) otherTier(tier, id string) (string, error) {
	for _, t := range p.tiers {
		if t == tier {
			continue
		}
		s, err := p.tenantIn(p.r, t, id)
		if err != nil {
			return "", fmt.Errorf("look up tenant %s in tier %s: %w", id, t, err)
		}
		if s.present() {
			return t, nil
		}
	}
	return "", nil
}

func (p *planner) checkNotPooledEnv(id string) error {
	envs, err := p.PooledEnvs(p.r)
	if err != nil {
		return fmt.Errorf("list pooled environments: %w", err)
	}
	if slices.Contains(envs, id) {
		return reject.Errorf(reject.ReservedTenant, "tenant_id %q is the name of a pooled environment", id)
	}
	return nil
}

func (p *planner) onboard(req message.Request) error {
	p.message = fmt.Sprintf("Adding new tenant %s in tier %s", req.TenantID, req.Tier)
	if err := p.checkNotPooledEnv(req.TenantID); err != nil {
		return err
	}
	if !p.fresh(ledger.Tenant(req.TenantID)) {
		return nil
	}
	other, err := p.otherTier(req.Tier, req.TenantID)
	if err != nil {
		return err
	}
	if other != "" {
		return reject.Errorf(reject.TierConflict, "tenant %s already exists in tier %s, not %s",
			req.TenantID, other, req.Tier)
	}
	state, err := p.tenantIn(p.r, req.Tier, req.TenantID)
	if err != nil {
		return err
	}
	// An existing tenant file is left alone: it may carry a newer release or
	// image tags set by Flux, which a late duplicate message must not undo.
	if !state.file {
		tmpl, err := p.r.ReadFile(p.TenantTemplate(req.Tier))
		if err != nil {
			return fmt.Errorf("read template: %w", err)
		}
		release := p.release(req)
		out, err := render.Render(tmpl, render.Vars{TenantID: req.TenantID, ReleaseVersion: release})
		if err != nil {
			return fmt.Errorf("%w: render %s: %v", ErrBroken, p.TenantTemplate(req.Tier), err)
		}
		if err := p.checkCollisions(req.TenantID, out); err != nil {
			return err
		}
		p.files[p.TenantFile(req.Tier, req.TenantID)] = out
	}
	if !state.listed {
		return p.editKustomization(req.Tier, req.TenantID, kustomization.Add)
	}
	return nil
}

func (p *planner) offboard(req message.Request) error {
	p.message = fmt.Sprintf("Removing tenant %s in tier %s", req.TenantID, req.Tier)
	if !p.fresh(ledger.Tenant(req.TenantID)) {
		return nil
	}
	state, err := p.tenantIn(p.r, req.Tier, req.TenantID)
	if err != nil {
		return err
	}
	if !state.present() {
		other, err := p.otherTier(req.Tier, req.TenantID)
		if err != nil {
			return err
		}
		if other != "" {
			return reject.Errorf(reject.TierConflict, "tenant %s is in tier %s, not %s: nothing removed",
				req.TenantID, other, req.Tier)
		}
		return nil
	}
	if state.file {
		p.files[p.TenantFile(req.Tier, req.TenantID)] = nil
	}
	if state.listed {
		return p.editKustomization(req.Tier, req.TenantID, kustomization.Remove)
	}
	return nil
}

func (p *planner) editKustomization(tier, id string, edit func([]byte, string) ([]byte, bool, error)) error {
	name := p.TierKustomization(tier)
	content, err := p.r.ReadFile(name)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	out, changed, err := edit(content, id+".yaml")
	if err != nil {
		if kustomization.IsForm(err) {
			return formError(name, err)
		}
		return fmt.Errorf("edit %s: %w", name, err)
	}
	if changed {
		p.files[name] = out
	}
	return nil
}

func (p *planner) deploy(req message.Request) error {
	ids, err := p.TenantFiles(p.r, req.Tier)
	if err != nil {
		return fmt.Errorf("list tenants of tier %s: %w", req.Tier, err)
	}
	if req.TenantID != "" {
		p.message = fmt.Sprintf("Deploying to tenant %s in tier %s, version %s", req.TenantID, req.Tier, req.ReleaseVersion)
		// Staleness first: a deployment sent before the tenant was last
		// offboarded, moved or deployed changes nothing of it, whether or
		// not the tenant is still there.
		if p.ledger != nil && (p.ledger.Stale(ledger.Tenant(req.TenantID), p.sent) || p.ledger.Stale(ledger.Release(req.TenantID), p.sent)) {
			p.stale++
			return nil
		}
		if !slices.Contains(ids, req.TenantID) {
			other, err := p.otherTier(req.Tier, req.TenantID)
			if err != nil {
				return err
			}
			if other != "" {
				return reject.Errorf(reject.TierConflict, "tenant %s is in tier %s, not %s", req.TenantID, other, req.Tier)
			}
			return reject.Errorf(reject.TenantNotFound, "tenant %s does not exist in tier %s", req.TenantID, req.Tier)
		}
		ids = []string{req.TenantID}
	} else {
		p.message = fmt.Sprintf("Deploying to %s tenants, version %s", req.Tier, req.ReleaseVersion)
	}

	tmplName := p.TenantTemplate(req.Tier)
	tmpl, err := p.r.ReadFile(tmplName)
	if err != nil {
		return fmt.Errorf("read template: %w", err)
	}
	for _, id := range ids {
		if message.ValidateTenantID(id) != nil {
			continue // not a tenant file this worker wrote; leave it alone
		}
		if !p.freshOr(ledger.Release(id), ledger.Tier(req.Tier)) {
			continue // given its release by a message sent after this one
		}
		if err := p.rerender(p.TenantFile(req.Tier, id), tmplName, tmpl,
			render.Vars{TenantID: id, ReleaseVersion: req.ReleaseVersion}); err != nil {
			return err
		}
	}
	if req.TenantID != "" {
		return nil
	}
	if p.ledger != nil {
		if p.ledger.Stale(ledger.Tier(req.Tier), p.sent) {
			p.stale++
		} else {
			p.ledger.Set(ledger.Tier(req.Tier), p.sent, req.ReleaseVersion)
			p.touched++
		}
	}

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
		if !p.freshOr(ledger.Env(env), ledger.Tier(req.Tier)) {
			continue
		}
		if err := p.rerender(path.Join(p.PooledEnvsDir(), env+".yaml"), envName, envTmpl,
			render.Vars{EnvironmentID: env, ReleaseVersion: req.ReleaseVersion}); err != nil {
			return err
		}
	}
	return nil
}

// rerender sets the release of a file rendered from tmpl: only the values
// the template sets from {RELEASE_VERSION} change; hand edits, fields the
// template gained since, and the values Flux image automation owns stay.
func (p *planner) rerender(name, tmplName string, tmpl []byte, v render.Vars) error {
	current, err := p.r.ReadFile(name)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	out, err := render.SetRelease(current, tmpl, v)
	if err != nil {
		return fmt.Errorf("%w: set the release of %s from %s: %v", ErrBroken, name, tmplName, err)
	}
	if !bytes.Equal(out, current) {
		p.files[name] = out
	}
	return nil
}
