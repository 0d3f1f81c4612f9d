// Package intent checks that a change does what its message names and
// nothing else. For each Kustomization the change touches (the tenants
// folder, the pooled environments) it compares the objects Flux would apply
// before and after, by kind, namespace and name, each traced to the file
// that declares it: an onboarding may only add the named tenant's objects,
// an offboarding may only remove them, a deployment may only change the
// release fields of the HelmReleases it names. A change that builds but
// does something else (an edit of a kustomization in a form nobody
// foresaw, a template that touches what it should not) is caught here
// before it is pushed.
package intent

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/message"
)

// Source is a snapshot of the repository: files read by path, folders
// listed with an identifier of each file's content, and contents read by
// that identifier (a git snapshot is one).
type Source interface {
	ReadFile(name string) ([]byte, error)
	Entries(dir string) (files map[string]string, dirs []string, err error)
	ReadBlob(id string) ([]byte, error)
	DirHash(dir string) (string, error)
}

// Delta is one object that a change makes appear, disappear or change in
// what a Kustomization builds.
type Delta struct {
	// Op is added, removed or changed.
	Op string
	// Object is "Kind namespace/name".
	Object string
	// File is the file that declares it (after the change for added and
	// changed objects, before it for removed ones), from the repository's
	// root.
	File string
	// Fields, for a changed object, are the top-level paths that differ.
	Fields []string
}

func (d Delta) String() string {
	s := d.Op + " " + d.Object + " (" + d.File
	if len(d.Fields) > 0 {
		s += ": " + strings.Join(d.Fields, ", ")
	}
	return s + ")"
}

// Error is a change that does more than, or other than, its message asks.
type Error struct {
	// Unintended are the differences nobody asked for.
	Unintended []Delta
	// Missing is set when the change does not do what was asked (an
	// onboarding whose tenant Flux would not apply).
	Missing []string
}

func (e *Error) Error() string {
	var parts []string
	if n := len(e.Unintended); n > 0 {
		shown := e.Unintended[:min(n, 10)]
		var s []string
		for _, d := range shown {
			s = append(s, d.String())
		}
		more := ""
		if n > len(shown) {
			more = fmt.Sprintf(" and %d more", n-len(shown))
		}
		parts = append(parts, "it would also "+strings.Join(s, "; ")+more)
	}
	if len(e.Missing) > 0 {
		parts = append(parts, "it would not "+strings.Join(e.Missing, "; "))
	}
	return "the change does not do what the message asks: " + strings.Join(parts, "; and ")
}

