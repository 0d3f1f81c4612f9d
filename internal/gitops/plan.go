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

	"github.com/tenant-worker/tenant-worker/internal/history"
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
	// Message is the commit message: the reference platform's wording for
	// the request, and a line for each other message whose outcome it
	// changes.
	Message string
	// ShardKustomizations: the layout the change was planned in gives each
	// shard folder a Kustomization of its own (Layout.ShardKustomizations).
	ShardKustomizations bool
	// Duplicate: the message was applied already (its id is in the ledger).
	Duplicate bool
	// Stale: in send order, the message's effect is undone by messages
	// sent after it that have arrived: it changes nothing (it is recorded,
	// as it may still count once a message sent before it arrives).
	Stale bool
	// Recorded: the change only records the message in the ledger (what it
	// asks for is in place already, in send order).
	Recorded bool
	// Held: the change only records the message in the ledger, to be
	// carried out by a message sent before it that has not arrived yet (an
	// onboarding to another tier before the offboarding that moves the
	// tenant out, a deployment to a tenant before its onboarding).
	Held bool
	// Effects are what Files do, as requests (for the intent check): the
	// message's own request, or what the arrival of the message makes of
	// the tenant in send order (a move, a release restored).
	Effects []message.Request
	// Resolved are the other messages whose outcome this change alters: a
	// held one now carried out or rejected (its hold ended), an applied one
	// now held.
	Resolved []Resolution
}

// Resolution is a message, recorded earlier, whose outcome a change
// alters.
type Resolution struct {
	// MessageID is its id as the ledger keeps it; Sent its send time.
	MessageID string
	Sent      time.Time
	Request   message.Request
	// Outcome is what it now amounts to: applied (what it asked is now in
	// place), held, or rejected; Reason, for the last two, why.
	Outcome string
	Reason  reject.Reason
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
	// request that came from no queue): a conflict is then refused at
	// once.
	Sent time.Time
	// Now and Retention bound what the ledger keeps: nothing older than the
	// queues' retention period, which no message can still be.
	Now       time.Time
	Retention time.Duration
	// Hold is how long a message in conflict waits for a message sent
	// before it to explain it (0: the retention), at most the retention.
	Hold time.Duration
}

// Plan computes the change that carries out req on the snapshot r, without
// a ledger. Errors caused by the request are reject.Error; others are
// problems reading r.
func (l Layout) Plan(r Reader, req message.Request) (Change, error) {
	return l.PlanAt(r, req, Stamp{})
}

// PlanAt is Plan for a message stamped st. The tenant a message names is
// decided from every message about it that has arrived (and the
// deployments of its tiers), folded in send order (internal/history): the
// tree is edited to reach that state, so that it is always the send-order
// result of what has arrived, whatever the order of arrival. A message
// applied already is a Duplicate.
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
	if !st.Sent.IsZero() {
		p.ledger, p.sent = ledger.Open(st.Ledger), st.Sent.UnixMilli()
		p.now, p.retention, p.hold = st.Now.UnixMilli(), st.Retention, st.Hold
		if p.retention > 0 && (p.hold <= 0 || p.hold > p.retention) {
			p.hold = p.retention
		}
		if st.MessageID != "" && p.ledger.Seen(st.MessageID, p.sent) {
			if err := p.ledger.Err(); err != nil {
				return Change{}, ledgerError(err)
			}
			return Change{Duplicate: true}, nil
		}
	}
	key := ledger.MessageKey(st.MessageID)
	if st.MessageID == "" {
		// A message without an id (a test's, a dry run's): its send time
		// and request stand for it.
		key = fmt.Sprintf("%d-%s-%s-%s-%s", p.sent, req.Kind, req.TenantID, req.Tier, req.ReleaseVersion)
	}
	switch {
	case req.Kind == EndHolds:
		if p.ledger == nil {
			return Change{}, errors.New("ending holds needs the ledger (a send time)")
		}
		err = p.endHolds()
	case req.Kind == message.Deployment && req.TenantID == "":
		err = p.deployTier(req, key)
	case req.Kind == message.Onboarding || req.Kind == message.Offboarding || req.Kind == message.Deployment:
		err = p.tenantMessage(req, key)
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
	c := Change{Files: p.files, Message: p.commitMessage(), Effects: p.effects, Resolved: p.resolved,
		ShardKustomizations: l.ShardKustomizations}
	if p.ledger == nil {
		return c, nil
	}
	if p.verdict == verdictCovered {
		if req.Kind == EndHolds {
			return Change{}, nil
		}
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
	c.Ledger = p.ledger.Changes()
	if len(c.Files) == 0 {
		switch p.verdict {
		case verdictHeld:
			c.Recorded, c.Held = true, true
		case verdictStale:
			c.Stale = true
		default:
			c.Recorded = true
			c.Message = "Already in place: " + c.Message
		}
	}
	return c, nil
}

// ledgerError is a ledger branch that cannot be read: a fault of the
// repository (someone edited it by hand), which no message can get past.
func ledgerError(err error) error {
	return fmt.Errorf("%w: the ledger branch: %v", ErrBroken, err)
}

// checkTier refuses a tier that does not exist.
func (p *planner) checkTier(tier string) error {
	if !slices.Contains(p.tiers, tier) {
		return reject.Errorf(reject.UnknownTier, "tier %q does not exist (tiers: %s)",
			tier, strings.Join(p.tiers, ", "))
	}
	return nil
}

// verdict is what a message amounts to when it is handled, beyond the
// files it changes.
type verdict int

const (
	verdictDone    verdict = iota // applied, or in place already
	verdictHeld                   // waits for a message sent before it
	verdictStale                  // undone by messages sent after it
	verdictCovered                // sent before what the ledger folded: not recorded
)

type planner struct {
	Layout
	r       Reader
	tiers   []string
	files   map[string][]byte
	message string
	notes   []string // lines of the commit message's body
	verdict verdict
	effects []message.Request
	// resolved are the other messages whose outcome the change alters.
	resolved []Resolution
	// ledger is nil when the request has no send time.
	ledger    *ledger.Ledger
	sent, now int64 // Unix ms
	retention time.Duration
	hold      time.Duration
	tierLogs  map[string][]history.Event
	// templateObjects are the objects of each template read, by content,
	// rendered for a stand-in name (see renderedFrom).
	templateObjects map[string][]object
}

// commitMessage is the subject and the notes.
func (p *planner) commitMessage() string {
	if len(p.notes) == 0 {
		return p.message
	}
	return p.message + "\n\n" + strings.Join(p.notes, "\n")
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

// add puts tenant id in tier at release: the tenant file rendered from
// the tier's template, and its entry in the tier's kustomization.
func (p *planner) add(tier, id, release string) error {
	state, err := p.tenantIn(p.r, tier, id)
	if err != nil {
		return err
	}
	p.effect(onboarding(tier, id, release))
	name := path.Join(state.dir, id+".yaml")
	tmpl, err := p.r.ReadFile(p.TenantTemplate(tier))
	if err != nil {
		return fmt.Errorf("read template: %w", err)
	}
	out, err := render.Render(tmpl, render.Vars{TenantID: id, ReleaseVersion: release})
	if err != nil {
		return fmt.Errorf("%w: render %s: %v", ErrBroken, p.TenantTemplate(tier), err)
	}
	if err := p.checkCollisions(id, out); err != nil {
		return err
	}
	// A file nobody applies (left over, or written by hand) is rendered
	// again: the onboarding asks Flux to apply the template's objects at
	// its release, not what the file holds.
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
