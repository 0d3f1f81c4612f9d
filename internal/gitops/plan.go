package gitops

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
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
	// Files maps a path of the branch Flux reads to its new content; a nil
	// value deletes the file. An empty map means the request is already
	// carried out.
	Files map[string][]byte
	// Ledger maps a path of the ledger branch to its new content (nil
	// deletes a file or a folder): the records of the message, written with
	// Files in one atomic push. Only a request with a send time has any.
	Ledger map[string][]byte
	// Message is the commit message, in the reference platform's wording.
	Message string
	// ShardKustomizations: the layout the change was planned in gives each
	// shard folder a Kustomization of its own (Layout.ShardKustomizations).
	ShardKustomizations bool
	// Duplicate: the message was applied already (its id is in the ledger).
	Duplicate bool
	// Stale: the message was sent before the last change applied to every
	// tenant or pooled environment it names; it changes nothing.
	Stale bool
	// Recorded: the change only records the message in the ledger (what it
	// asks for is in place already, and it is newer than what was).
	Recorded bool
	// Held: the change only records the message in the ledger, to be
	// carried out by a message sent before it that has not arrived yet (an
	// onboarding to another tier before the offboarding that moves the
	// tenant out, a deployment to a tenant before its onboarding).
	Held bool
	// Also are requests carried out by this change besides the message's
	// own: a held onboarding that the offboarding it waited for completes.
	Also []message.Request
}

// Empty reports whether the change is a no-op: nothing to write on either
// branch.
func (c Change) Empty() bool { return len(c.Files) == 0 && len(c.Ledger) == 0 }

// Paths lists the changed paths of the branch Flux reads, sorted.
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
	// Ledger reads the ledger branch as the change is built on (nil: the
	// branch does not exist yet, an empty ledger).
	Ledger ledger.Reader
	// Sent is SQS's SentTimestamp; zero keeps no ledger (a dry run of a
	// request that came from no queue).
	Sent time.Time
	// Now and Retention bound what the ledger keeps: nothing older than the
	// queues' retention period, which no message can still be.
	Now       time.Time
	Retention time.Duration
}

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
	l, err := l.Of(r)
	if err != nil {
		return Change{}, err
	}
	tiers, err := l.Tiers(r)
	if err != nil {
		return Change{}, fmt.Errorf("list tiers: %w", err)
	}
	p := planner{Layout: l, r: r, tiers: tiers, files: map[string][]byte{}}
	// The duplicate and stale rules come before every check of what exists:
	// a message applied already, or sent before the last change to what it
	// names, is told so even when its tier or tenant is gone since.
	if !st.Sent.IsZero() {
		p.ledger, p.sent = ledger.Open(st.Ledger), st.Sent.UnixMilli()
		if st.MessageID != "" && p.ledger.Seen(st.MessageID, p.sent) {
			if err := p.ledger.Err(); err != nil {
				return Change{}, ledgerError(err)
			}
			return Change{Duplicate: true}, nil
		}
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
	if p.ledger != nil {
		if lerr := p.ledger.Err(); lerr != nil {
			return Change{}, ledgerError(lerr) // decided on records that could not be read
		}
	}
	if err != nil {
		return Change{}, err
	}
	if p.ledger == nil {
		return Change{Files: p.files, Message: p.message, Also: p.also, ShardKustomizations: l.ShardKustomizations}, nil
	}
	if p.touched == 0 && p.stale > 0 {
		return Change{Stale: true, Message: p.message}, nil
	}
	if st.MessageID != "" {
		p.ledger.Note(st.MessageID, p.sent)
	}
	if st.Retention > 0 {
		p.ledger.Prune(st.Now.Add(-st.Retention).UnixMilli())
	}
	if err := p.ledger.Err(); err != nil {
		return Change{}, ledgerError(err)
	}
	c := Change{Files: p.files, Ledger: p.ledger.Changes(), Message: p.message, Also: p.also, ShardKustomizations: l.ShardKustomizations}
	switch {
	case len(c.Files) > 0:
	case p.held:
		c.Recorded, c.Held = true, true
	case len(c.Ledger) > 0:
		c.Recorded, c.Message = true, "Already in place: "+p.message
	}
	return c, nil
}

// ledgerError is a ledger branch that cannot be read: a fault of the
// repository (someone edited it by hand), which no message can get past.
func ledgerError(err error) error {
	return fmt.Errorf("%w: the ledger branch: %v", ErrBroken, err)
}