// Files lists the files the unintended differences come from, sorted.
func (e *Error) Files() []string {
	set := map[string]bool{}
	for _, d := range e.Unintended {
		set[d.File] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// As returns the *Error in err's chain.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Checker compares builds for one repository layout. It keeps what it
// learns of unchanged folders and files between checks, so a check costs
// what the change touches, not what the repository holds. It is safe for
// concurrent use.
type Checker struct {
	layout gitops.Layout

	trees   *lru[*tree]                 // dir@hash -> resolved tree
	objects *lru[[]object]              // content id -> objects of a file
	fields  *lru[map[string][][]string] // template content -> release fields by kind
	plains  *lru[bool]                  // kustomization content id -> lists resources only
}

// NewChecker returns a Checker for layout.
func NewChecker(layout gitops.Layout) *Checker {
	return &Checker{layout: layout, trees: newLRU[*tree](16), objects: newLRU[[]object](4096),
		fields: newLRU[map[string][][]string](64), plains: newLRU[bool](256)}
}

// Check compares what before and after build, in every Kustomization that
// the changed paths touch, with what req asks, and what the requests also
// carried out by the same change ask (an onboarding held for the
// offboarding that completes a move of the tenant to another tier).
func (c *Checker) Check(before, after Source, req message.Request, changed []string, also ...message.Request) error {
	l, err := c.layout.Of(after)
	if err != nil {
		return err
	}
	var all Error
	var rules []rule // the same for every folder: made once, when needed
	reqs := append([]message.Request{req}, also...)
	var seen []delta // every folder's: an onboarding of a move adds in one, its offboarding removes in another
	var builts []func(string) bool
	for _, dir := range l.AppliedDirs(changed) {
		deltas, built, transformed, err := c.diff(before, after, dir, changed)
		if errors.Is(err, errNotBuilt) {
			continue
		}
		if err != nil {
			return err
		}
		if rules == nil {
			lb, err := c.layout.Of(before)
			if err != nil {
				return err
			}
			for _, r := range reqs {
				rule, err := c.ruleFor(lb, before, r)
				if err != nil {
					return err
				}
				rules = append(rules, rule)
			}
		}
		if transformed {
			// Built through transformers: an onboarding's objects are what
			// the same build makes of its template.
			for i, r := range reqs {
				if r.Kind != message.Onboarding {
					continue
				}
				ids, err := c.builtTenant(before, after, dir, r)
				if err != nil {
					return err
				}
				for id := range ids {
					rules[i].objects[id] = true
				}
			}
		}
		for _, d := range deltas {
			if !allowedBy(rules, d) {
				all.Unintended = append(all.Unintended, d.Delta)
			}
		}
		seen = append(seen, deltas...)
		builts = append(builts, built)
	}
	anyBuilt := func(file string) bool {
		return slices.ContainsFunc(builts, func(b func(string) bool) bool { return b(file) })
	}
	for _, r := range rules {
		all.Missing = append(all.Missing, r.missing(seen, anyBuilt)...)
	}
	if len(all.Unintended) == 0 && len(all.Missing) == 0 {
		return nil
	}
	return &all
}

// Moved checks a change that may only move files (a layout migration):
// every object a Kustomization folder the change touches builds after is
// built before, equal in every field, and nothing else is. Otherwise it
// returns an *Error naming each object that differs, and errNotBuilt's
// error when what Flux applies now cannot be built to compare with.
//
// When the change gives shard folders Kustomizations of their own (or takes
// them away), the objects are compared across every folder Flux applies on
// each side: an object may move from one Kustomization to another, not
// change or go.
func (c *Checker) Moved(before, after Source, changed []string) error {
	l, err := c.layout.Of(after)
	if err != nil {
		return err
	}
	lb, err := c.layout.Of(before)
	if err != nil {
		return err
	}
	if lb.ShardKustomizations != l.ShardKustomizations {
		return c.movedAcross(before, after, lb, l)
	}
	var all Error
	for _, dir := range l.AppliedDirs(changed) {
		deltas, _, _, err := c.diff(before, after, dir, changed)
		if err != nil {
			return fmt.Errorf("compare what %s builds: %w", dir, err)
		}
		for _, d := range deltas {
			if d.Op != opChanged || len(d.Fields) > 0 {
				all.Unintended = append(all.Unintended, d.Delta)
			}
		}
	}
	if len(all.Unintended) == 0 {
		return nil
	}
	return &all
}

// movedAcross is Moved between layouts that apply the tenants through
// different Kustomizations.
func (c *Checker) movedAcross(before, after Source, lb, la gitops.Layout) error {
	ob, err := c.applied(before, lb)
	if err != nil {
		return err
	}
	oa, err := c.applied(after, la)
	if err != nil {
		return err
	}
	var all Error
	for id, a := range oa {
		b, ok := ob[id]
		switch {
		case !ok:
			all.Unintended = append(all.Unintended, Delta{Op: opAdded, Object: id, File: a.file})
		case len(differing(b.body, a.body)) > 0:
			all.Unintended = append(all.Unintended, Delta{Op: opChanged, Object: id, File: a.file, Fields: differing(b.body, a.body)})
		}
	}
	for id, b := range ob {
		if _, ok := oa[id]; !ok {
			all.Unintended = append(all.Unintended, Delta{Op: opRemoved, Object: id, File: b.file})
		}
	}
	if len(all.Unintended) == 0 {
		return nil
	}
	slices.SortFunc(all.Unintended, func(a, b Delta) int { return strings.Compare(a.Object, b.Object) })
	return &all
}

// applied is every object the tenants folder builds in src under layout l,
// with those of each shard folder when they have Kustomizations of their
// own, by id with its file; an object two folders build is refused (two
// Kustomizations would fight over it).
func (c *Checker) applied(src Source, l gitops.Layout) (map[string]traced, error) {
	roots := []string{l.TenantsDir()}
	if l.ShardKustomizations {
		_, tiers, err := src.Entries(l.TenantsDir())
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", l.TenantsDir(), err)
		}
		for _, tier := range tiers {
			_, dirs, err := src.Entries(l.TierDir(tier))
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", l.TierDir(tier), err)
			}
			for _, d := range dirs {
				if gitops.IsShard(d) {
					roots = append(roots, path.Join(l.TierDir(tier), d))
				}
			}
		}
	}
	out := map[string]traced{}
	for _, root := range roots {
		t, err := c.resolve(src, root)
		if err != nil {
			return nil, err
		}
		if !t.simple {
			return nil, fmt.Errorf("%s is not only lists of files: what moves between Kustomizations cannot be compared", root)
		}
		for _, p := range t.files.paths() {
			id, _ := t.files.get(p)
			objs, err := c.fileObjects(src, p, id)
			if err != nil {
				return nil, err
			}
			for _, o := range objs {
				if prev, dup := out[o.id]; dup {
					return nil, fmt.Errorf("%s is built from %s and from %s", o.id, prev.file, p)
				}
				out[o.id] = traced{object: o, file: p}
			}
		}
	}
	return out, nil
}

