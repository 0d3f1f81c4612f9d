package gitops

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/tenant-worker/tenant-worker/internal/kustomization"
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

// Plan computes the change that carries out req on the snapshot r. Errors
// caused by the request are reject.Error; others are problems reading r.
func (l Layout) Plan(r Reader, req message.Request) (Change, error) {
	tiers, err := l.Tiers(r)
	if err != nil {
		return Change{}, fmt.Errorf("list tiers: %w", err)
	}
	if !slices.Contains(tiers, req.Tier) {
		return Change{}, reject.Errorf(reject.UnknownTier, "tier %q does not exist (tiers: %s)",
			req.Tier, strings.Join(tiers, ", "))
	}
	p := planner{Layout: l, r: r, tiers: tiers, files: map[string][]byte{}}
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
	return Change{Files: p.files, Message: p.message}, nil
}

type planner struct {
	Layout
	r       Reader
	tiers   []string
	files   map[string][]byte
	message string
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
		out, err := render.Render(tmpl, render.Vars{TenantID: req.TenantID, ReleaseVersion: req.ReleaseVersion})
		if err != nil {
			return fmt.Errorf("%w: render %s: %v", ErrBroken, p.TenantTemplate(req.Tier), err)
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
		if err := p.rerender(p.TenantFile(req.Tier, id), tmplName, tmpl,
			render.Vars{TenantID: id, ReleaseVersion: req.ReleaseVersion}); err != nil {
			return err
		}
	}
	if req.TenantID != "" {
		return nil
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
		if err := p.rerender(path.Join(p.PooledEnvsDir(), env+".yaml"), envName, envTmpl,
			render.Vars{EnvironmentID: env, ReleaseVersion: req.ReleaseVersion}); err != nil {
			return err
		}
	}
	return nil
}

// rerender regenerates a file from its template, keeping the values Flux
// image automation owns.
func (p *planner) rerender(name, tmplName string, tmpl []byte, v render.Vars) error {
	out, err := render.Render(tmpl, v)
	if err != nil {
		return fmt.Errorf("%w: render %s: %v", ErrBroken, tmplName, err)
	}
	current, err := p.r.ReadFile(name)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if out = render.KeepImagePolicies(out, current); !bytes.Equal(out, current) {
		p.files[name] = out
	}
	return nil
}