// release is the release a tenant onboarded into tier by a message sent
// at sent gets: the message's own (asked), or that of a deployment sent
// after it and handled already (in send order, that deployment would have
// found the tenant and moved it): its tier's, or one held for this tenant
// in this tier.
func (p *planner) release(tier, id, asked string, sent int64) string {
	if p.ledger == nil {
		return asked
	}
	release, at := asked, sent
	if rec, ok := p.ledger.Get(ledger.Tier(tier)); ok && rec.MS > at && rec.Value != "" {
		release, at = rec.Value, rec.MS
	}
	key := ledger.ReleaseIn(tier, id)
	if rec, ok := p.ledger.Get(key); ok && rec.MS > at && rec.Value != "" {
		release, at = rec.Value, rec.MS
	}
	// Set, not Touch: the value a held deployment left is used up.
	if rec, ok := p.ledger.Get(key); !ok || at >= rec.MS {
		p.ledger.Set(key, at, "")
	}
	return release
}

// olderRelease reports whether the message was sent before the last
// change to the tenant's release in tier, or before the record of its
// release a version before per-tier records wrote (a repository migrated
// from the in-tree ledger, or a replica of that version still running).
func (p *planner) olderRelease(tier, id string) bool {
	return p.older(ledger.ReleaseIn(tier, id)) || p.olderLegacyRelease(id)
}

// olderLegacyRelease is older for the per-tenant release record a version
// before per-tier records wrote; one with a value is a deployment it held
// for some tier (which tier is not known here), not a release the tenant
// was given, and counts for nothing.
func (p *planner) olderLegacyRelease(id string) bool {
	if p.ledger == nil {
		return false
	}
	rec, ok := p.ledger.Get(ledger.Release(id))
	return ok && rec.Value == "" && p.sent < rec.MS
}

// freshRelease is fresh for the tenant's release in tier; a tenant without
// a record of its own (added by hand) takes its tier's last deployment as
// its record, so a late deployment does not roll it back.
func (p *planner) freshRelease(tier, id string) bool {
	if p.ledger != nil {
		_, own := p.ledger.Get(ledger.ReleaseIn(tier, id))
		rec, legacy := p.ledger.Get(ledger.Release(id))
		legacy = legacy && rec.Value == ""
		if p.olderLegacyRelease(id) || !own && !legacy && p.older(ledger.Tier(tier)) {
			p.stale++
			return false
		}
	}
	return p.fresh(ledger.ReleaseIn(tier, id))
}

// older reports whether the message was sent before the last change
// applied to target; it records nothing.
func (p *planner) older(target string) bool {
	return p.ledger != nil && p.ledger.Stale(target, p.sent)
}

// checkTier refuses a tier that does not exist.
func (p *planner) checkTier(tier string) error {
	if !slices.Contains(p.tiers, tier) {
		return reject.Errorf(reject.UnknownTier, "tier %q does not exist (tiers: %s)",
			tier, strings.Join(p.tiers, ", "))
	}
	return nil
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
	held           bool  // the message is recorded to be carried out later
	also           []message.Request
	// templateObjects are the objects of each template read, by content,
	// rendered for a stand-in name (see renderedFrom).
	templateObjects map[string][]object
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
	if p.older(ledger.Tenant(req.TenantID)) {
		p.stale++
		return nil
	}
	if err := p.checkTier(req.Tier); err != nil {
		return err
	}
	if err := p.checkNotPooledEnv(req.TenantID); err != nil {
		return err
	}
	other, err := p.otherTier(req.Tier, req.TenantID)
	if err != nil {
		return err
	}
	if other != "" {
		if p.ledger == nil {
			return reject.Errorf(reject.TierConflict, "tenant %s already exists in tier %s, not %s",
				req.TenantID, other, req.Tier)
		}
		// Nothing recorded of the tenant is newer than this message: a move
		// is an offboarding then an onboarding, sent in that order on two
		// queues, and the offboarding may still come. It completes the move
		// (see offboard); an offboarding sent after this message drops it,
		// as the tier conflict would have in send order.
		// Of two held to the same tier the first sent takes effect (the
		// second meets the tenant there): the value keeps it and its send
		// time, the record's time is the latest (a record only moves
		// forward).
		key := ledger.HeldIn(req.Tier, req.TenantID)
		value, at := heldValue(req.ReleaseVersion, p.sent), p.sent
		if rec, ok := p.ledger.Get(key); ok {
			at = max(at, rec.MS)
			if _, first, ok := heldOf(rec.Value); ok && first <= p.sent {
				value = rec.Value
			}
		}
		p.ledger.Set(key, at, value)
		p.held = true
		p.message = fmt.Sprintf("Held: tenant %s is in tier %s; it moves to tier %s when an offboarding "+
			"from %s sent before this onboarding arrives", req.TenantID, other, req.Tier, other)
		return nil
	}
	p.fresh(ledger.Tenant(req.TenantID))
	return p.add(req.Tier, req.TenantID, req.ReleaseVersion, p.sent)
}