// allowedBy reports whether one of rules allows d, or d is an object of a
// tenant that an offboarding takes out of one file and an onboarding of
// the same change puts in another (a move to another tier).
func allowedBy(rules []rule, d delta) bool {
	var on, off bool
	for _, r := range rules {
		if r.allows(d) {
			return true
		}
		on = on || r.kind == message.Onboarding && r.files(d.File) && r.declares(d.Object)
		off = off || r.kind == message.Offboarding && r.files(d.from)
	}
	return d.Op == opChanged && on && off
}

// delta is a Delta with what the rules need to judge it.
type delta struct {
	Delta
	kind          string
	from          string // the file that declared it before
	before, after map[string]any
}

// diff lists the objects that differ between what dir builds in before
// and in after; transformed says kustomize built both sides.
func (c *Checker) diff(before, after Source, dir string, changed []string) ([]delta, func(string) bool, bool, error) {
	tb, err := c.resolve(before, dir)
	if err != nil {
		return nil, nil, false, err
	}
	if !tb.simple {
		// Transformers, nested paths, remote bases: kustomize decides.
		ds, built, err := c.diffBuilt(before, after, dir)
		return ds, built, true, err
	}
	ta, cands, ok := c.derive(tb, after, dir, changed)
	if ok {
		if hash, err := after.DirHash(dir); err == nil {
			c.trees.put(dir+"@"+hash, ta) // the next change's before
		}
	} else {
		if ta, err = c.resolve(after, dir); err != nil {
			return nil, nil, false, err
		}
		if !ta.simple {
			ds, built, err := c.diffBuilt(before, after, dir)
			return ds, built, true, err
		}
		cands = append(tb.files.paths(), ta.files.paths()...)
	}
	built := func(file string) bool { _, ok := ta.files.get(file); return ok }
	// Every kustomization lists plain files and folders and transforms
	// nothing, so a file's objects are what it declares: only files whose
	// content changed, or that entered or left a list, can make a
	// difference.
	var out []delta
	seen := map[string]bool{}
	for _, p := range cands {
		if seen[p] {
			continue
		}
		seen[p] = true
		hb, inB := tb.files.get(p)
		ha, inA := ta.files.get(p)
		if inB && inA && ha == hb {
			continue
		}
		var ob, oa []object
		if inB {
			if ob, err = c.fileObjects(before, p, hb); err != nil {
				return nil, nil, false, err
			}
		}
		if inA {
			if oa, err = c.fileObjects(after, p, ha); err != nil {
				return nil, nil, false, err
			}
		}
		out = append(out, compare(ob, oa, p, p)...)
	}
	return moved(out), built, false, nil
}

// moved pairs an object removed from one file with the same object added
// in another: it changed (or not at all) rather than left and came back.
func moved(ds []delta) []delta {
	added := map[string]int{}
	for i, d := range ds {
		if d.Op == opAdded {
			added[d.Object] = i
		}
	}
	var out []delta
	drop := map[int]bool{}
	for _, d := range ds {
		if d.Op != opRemoved {
			continue
		}
		if i, ok := added[d.Object]; ok {
			drop[i] = true
			a := ds[i]
			if fields := differing(d.before, a.after); len(fields) > 0 || d.File != a.File {
				out = append(out, delta{Delta: Delta{Op: opChanged, Object: d.Object, File: a.File, Fields: fields},
					kind: d.kind, from: d.File, before: d.before, after: a.after})
			}
			continue
		}
		out = append(out, d)
	}
	for i, d := range ds {
		if d.Op != opRemoved && !drop[i] {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b delta) int { return strings.Compare(a.Object+a.Op, b.Object+b.Op) })
	return out
}

const (
	opAdded   = "add"
	opRemoved = "remove"
	opChanged = "change"
)

