package intent

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/render"
)

// overlay is a Source with some files written over it: a probe built the
// way Flux builds the real tree.
type overlay struct {
	Source
	files map[string][]byte // path -> content
}

const overlayID = "overlay\x00"

func (o overlay) ReadFile(name string) ([]byte, error) {
	if c, ok := o.files[name]; ok {
		return c, nil
	}
	return o.Source.ReadFile(name)
}

func (o overlay) Entries(dir string) (map[string]string, []string, error) {
	files, dirs, err := o.Source.Entries(dir)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]string{}
	for n, id := range files {
		out[n] = id
	}
	for p := range o.files {
		if path.Dir(p) == dir {
			out[path.Base(p)] = overlayID + p
		}
	}
	return out, dirs, nil
}

func (o overlay) ReadBlob(id string) ([]byte, error) {
	if p, ok := strings.CutPrefix(id, overlayID); ok {
		return o.files[p], nil
	}
	return o.Source.ReadBlob(id)
}

func (o overlay) DirHash(dir string) (string, error) {
	h, err := o.Source.DirHash(dir)
	if err != nil {
		return "", err
	}
	sum := sha256.New()
	sum.Write([]byte(h))
	for _, p := range slices.Sorted(maps.Keys(o.files)) {
		if strings.HasPrefix(p, dir+"/") {
			fmt.Fprintf(sum, "\x00%s\x00%s", p, o.files[p])
		}
	}
	return fmt.Sprintf("%x", sum.Sum(nil)), nil
}

// builtTenant lists the objects that dir builds, in after, from the file
// of req's tenant (an onboarding) once the checker's own rendering of the
// tier's template takes the place of what the change wrote there: what
// the template renders for the tenant as Flux applies it, through every
// transformer of the kustomizations on the way. Nothing when the change
// writes no file for the tenant in dir.
func (c *Checker) builtTenant(before, after Source, dir string, req message.Request) (map[string]bool, error) {
	l, err := c.layout.Of(after)
	if err != nil {
		return nil, err
	}
	var file string
	for _, p := range l.TenantFilePlaces(req.Tier, req.TenantID) {
		if strings.HasPrefix(p, dir+"/") {
			if _, err := after.ReadFile(p); err == nil {
				file = p
				break
			}
		}
	}
	if file == "" {
		return nil, nil
	}
	name := c.layout.TenantTemplate(req.Tier)
	tmpl, err := before.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	out, err := render.Render(tmpl, render.Vars{TenantID: req.TenantID, ReleaseVersion: req.ReleaseVersion})
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	objs, err := buildTraced(overlay{Source: after, files: map[string][]byte{file: out}}, dir)
	if err != nil {
		return nil, nil // what does not build, validation refuses with kustomize's words
	}
	ids := map[string]bool{}
	for id, o := range objs {
		if o.file == file {
			ids[id] = true
		}
	}
	return ids, nil
}