// add puts tenant id in tier, as an onboarding sent at sent asking for
// release does: the tenant file rendered from the tier's template, and its
// entry in the tier's kustomization.
func (p *planner) add(tier, id, release string, sent int64) error {
	state, err := p.tenantIn(p.r, tier, id)
	if err != nil {
		return err
	}
	name := path.Join(state.dir, id+".yaml")
	if state.listed && state.file {
		// In place: the file may carry a newer release or image tags set by
		// Flux, which a late or repeated message must not undo.
		return nil
	}
	tmpl, err := p.r.ReadFile(p.TenantTemplate(tier))
	if err != nil {
		return fmt.Errorf("read template: %w", err)
	}
	out, err := render.Render(tmpl, render.Vars{TenantID: id, ReleaseVersion: p.release(tier, id, release, sent)})
	if err != nil {
		return fmt.Errorf("%w: render %s: %v", ErrBroken, p.TenantTemplate(tier), err)
	}
	// A file nobody applies (left over, or written by hand) is rendered
	// again: the onboarding asks Flux to apply the template's objects at
	// its release, not what the file holds.
	if err := p.checkCollisions(id, out); err != nil {
		return err
	}
	if current, err := p.r.ReadFile(name); err != nil || !bytes.Equal(out, current) {
		p.files[name] = out
	}
	if !state.listed {
		return p.editKustomization(tier, state.dir, id+".yaml", kustomization.Add)
	}
	return nil
}

// renderedFrom reports whether content declares any object that tmpl
// renders for v (same kind, namespace and name). The template's objects
// are found once per template, with a stand-in for the name it is
// rendered for: a deployment of a tier asks this of every tenant file.
func (p *planner) renderedFrom(content, tmpl []byte, v render.Vars) bool {
	const standIn = "tenantworkerstandin"
	key := string(tmpl)
	want, ok := p.templateObjects[key]
	if !ok {
		out, err := render.Render(tmpl, render.Vars{TenantID: standIn, EnvironmentID: standIn, ReleaseVersion: v.ReleaseVersion})
		if err != nil {
			return true // SetRelease says what is wrong with the template
		}
		want = objects(out)
		if p.templateObjects == nil {
			p.templateObjects = map[string][]object{}
		}
		p.templateObjects[key] = want
	}
	name := v.TenantID + v.EnvironmentID
	have := objects(content)
	for _, w := range want {
		w.namespace = strings.ReplaceAll(w.namespace, standIn, name)
		w.name = strings.ReplaceAll(w.name, standIn, name)
		if slices.Contains(have, w) {
			return true
		}
	}
	return false
}

func (p *planner) offboard(req message.Request) error {
	p.message = fmt.Sprintf("Removing tenant %s in tier %s", req.TenantID, req.Tier)
	if p.older(ledger.Tenant(req.TenantID)) {
		p.stale++
		return nil
	}
	if err := p.checkTier(req.Tier); err != nil {
		return err
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
			if p.dropHeld(req.Tier, req.TenantID) {
				// In send order the held onboarding to this tier came first
				// (after the offboarding from the other tier still on its
				// way) and this removes it: it is dropped, and the tenant's
				// record is left to that offboarding.
				p.message = fmt.Sprintf("Removing tenant %s in tier %s: its held onboarding to %s is dropped",
					req.TenantID, req.Tier, req.Tier)
				return nil
			}
			return reject.Errorf(reject.TierConflict, "tenant %s is in tier %s, not %s: nothing removed",
				req.TenantID, other, req.Tier)
		}
	}
	p.fresh(ledger.Tenant(req.TenantID))
	if state.file {
		p.files[path.Join(state.dir, req.TenantID+".yaml")] = nil
	}
	if state.listed {
		if err := p.editKustomization(req.Tier, state.dir, req.TenantID+".yaml", kustomization.Remove); err != nil {
			return err
		}
	}
	return p.completeMove(req)
}