// compare lists the differences between the objects of one file (or
// origin) before and after.
func compare(before, after []object, fileBefore, fileAfter string) []delta {
	var out []delta
	idx := map[string]object{}
	for _, o := range before {
		idx[o.id] = o
	}
	seen := map[string]bool{}
	for _, a := range after {
		seen[a.id] = true
		b, ok := idx[a.id]
		if !ok {
			out = append(out, delta{Delta: Delta{Op: opAdded, Object: a.id, File: fileAfter}, kind: a.kind, after: a.body})
			continue
		}
		if fields := differing(b.body, a.body); len(fields) > 0 {
			out = append(out, delta{Delta: Delta{Op: opChanged, Object: a.id, File: fileAfter, Fields: fields},
				kind: a.kind, from: fileBefore, before: b.body, after: a.body})
		}
	}
	for _, b := range before {
		if !seen[b.id] {
			out = append(out, delta{Delta: Delta{Op: opRemoved, Object: b.id, File: fileBefore}, kind: b.kind, before: b.body})
		}
	}
	return out
}

// ruleFor is what req may do to what Flux applies, in before laid out as
// l.
func (c *Checker) ruleFor(l gitops.Layout, before Source, req message.Request) (rule, error) {
	r := rule{kind: req.Kind}
	switch req.Kind {
	case message.Onboarding, message.Offboarding:
		// Sharded, a tenant written in its tier's own folder (before the
		// migration) is still that tenant.
		r.files = l.TenantPaths(req.Tier, req.TenantID)
		r.want = l.TenantFilePlaces(req.Tier, req.TenantID)
		if req.Kind == message.Onboarding {
			objs, err := c.tenantObjects(before, req)
			if err != nil {
				return r, err
			}
			r.objects = objs
		}
	case message.Deployment:
		tenant := l.TenantPaths(req.Tier, req.TenantID)
		r.files = func(p string) bool {
			if req.TenantID != "" {
				return tenant(p)
			}
			return l.InTier(req.Tier, p) ||
				strings.HasPrefix(p, l.PooledEnvsDir()+"/") && !strings.Contains(p[len(l.PooledEnvsDir())+1:], "/")
		}
		tenantFields, err := c.releaseFields(before, l.TenantTemplate(req.Tier))
		if err != nil {
			return r, err
		}
		envFields, err := c.releaseFields(before, l.EnvTemplate(req.Tier))
		if err != nil {
			return r, err
		}
		r.release = func(p string) map[string][][]string {
			if strings.HasPrefix(p, l.PooledEnvsDir()+"/") {
				return envFields
			}
			return tenantFields
		}
	default:
		return r, fmt.Errorf("unknown request kind %q", req.Kind)
	}
	return r, nil
}

// rule judges differences for one message.
type rule struct {
	kind    message.Kind
	files   func(path string) bool                  // the files whose objects the message names
	want    []string                                // where the tenant file of an onboarding or offboarding may be
	objects map[string]bool                         // what an onboarding's template renders for the tenant
	release func(path string) map[string][][]string // by kind
}

// declares reports whether object is one the onboarding's template renders
// for its tenant: a file left in the tier's folder that declares anything
// else (another tenant's object, the pool's) is not the tenant's to add.
func (r rule) declares(object string) bool { return r.objects[object] }

func (r rule) allows(d delta) bool {
	if !r.files(d.File) {
		return false
	}
	switch r.kind {
	case message.Onboarding:
		return d.Op == opAdded && r.declares(d.Object)
	case message.Offboarding:
		return d.Op == opRemoved
	case message.Deployment:
		paths := r.release(d.File)[d.kind]
		if d.Op != opChanged || len(paths) == 0 {
			return false
		}
		return len(differing(mask(d.before, paths), mask(d.after, paths))) == 0
	}
	return false
}

// missing says what an onboarding or offboarding fails to do: Flux must
// apply the tenant's file after an onboarding, and nothing of it after an
// offboarding. built tells the files whose objects are built after.
func (r rule) missing(ds []delta, built func(file string) bool) []string {
	switch r.kind {
	case message.Onboarding:
		for _, d := range ds {
			if slices.Contains(r.want, d.File) && (d.Op == opAdded || d.Op == opChanged && !slices.Contains(r.want, d.from)) {
				return nil
			}
		}
		return []string{"add any object of " + r.want[0] + " to what Flux applies"}
	case message.Offboarding:
		for _, w := range r.want {
			if built(w) {
				return []string{"remove every object of " + w + " from what Flux applies"}
			}
		}
	}
	return nil
}

// mask returns a copy of obj without the fields at paths.
func mask(obj map[string]any, paths [][]string) map[string]any {
	if len(paths) == 0 || obj == nil {
		return obj
	}
	out := deepCopy(obj).(map[string]any)
	for _, p := range paths {
		m := out
		for i, k := range p {
			if i == len(p)-1 {
				delete(m, k)
				break
			}
			next, ok := m[k].(map[string]any)
			if !ok {
				break
			}
			m = next
		}
	}
	return out
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = deepCopy(x)
		}
		return s
	}
	return v
}
