package intent

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/templates"
)

var layout = gitops.Layout{Root: templates.Root}

// mem is a Source over a map file system; content ids are hashes.
type mem struct{ fstest.MapFS }

func (m mem) ReadFile(name string) ([]byte, error) { return fs.ReadFile(m.MapFS, name) }

func (m mem) ReadDir(name string) ([]string, error) {
	es, err := fs.ReadDir(m.MapFS, name)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out, err
}

func (m mem) Entries(dir string) (map[string]string, []string, error) {
	es, err := fs.ReadDir(m.MapFS, dir)
	if err != nil {
		return nil, nil, err
	}
	files := map[string]string{}
	var dirs []string
	for _, e := range es {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
			continue
		}
		b, _ := fs.ReadFile(m.MapFS, dir+"/"+e.Name())
		files[e.Name()] = string(b) // the content is its own id
	}
	return files, dirs, nil
}

func (m mem) ReadBlob(id string) ([]byte, error) { return []byte(id), nil }

func (m mem) FileID(name string) (string, error) {
	b, err := fs.ReadFile(m.MapFS, name)
	if err != nil {
		return "", err
	}
	if st, _ := fs.Stat(m.MapFS, name); st != nil && st.IsDir() {
		return "", fs.ErrNotExist
	}
	return string(b), nil
}

// listed is a Source without FileID: the after tree is listed in full.
type listed struct{ Source }