// completeMove carries out an onboarding held for the offboarding req: of
// those to other tiers, the first sent after req (in send order it found
// the tenant gone; the later ones found it in that tier and were refused).
// Every held onboarding of the tenant is used up: those sent before req,
// or at the same time (equal send times take effect in the order they are
// handled, and the onboarding was handled first), met the tenant in its
// old tier and were refused.
func (p *planner) completeMove(req message.Request) error {
	if p.ledger == nil {
		return nil
	}
	tier, release, at := "", "", int64(0)
	for _, t := range p.tiers {
		key := ledger.HeldIn(t, req.TenantID)
		rec, ok := p.ledger.Get(key)
		r, sent, valid := heldOf(rec.Value)
		if !ok || !valid {
			continue
		}
		p.ledger.Set(key, rec.MS, "") // used up, either way
		if t != req.Tier && sent > p.sent && (tier == "" || sent < at) {
			tier, release, at = t, r, sent
		}
	}
	if tier == "" {
		return nil
	}
	if err := p.checkNotPooledEnv(req.TenantID); err != nil {
		return nil // as it would have been refused then
	}
	if other, err := p.otherTier(req.Tier, req.TenantID); err != nil || other != "" && other != tier {
		return err // in a third tier: it would have been refused
	}
	p.ledger.Touch(ledger.Tenant(req.TenantID), at)
	if err := p.add(tier, req.TenantID, release, at); err != nil {
		if _, ok := reject.As(err); ok {
			return nil // the held onboarding is refused, not the offboarding
		}
		return err
	}
	p.also = append(p.also, message.Request{Kind: message.Onboarding, TenantID: req.TenantID, Tier: tier, ReleaseVersion: release})
	p.message += fmt.Sprintf("; adding it in tier %s, as a held onboarding sent after this offboarding asks", tier)
	return nil
}

// heldValue is how a held onboarding is kept in its record's value: its
// release and send time (Unix ms), one field.
func heldValue(release string, sent int64) string { return release + "," + strconv.FormatInt(sent, 10) }

func heldOf(value string) (release string, sent int64, ok bool) {
	release, ms, ok := strings.Cut(value, ",")
	sent, err := strconv.ParseInt(ms, 10, 64)
	return release, sent, ok && err == nil && release != ""
}

// dropHeld uses up an onboarding of the tenant to tier held since before
// the message was sent; it reports whether there was one.
func (p *planner) dropHeld(tier, id string) bool {
	if p.ledger == nil {
		return false
	}
	key := ledger.HeldIn(tier, id)
	rec, ok := p.ledger.Get(key)
	if _, sent, valid := heldOf(rec.Value); !ok || !valid || sent > p.sent {
		return false
	}
	p.ledger.Set(key, rec.MS, "")
	return true
}

// editKustomization edits the entry of the kustomization of dir, in tier:
// the tier's own, or one of its shard folders'. A shard folder's first
// tenant makes its kustomization and lists the folder in the tier's.
func (p *planner) editKustomization(tier, dir, entry string, edit func([]byte, string) ([]byte, bool, error)) error {
	name := path.Join(dir, kustomizationFile)
	content, err := p.read(name)
	if errors.Is(err, fs.ErrNotExist) && dir != p.TierDir(tier) {
		content = ShardKustomization(nil)
		if !p.ShardKustomizations { // applied through its tier
			if err := p.editKustomization(tier, p.TierDir(tier), path.Base(dir), kustomization.Add); err != nil {
				return err
			}
		}
	} else if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	out, changed, err := edit(content, entry)
	if err != nil {
		if kustomization.IsForm(err) {
			return formError(name, err)
		}
		return fmt.Errorf("edit %s: %w", name, err)
	}
	if !changed {
		return nil
	}
	p.files[name] = out
	if dir == p.TierDir(tier) {
		return nil
	}
	// A shard folder's last tenant takes the folder with it. When other
	// files stay in it (a file nobody lists), its list is written as an
	// empty one, `resources: []`: kustomize refuses a list left null.
	if left, err := kustomization.Resources(out); err != nil || len(left) > 0 {
		return nil
	}
	// With a Kustomization of its own, the folder stays for it to prune.
	if names, err := p.r.ReadDir(dir); err != nil || p.ShardKustomizations || slices.ContainsFunc(names, func(n string) bool {
		c, gone := p.files[path.Join(dir, n)]
		return n != kustomizationFile && !(gone && c == nil)
	}) {
		rest, err := kustomization.Rest(out)
		if err != nil {
			return formError(name, err)
		}
		if len(rest) > 0 && !bytes.HasSuffix(rest, []byte("\n")) {
			rest = append(rest, '\n')
		}
		p.files[name] = append(rest, "resources: []\n"...)
		return nil
	}
	p.files[name] = nil
	return p.editKustomization(tier, p.TierDir(tier), path.Base(dir), kustomization.Remove)
}

