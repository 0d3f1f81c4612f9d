package intent

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"
	"sync"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/kustomization"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/render"
)

// tree is what a Kustomization folder builds, when every kustomization in
// it only lists plain files and folders: the files it applies.
type tree struct {
	files  *fileMap            // path -> content id
	lists  map[string][]string // folder of a kustomization -> its entries
	simple bool                // false: kustomize must build it to tell
	// missing: the folder does not exist on this side (it builds nothing).
	missing bool
}

// resolve follows the kustomizations of dir in src.
func (c *Checker) resolve(src Source, dir string) (*tree, error) {
	hash, err := src.DirHash(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// A folder applied on its own (a shard folder with a Kustomization
		// of its own) that the other side does not have builds nothing.
		return &tree{files: newFileMap(), lists: map[string][]string{}, simple: true, missing: true}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	key := dir + "@" + hash
	if t, ok := c.trees.get(key); ok {
		return t, nil
	}
	t := &tree{files: newFileMap(), lists: map[string][]string{}, simple: true}
	if err := c.walk(src, dir, t, 0); err != nil {
		return nil, err
	}
	c.trees.put(key, t)
	return t, nil
}

func (c *Checker) walk(src Source, dir string, t *tree, depth int) error {
	present, dirs, err := src.Entries(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	kname, ok := kustomizationIn(present)
	if !ok || depth > 16 {
		t.simple = false
		return nil
	}
	kid := present[kname]
	k := path.Join(dir, kname)
	content, err := src.ReadBlob(kid)
	if err != nil {
		return fmt.Errorf("read %s: %w", k, err)
	}
	if !c.plain(kid, content) {
		t.simple = false
		return nil
	}
	entries, err := kustomization.Resources(content)
	if err != nil {
		t.simple = false // kustomize will say what is wrong with it
		return nil
	}
	t.lists[dir] = entries
	for _, e := range entries {
		if e == "" || strings.ContainsAny(e, "/:") || e == "." || e == ".." {
			t.simple = false
			return nil
		}
		p := dir + "/" + e
		if id, ok := present[e]; ok {
			if _, dup := t.files.get(p); dup {
				t.simple = false
				return nil
			}
			t.files.set(p, strings.Clone(id))
		} else if slices.Contains(dirs, e) {
			if err := c.walk(src, p, t, depth+1); err != nil {
				return err
			}
		} else {
			t.simple = false // a missing file: kustomize refuses it
			return nil
		}
	}
	return nil
}

// kustomizationIn returns the name of the one kustomization file among a
// folder's files, under any name kustomize reads (kustomization.yaml,
// .yml, Kustomization); false when there is none or more than one, which
// kustomize refuses.
func kustomizationIn(files map[string]string) (string, bool) {
	var found []string
	for _, n := range konfig.RecognizedKustomizationFileNames() {
		if _, ok := files[n]; ok {
			found = append(found, n)
		}
	}
	if len(found) != 1 {
		return "", false
	}
	return found[0], true
}

// fileIDs is a Source that gives one file's content id without listing
// its folder (a git snapshot).
type fileIDs interface {
	FileID(name string) (string, error)
}

// derive is resolve for after, from tb (before) and the paths the change
// touches, which must be every path that differs: a tier of 10,000 tenants
// is not listed again for a change of one. It returns the tree and the
// files whose objects may differ; false when the change is of a kind it
// does not follow (then resolve decides).
func (c *Checker) derive(tb *tree, after Source, dir string, changed []string) (*tree, []string, bool) {
	ids, ok := after.(fileIDs)
	if !ok || tb.missing {
		return nil, nil, false // a folder new in after is walked whole
	}
	ta := &tree{files: tb.files.clone(), lists: maps.Clone(tb.lists), simple: true}
	var cands []string
	// The kustomizations first, a folder before those below it: what they
	// list decides which files count, and whether a folder is reached is
	// decided by its parent's list as the change leaves it.
	var kusts []string
	for _, p := range changed {
		if !strings.HasPrefix(p, dir+"/") {
			continue
		}
		switch base := path.Base(p); {
		case base == "kustomization.yaml":
			kusts = append(kusts, p)
		case slices.Contains(konfig.RecognizedKustomizationFileNames(), base):
			return nil, nil, false // another name kustomize reads: resolve decides
		}
	}
	slices.SortStableFunc(kusts, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	for _, p := range kusts {
		d := path.Dir(p)
		old, reached := ta.lists[d]
		if !reached {
			continue // not reached, or reached anew: walked whole already
		}
		id, err := ids.FileID(p)
		if err != nil {
			return nil, nil, false
		}
		content, err := after.ReadBlob(id)
		if err != nil || !c.plain(id, content) {
			return nil, nil, false
		}
		entries, err := kustomization.Resources(content)
		if err != nil {
			return nil, nil, false
		}
		was := make(map[string]bool, len(old))
		for _, e := range old {
			was[e] = true
		}
		now := make(map[string]bool, len(entries))
		for _, e := range entries {
			if now[e] || e == "" || strings.ContainsAny(e, "/:") || e == "." || e == ".." {
				return nil, nil, false
			}
			now[e] = true
		}
		for _, e := range old {
			if !now[e] {
				cands = append(cands, drop(ta, d+"/"+e)...)
			}
		}
		for _, e := range entries {
			if was[e] {
				continue
			}
			q := d + "/" + e
			if fid, err := ids.FileID(q); err == nil {
				ta.files.set(q, strings.Clone(fid))
				cands = append(cands, q)
				continue
			}
			sub := &tree{files: newFileMap(), lists: map[string][]string{}, simple: true}
			if err := c.walk(after, q, sub, 1); err != nil || !sub.simple {
				return nil, nil, false
			}
			for _, f := range sub.files.paths() {
				fid, _ := sub.files.get(f)
				ta.files.set(f, fid)
				cands = append(cands, f)
			}
			maps.Copy(ta.lists, sub.lists)
		}
		ta.lists[d] = entries
	}
	for _, p := range changed {
		if path.Base(p) == "kustomization.yaml" || !strings.HasPrefix(p, dir+"/") {
			continue
		}
		if _, listed := ta.files.get(p); !listed {
			if _, was := tb.files.get(p); was {
				cands = append(cands, p) // its entry left the list
			}
			continue
		}
		fid, err := ids.FileID(p)
		if err != nil {
			return nil, nil, false // listed but gone: kustomize refuses it
		}
		ta.files.set(p, strings.Clone(fid))
		cands = append(cands, p)
	}
	return ta, cands, true
}

// drop takes a listed file, or a listed folder and all below it, out of
// t, and returns the files taken out.
func drop(t *tree, p string) []string {
	if _, ok := t.files.get(p); ok {
		t.files.del(p)
		return []string{p}
	}
	out := t.files.under(p)
	for _, f := range out {
		t.files.del(f)
	}
	for d := range t.lists {
		if d == p || strings.HasPrefix(d, p+"/") {
			delete(t.lists, d)
		}
	}
	return out
}

// plain reports whether a kustomization only lists resources: no
// namespace, prefix, labels, patches, generators, components or bases.
func (c *Checker) plain(id string, content []byte) bool {
	if v, ok := c.plains.get(id); ok {
		return v
	}
	rest, err := kustomization.Rest(content)
	ok := err == nil
	if ok {
		var k types.Kustomization
		if err := k.Unmarshal(rest); err != nil {
			ok = false
		} else {
			k.APIVersion, k.Kind, k.MetaData, k.Resources = "", "", nil, nil
			ok = reflect.DeepEqual(k, types.Kustomization{})
		}
	}
	c.plains.put(strings.Clone(id), ok)
	return ok
}

// object is one document of a file, by its id.
type object struct {
	id, kind string
	body     map[string]any
}

// fileObjects returns the objects a file declares.
func (c *Checker) fileObjects(src Source, name, id string) ([]object, error) {
	if v, ok := c.objects.get(id); ok {
		return v, nil
	}
	content, err := src.ReadBlob(id)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	objs, err := decode(content)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.objects.put(strings.Clone(id), objs)
	return objs, nil
}

// decode reads the objects of a YAML stream.
func decode(content []byte) ([]object, error) {
	var out []object
	for i, doc := range gitops.Documents(content) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var body map[string]any
		if err := yaml.Unmarshal([]byte(doc), &body); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		for _, o := range gitops.Expand(body) { // nil: comments only
			out = append(out, objectOf(o))
		}
	}
	return out, nil
}

func objectOf(body map[string]any) object {
	kind, _ := body["kind"].(string)
	meta, _ := body["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	id := kind + " " + name
	if ns != "" {
		id = kind + " " + ns + "/" + name
	}
	return object{id: id, kind: kind, body: body}
}

// originAnnotation is where kustomize records the file an object came
// from, when asked to (buildMetadata: [originAnnotations]).
const originAnnotation = "config.kubernetes.io/origin"

// errNotBuilt: one side does not build, so there is nothing to compare.
// Validation refuses a change that does not build; a branch that did not
// build before the change gives no objects to compare it with.
var errNotBuilt = errors.New("does not build")

// diffBuilt builds dir in before and after with kustomize, each object
// traced to its file, and compares them.
func (c *Checker) diffBuilt(before, after Source, dir string) ([]delta, func(string) bool, error) {
	ob, err := buildTraced(before, dir)
	if err != nil {
		return nil, nil, errNotBuilt // what Flux applies now is not known from the tree
	}
	oa, err := buildTraced(after, dir)
	if err != nil {
		return nil, nil, errNotBuilt // validation refuses it, with kustomize's words
	}
	var out []delta
	origins := map[string]bool{}
	for id, a := range oa {
		origins[a.file] = true
		b, ok := ob[id]
		switch {
		case !ok:
			out = append(out, delta{Delta: Delta{Op: opAdded, Object: id, File: a.file}, kind: a.kind, after: a.body})
		case b.file != a.file || !reflect.DeepEqual(b.body, a.body):
			out = append(out, delta{Delta: Delta{Op: opChanged, Object: id, File: a.file, Fields: differing(b.body, a.body)},
				kind: a.kind, from: b.file, before: b.body, after: a.body})
		}
	}
	for id, b := range ob {
		if _, ok := oa[id]; !ok {
			out = append(out, delta{Delta: Delta{Op: opRemoved, Object: id, File: b.file}, kind: b.kind, before: b.body})
		}
	}
	slices.SortFunc(out, func(a, b delta) int { return strings.Compare(a.Object+a.Op, b.Object+b.Op) })
	return out, func(f string) bool { return origins[f] }, nil
}

type traced struct {
	object
	file string
}

// buildTraced runs kustomize over dir with origin annotations on, and
// returns its objects by id with the file each came from.
func buildTraced(src Source, dir string) (map[string]traced, error) {
	fsys := filesys.MakeFsInMemory()
	if err := copyTree(src, dir, fsys); err != nil {
		return nil, err
	}
	files, _, err := src.Entries(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	kname, ok := kustomizationIn(files)
	if !ok {
		return nil, fmt.Errorf("%s: no kustomization file, or more than one", dir)
	}
	root := "/" + dir + "/" + kname
	content, err := fsys.ReadFile(root)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir+"/"+kname, err)
	}
	var k types.Kustomization
	if err := k.Unmarshal(content); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", dir, kname, err)
	}
	if !slices.Contains(k.BuildMetadata, types.OriginAnnotations) {
		k.BuildMetadata = append(k.BuildMetadata, types.OriginAnnotations)
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		return nil, fmt.Errorf("write %s/%s: %w", dir, kname, err)
	}
	if err := fsys.WriteFile(root, out); err != nil {
		return nil, err
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, "/"+dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	objs := map[string]traced{}
	for _, r := range m.Resources() {
		file := dir
		if o, err := r.GetOrigin(); err == nil && o != nil && o.Path != "" {
			file = path.Clean(path.Join(dir, o.Path))
		}
		body, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
		}
		stripOrigin(body)
		// Through JSON, as a file's objects are read, so equal objects
		// compare equal whichever way they were read.
		js, err := yaml.Marshal(body)
		if err != nil {
			return nil, err
		}
		var norm map[string]any
		if err := yaml.Unmarshal(js, &norm); err != nil {
			return nil, err
		}
		o := objectOf(norm)
		objs[o.id] = traced{object: o, file: file}
	}
	return objs, nil
}

func stripOrigin(body map[string]any) {
	meta, _ := body["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		return
	}
	delete(ann, originAnnotation)
	if len(ann) == 0 {
		delete(meta, "annotations")
	}
}

// copyTree copies what dir's kustomizations can reach: the folder itself.
// A kustomization that reaches outside it (../) is refused by Flux's own
// kustomize-controller too (it builds inside the source's root only), and
// here it fails to build.
func copyTree(src Source, dir string, fsys filesys.FileSystem) error {
	files, dirs, err := src.Entries(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for name, id := range files {
		content, err := src.ReadBlob(id)
		if err != nil {
			return fmt.Errorf("read %s/%s: %w", dir, name, err)
		}
		if err := fsys.WriteFile("/"+dir+"/"+name, content); err != nil {
			return err
		}
	}
	for _, d := range dirs {
		if err := copyTree(src, dir+"/"+d, fsys); err != nil {
			return err
		}
	}
	return nil
}

// tenantObjects are the objects (by id) that the template of req's tier
// renders for req's tenant.
func (c *Checker) tenantObjects(src Source, req message.Request) (map[string]bool, error) {
	name := c.layout.TenantTemplate(req.Tier)
	tmpl, err := src.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	out, err := render.Render(tmpl, render.Vars{TenantID: req.TenantID, ReleaseVersion: "0.0"})
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	objs, err := decode(out)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	ids := make(map[string]bool, len(objs))
	for _, o := range objs {
		ids[o.id] = true
	}
	return ids, nil
}

// releaseFields are the paths, by kind of the objects a template renders,
// of the values that hold {RELEASE_VERSION}: what a deployment may change,
// on any kind (a HelmRelease's chart version, a label of a Namespace).
func (c *Checker) releaseFields(src Source, tmpl string) (map[string][][]string, error) {
	content, err := src.ReadFile(tmpl)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", tmpl, err)
	}
	key := fmt.Sprintf("release@%x", sha256.Sum256(content))
	if v, ok := c.fields.get(key); ok {
		return v, nil
	}
	const sentinel = "7070707.7070707"
	text := strings.NewReplacer("{RELEASE_VERSION}", sentinel, "{TENANT_ID}", "t", "{ENVIRONMENT_ID}", "e").Replace(string(content))
	paths := map[string][][]string{}
	for _, doc := range gitops.Documents([]byte(text)) {
		var body map[string]any
		if yaml.Unmarshal([]byte(doc), &body) != nil {
			continue // the template's own errors are validation's to report
		}
		kind, _ := body["kind"].(string)
		var walk func(v any, at []string)
		walk = func(v any, at []string) {
			switch t := v.(type) {
			case map[string]any:
				for k, x := range t {
					walk(x, append(slices.Clone(at), k))
				}
			case []any:
				for _, x := range t {
					if strings.Contains(fmt.Sprint(x), sentinel) {
						paths[kind] = append(paths[kind], at) // the whole list
						return
					}
				}
			case string:
				if strings.Contains(t, sentinel) {
					paths[kind] = append(paths[kind], at)
				}
			}
		}
		walk(body, nil)
	}
	c.fields.put(key, paths)
	return paths, nil
}

// differing lists the paths (up to three levels deep) at which two
// objects differ.
func differing(a, b map[string]any) []string {
	if reflect.DeepEqual(a, b) {
		return nil
	}
	var out []string
	var walk func(a, b any, at string, depth int)
	walk = func(a, b any, at string, depth int) {
		ma, okA := a.(map[string]any)
		mb, okB := b.(map[string]any)
		if !okA || !okB || depth == 3 {
			if !reflect.DeepEqual(a, b) {
				out = append(out, at)
			}
			return
		}
		keys := map[string]bool{}
		for k := range ma {
			keys[k] = true
		}
		for k := range mb {
			keys[k] = true
		}
		for k := range keys {
			p := k
			if at != "" {
				p = at + "." + k
			}
			walk(ma[k], mb[k], p, depth+1)
		}
	}
	walk(a, b, "", 0)
	slices.Sort(out)
	return out
}

// lru is a small bounded cache, safe for concurrent use.
type lru[V any] struct {
	mu    sync.Mutex
	limit int
	m     map[string]V
	order []string
}

func newLRU[V any](limit int) *lru[V] { return &lru[V]{limit: limit, m: map[string]V{}} }

func (l *lru[V]) get(k string) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.m[k]
	return v, ok
}

func (l *lru[V]) put(k string, v V) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.m[k]; ok {
		return
	}
	l.m[k] = v
	l.order = append(l.order, k)
	if len(l.order) > l.limit {
		delete(l.m, l.order[0])
		l.order = l.order[1:]
	}
}