func (m mem) DirHash(dir string) (string, error) {
	h := sha256.New()
	found := false
	for _, p := range slices.Sorted(maps.Keys(m.MapFS)) {
		if strings.HasPrefix(p, dir+"/") {
			fmt.Fprintf(h, "%s\x00%s\x00", p, m.MapFS[p].Data)
			found = true
		}
	}
	if !found { // as a git snapshot answers for a folder it does not have
		return "", fs.ErrNotExist
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}

func seed(t *testing.T) fstest.MapFS {
	t.Helper()
	m, err := templates.MapFS()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func clone(m fstest.MapFS) fstest.MapFS {
	out := fstest.MapFS{}
	for p, f := range m {
		out[p] = &fstest.MapFile{Data: slices.Clone(f.Data)}
	}
	return out
}

// planned applies the worker's own plan of a message to m, and returns
// the request, the tree after, and the changed paths.
func planned(t *testing.T, m fstest.MapFS, kind message.Kind, body string) (message.Request, fstest.MapFS, []string) {
	t.Helper()
	req, err := message.Decode(kind, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	c, err := layout.Plan(gitops.FS{FS: m}, req)
	if err != nil {
		t.Fatalf("plan %s: %v", body, err)
	}
	after := clone(m)
	for p, b := range c.Files {
		if b == nil {
			delete(after, p)
		} else {
			after[p] = &fstest.MapFile{Data: b}
		}
	}
	return req, after, c.Paths()
}

func put(m fstest.MapFS, name, content string) {
	m[path.Join(templates.Root, name)] = &fstest.MapFile{Data: []byte(content)}
}

// onboarded returns the seed with tenants onboarded by the worker.
func onboarded(t *testing.T, ids ...string) fstest.MapFS {
	m := seed(t)
	for _, id := range ids {
		tier := "basic"
		if strings.HasPrefix(id, "p") {
			tier = "premium"
		}
		_, m, _ = planned(t, m, message.Onboarding, fmt.Sprintf(`{"tenant_id":%q,"tenant_tier":%q,"release_version":"0.0"}`, id, tier))
	}
	return m
}

func TestWorkerPlansDoWhatTheyName(t *testing.T) {
	c := NewChecker(layout)
	for _, tt := range []struct {
		kind message.Kind
		body string
	}{
		{message.Onboarding, `{"tenant_id":"b3","tenant_tier":"basic","release_version":"0.0"}`},
		{message.Onboarding, `{"tenant_id":"p3","tenant_tier":"premium","release_version":"1.0"}`},
		{message.Offboarding, `{"tenant_id":"b1","tenant_tier":"basic"}`},
		{message.Offboarding, `{"tenant_id":"p1","tenant_tier":"premium"}`},
		{message.Deployment, `{"tenant_tier":"basic","release_version":"2.0"}`},
		{message.Deployment, `{"tenant_tier":"premium","release_version":"2.0","tenant_id":"p2"}`},
	} {
		before := onboarded(t, "b1", "b2", "p1", "p2")
		req, after, changed := planned(t, before, tt.kind, tt.body)
		if err := c.Check(mem{before}, mem{after}, req, changed); err != nil {
			t.Errorf("%s %s: %v", tt.kind, tt.body, err)
		}
	}
}

// TestTierDeletedByASecondKey is the defect the check exists for: a
// kustomization whose list is written under a quoted key, edited by a line
// editor that did not see it, gains a second resources key holding only
// the new tenant; kustomize keeps the last key, and with prune Flux would
// delete every other tenant of the tier.
func TestTierDeletedByASecondKey(t *testing.T) {
	before := onboarded(t, "b1", "b2")
	k := path.Join(templates.Root, "tenants/basic/kustomization.yaml")
	before[k].Data = []byte(strings.Replace(string(before[k].Data), "resources:", `"resources":`, 1))
	req, after, _ := planned(t, onboarded(t), message.Onboarding, `{"tenant_id":"b3","tenant_tier":"basic","release_version":"0.0"}`)
	// What the old editor wrote: the file as it was, and a second key.
	after = clone(before)
	put(after, "tenants/basic/b3.yaml", string(mustRead(t, onboardedFile(t, "b3"))))
	after[k].Data = append(slices.Clone(before[k].Data), "\nresources:\n  - b3.yaml\n"...)
	err := NewChecker(layout).Check(mem{before}, mem{after}, req, []string{k, path.Join(templates.Root, "tenants/basic/b3.yaml")})
	e, ok := As(err)
	if !ok {
		t.Fatalf("Check = %v, want an intent error", err)
	}
	var removed []string
	for _, d := range e.Unintended {
		if d.Op == opRemoved {
			removed = append(removed, d.Object)
		}
	}
	for _, want := range []string{"HelmRelease flux-system/b1-basic", "HelmRelease flux-system/b2-basic", "ConfigMap dummy-configmap-basic"} {
		if !slices.ContainsFunc(removed, func(s string) bool {
			return strings.HasPrefix(s, strings.Fields(want)[0]) && strings.HasSuffix(s, strings.Fields(want)[1])
		}) {
			t.Errorf("removed %v, want %s among them (%v)", removed, want, err)
		}
	}
	if !slices.Contains(e.Files(), path.Join(templates.Root, "tenants/basic/b1.yaml")) {
		t.Errorf("Files() = %v, want the tenant files that lose their objects", e.Files())
	}
}

func onboardedFile(t *testing.T, id string) fstest.MapFS {
	return onboarded(t, id)
}

func mustRead(t *testing.T, m fstest.MapFS) []byte {
	t.Helper()
	for p, f := range m {
		if strings.HasSuffix(p, "/b3.yaml") {
			return f.Data
		}
	}
	t.Fatal("no b3.yaml")
	return nil
}

func TestUnintendedChangesAreNamed(t *testing.T) {
	base := onboarded(t, "b1", "b2", "p1")
	onboard := `{"tenant_id":"b3","tenant_tier":"basic","release_version":"0.0"}`
	for name, tt := range map[string]struct {
		kind  message.Kind
		body  string
		edit  func(after fstest.MapFS)
		wants []string // each must appear in the error
	}{
		"onboarding also edits another tenant": {message.Onboarding, onboard, func(a fstest.MapFS) {
			f := a[path.Join(templates.Root, "tenants/basic/b1.yaml")]
			f.Data = []byte(strings.Replace(string(f.Data), "tenantId: b1", "tenantId: b9", 1))
		}, []string{"change HelmRelease flux-system/b1-basic", "spec.values.tenantId"}},
		"onboarding drops another tenant's entry": {message.Onboarding, onboard, func(a fstest.MapFS) {
			f := a[path.Join(templates.Root, "tenants/basic/kustomization.yaml")]
			f.Data = []byte(strings.Replace(string(f.Data), "  - b2.yaml\n", "", 1))
		}, []string{"remove HelmRelease flux-system/b2-basic (" + templates.Root + "/tenants/basic/b2.yaml)"}},
		"onboarding not listed": {message.Onboarding, onboard, func(a fstest.MapFS) {
			f := a[path.Join(templates.Root, "tenants/basic/kustomization.yaml")]
			f.Data = []byte(strings.Replace(string(f.Data), "  - b3.yaml", "", 1))
		}, []string{"would not add any object of " + templates.Root + "/tenants/basic/b3.yaml"}},
		"offboarding leaves the entry and another file": {message.Offboarding, `{"tenant_id":"b1","tenant_tier":"basic"}`, func(a fstest.MapFS) {
			put(a, "tenants/basic/b1.yaml", string(base[path.Join(templates.Root, "tenants/basic/b1.yaml")].Data))
			f := a[path.Join(templates.Root, "tenants/basic/kustomization.yaml")]
			f.Data = append(f.Data, "\n  - b1.yaml\n"...)
		}, []string{"would not remove every object of " + templates.Root + "/tenants/basic/b1.yaml"}},
		"deployment changes more than the release": {message.Deployment, `{"tenant_tier":"basic","release_version":"2.0"}`, func(a fstest.MapFS) {
			f := a[path.Join(templates.Root, "tenants/basic/b2.yaml")]
			f.Data = []byte(strings.Replace(string(f.Data), "interval: 1m0s", "interval: 5m0s", 1))
		}, []string{"change HelmRelease flux-system/b2-basic", "spec.interval"}},
		"deployment of basic touches premium": {message.Deployment, `{"tenant_tier":"basic","release_version":"2.0"}`, func(a fstest.MapFS) {
			f := a[path.Join(templates.Root, "tenants/premium/p1.yaml")]
			f.Data = []byte(strings.Replace(string(f.Data), `version: "0.0.x"`, `version: "2.0.x"`, 1))
		}, []string{"change HelmRelease flux-system/p1-premium", "spec.chart"}},
		"deployment adds an object": {message.Deployment, `{"tenant_tier":"basic","release_version":"2.0"}`, func(a fstest.MapFS) {
			f := a[path.Join(templates.Root, "tenants/basic/b2.yaml")]
			f.Data = append(f.Data, "\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: extra\n"...)
		}, []string{"add Namespace extra"}},
	} {
		t.Run(name, func(t *testing.T) {
			before := clone(base)
			req, after, changed := planned(t, before, tt.kind, tt.body)
			c := NewChecker(layout)
			if err := c.Check(mem{before}, mem{after}, req, changed); err != nil {
				t.Fatalf("the plan itself: %v", err)
			}
			tt.edit(after)
			changed = append(changed, path.Join(templates.Root, "tenants/basic/b1.yaml"), path.Join(templates.Root, "tenants/premium/p1.yaml"))
			// From the paths changed, and from the after tree listed in full.
			for _, a := range []Source{mem{after}, listed{mem{after}}} {
				err := NewChecker(layout).Check(mem{before}, a, req, changed)
				if _, ok := As(err); !ok {
					t.Fatalf("Check = %v, want an intent error", err)
				}
				for _, w := range tt.wants {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
			}
		})
	}
}

// TestTransformersAreBuilt: a kustomization that transforms (a namespace,
// a prefix) is compared by building it, each object traced to its file.
func TestTransformersAreBuilt(t *testing.T) {
	base := onboarded(t, "b1", "b2")
	k := path.Join(templates.Root, "tenants/basic/kustomization.yaml")
	base[k].Data = append(slices.Clone(base[k].Data), "\ncommonAnnotations:\n  team: saas\n"...)
	c := NewChecker(layout)
	req, after, changed := planned(t, base, message.Onboarding, `{"tenant_id":"b3","tenant_tier":"basic","release_version":"0.0"}`)
	if err := c.Check(mem{base}, mem{after}, req, changed); err != nil {
		t.Fatalf("onboarding with a transformer: %v", err)
	}
	// The same onboarding, which also changes the transformer: every
	// object of the tier changes.
	after[k].Data = []byte(strings.Replace(string(after[k].Data), "team: saas", "team: other", 1))
	err := c.Check(mem{base}, mem{after}, req, changed)
	if err == nil || !strings.Contains(err.Error(), "change HelmRelease flux-system/b1-basic ("+templates.Root+"/tenants/basic/b1.yaml: metadata.annotations") {
		t.Fatalf("Check = %v, want b1 changed by the annotation", err)
	}
	req, after, changed = planned(t, base, message.Offboarding, `{"tenant_id":"b1","tenant_tier":"basic"}`)
	if err := c.Check(mem{base}, mem{after}, req, changed); err != nil {
		t.Fatalf("offboarding with a transformer: %v", err)
	}
}