// read reads a file as this change leaves it so far: a move edits one
// tier's kustomization twice when both tenants' shard folders are new.
func (p *planner) read(name string) ([]byte, error) {
	if c, ok := p.files[name]; ok {
		if c == nil {
			return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
		}
		return c, nil
	}
	return p.r.ReadFile(name)
}

func (p *planner) deploy(req message.Request) error {
	// Staleness first: a deployment sent before the last deployment of
	// the tier, or of the tenant it names, changes nothing of it, whether
	// or not the tier or the tenant is still there.
	if req.TenantID != "" {
		p.message = fmt.Sprintf("Deploying to tenant %s in tier %s, version %s", req.TenantID, req.Tier, req.ReleaseVersion)
		if p.olderRelease(req.Tier, req.TenantID) {
			p.stale++
			return nil
		}
	} else {
		p.message = fmt.Sprintf("Deploying to %s tenants, version %s", req.Tier, req.ReleaseVersion)
	}
	if err := p.checkTier(req.Tier); err != nil {
		if req.TenantID == "" && p.older(ledger.Tier(req.Tier)) ||
			req.TenantID != "" && p.older(ledger.Tenant(req.TenantID)) {
			p.stale++
			return nil
		}
		return err
	}
	var tenants []Tenant
	if req.TenantID != "" {
		file, err := p.tenantFile(req.Tier, req.TenantID)
		if err != nil {
			return fmt.Errorf("look up tenant %s in tier %s: %w", req.TenantID, req.Tier, err)
		}
		if file == "" {
			// Gone since (offboarded or moved after it was sent): stale.
			if p.older(ledger.Tenant(req.TenantID)) {
				p.stale++
				return nil
			}
			other, err := p.otherTier(req.Tier, req.TenantID)
			if err != nil {
				return err
			}
			if p.ledger == nil {
				if other != "" {
					return reject.Errorf(reject.TierConflict, "tenant %s is in tier %s, not %s", req.TenantID, other, req.Tier)
				}
				return reject.Errorf(reject.TenantNotFound, "tenant %s does not exist in tier %s", req.TenantID, req.Tier)
			}
			// Not there yet: the onboarding sent before it may still come
			// (on its own queue), and takes this release (see release).
			p.ledger.Set(ledger.ReleaseIn(req.Tier, req.TenantID), p.sent, req.ReleaseVersion)
			p.held = true
			p.message = fmt.Sprintf("Held: tenant %s is not in tier %s; an onboarding of it to %s sent before "+
				"this deployment takes release %s", req.TenantID, req.Tier, req.Tier, req.ReleaseVersion)
			return nil
		}
		tenants = []Tenant{{ID: req.TenantID, File: file}}
	} else {
		var err error
		if tenants, err = p.Tenants(p.r, req.Tier); err != nil {
			return fmt.Errorf("list tenants of tier %s: %w", req.Tier, err)
		}
	}

	tmplName := p.TenantTemplate(req.Tier)
	tmpl, err := p.r.ReadFile(tmplName)
	if err != nil {
		return fmt.Errorf("read template: %w", err)
	}
	for _, t := range tenants {
		id := t.ID
		if message.ValidateTenantID(id) != nil {
			continue // not a tenant file this worker wrote; leave it alone
		}
		if !p.freshRelease(req.Tier, id) {
			continue // given its release by a message sent after this one
		}
		if err := p.rerender(t.File, tmplName, tmpl,
			render.Vars{TenantID: id, ReleaseVersion: req.ReleaseVersion}, req.TenantID == ""); err != nil {
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
			render.Vars{EnvironmentID: env, ReleaseVersion: req.ReleaseVersion}, true); err != nil {
			return err
		}
	}
	return nil
}

// tenantFile is the path of tenant id's file in tier, where the layout puts
// it or, sharded, in the tier's own folder; "" when there is none.
func (p *planner) tenantFile(tier, id string) (string, error) {
	for _, name := range p.TenantFilePlaces(tier, id) {
		_, err := p.r.ReadFile(name)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return "", nil
}

// rerender sets the release of a file rendered from tmpl: only the values
// the template sets from {RELEASE_VERSION} change; hand edits, fields the
// template gained since, and the values Flux image automation owns stay.
// In a deployment of a whole tier (several), a file that holds none of
// the objects the template renders (a ConfigMap the tier shares, added by
// hand) is not a tenant's and is left alone; a file the message names must
// take the release.
func (p *planner) rerender(name, tmplName string, tmpl []byte, v render.Vars, several bool) error {
	current, err := p.r.ReadFile(name)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if several && !p.renderedFrom(current, tmpl, v) {
		return nil
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
