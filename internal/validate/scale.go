package validate

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	"sigs.k8s.io/yaml"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/kustomization"
)

// Indexer is a Source that lists directories with the hashes of their files
// and reads files by hash (a git snapshot). It lets large trees be checked
// without running kustomize over every file, whose cost grows faster than
// the square of the number of resources (2 s for 1,000 tenants, 20 s for
// 2,000).
type Indexer interface {
	Source
	Entries(dir string) (files map[string]string, dirs []string, err error)
	ReadBlob(hash string) ([]byte, error)
}

// fullBuildLimit is the number of resource files up to which kustomize
// builds the whole tree; above it the scalable check runs. Kustomize takes
// about 20 ms for 10 tenants and 100 ms for 200, so the scalable check
// starts early: it costs a few milliseconds at any size.
const fullBuildLimit = 64

// contextEntries is how many unchanged entries of each kustomization stay in
// the pruned build, so kustomize still sees each list's shared resources
// (the tiers list dummy-configmap.yaml first). Each one costs kustomize
// time on every check.
const contextEntries = 4

// errUnsupported sends a tree the scalable check cannot follow (remote
// bases, paths outside a folder) to a full kustomize build.
var errUnsupported = errors.New("layout not supported by the scalable check")

// resourceFile is a file that a kustomization lists: its folder, its name
// there, and the identifier of its content. Held as parts so that listing
// 10,000 tenants allocates nothing per tenant; the strings may share
// memory with a tree or a file, so whatever is kept past a check is cloned
// (see fileKey.clone).
type resourceFile struct {
	fileKey
	hash string
}

// fileKey names a file by folder and name.
type fileKey struct {
	dir, name string
}

func (k fileKey) path() string { return k.dir + "/" + k.name }

// clone copies the strings of k, so that keeping it keeps nothing else.
func (k fileKey) clone() fileKey { return fileKey{strings.Clone(k.dir), strings.Clone(k.name)} }

// keyOf splits a path into its fileKey.
func keyOf(p string) fileKey { return fileKey{path.Dir(p), path.Base(p)} }

// ids caches the resource ids of file contents by blob hash.
type ids struct {
	mu sync.Mutex
	m  map[string][]resid.ResId
}

func (c *ids) get(src Indexer, f resourceFile) ([]resid.ResId, error) {
	c.mu.Lock()
	v, ok := c.m[f.hash]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	content, err := src.ReadBlob(f.hash)
	if err != nil {
		return nil, err
	}
	v, err = resourceIDs(content)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.path(), err)
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) > 200_000 {
		c.m = map[string][]resid.ResId{}
	}
	c.m[strings.Clone(f.hash)] = v
	c.mu.Unlock()
	return v, nil
}

// resourceIDs names each resource of a resource file as kustomize does,
// reading YAML as it does (1.2: a tenant named yes, on or 123 has that
// name): group and version, kind, namespace, name; the items of a list
// are resources of their own, and an empty item is none.
func resourceIDs(content []byte) ([]resid.ResId, error) {
	var out []resid.ResId
	var add func(i int, n *kyaml.RNode, item bool) error
	add = func(i int, n *kyaml.RNode, item bool) error {
		if n.IsNilOrEmpty() {
			if item {
				return nil
			}
			return fmt.Errorf("document %d: kind and metadata.name are required", i+1)
		}
		if n.YNode().Kind != kyaml.MappingNode {
			return fmt.Errorf("document %d: not a mapping", i+1)
		}
		kind := n.GetKind()
		if items := n.Field("items"); strings.HasSuffix(kind, "List") && items != nil {
			elements, err := items.Value.Elements()
			if err != nil && !items.Value.IsNilOrEmpty() {
				return fmt.Errorf("document %d: items: %w", i+1, err)
			}
			for _, it := range elements {
				if err := add(i, it, true); err != nil {
					return err
				}
			}
			return nil
		}
		name, namespace := n.GetName(), n.GetNamespace()
		if kind == "" || name == "" {
			return fmt.Errorf("document %d: kind and metadata.name are required", i+1)
		}
		g, v := resid.ParseGroupVersion(n.GetApiVersion())
		out = append(out, resid.NewResIdWithNamespace(resid.NewGvk(g, v, kind), name, namespace))
		return nil
	}
	for i, doc := range gitops.Documents(content) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		n, err := kyaml.Parse(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if n.IsNilOrEmpty() {
			continue // comments only
		}
		if err := add(i, n, false); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// collect follows the kustomizations from dir and returns every resource
// file they list, with the kustomization files visited.
func collect(src Indexer, dir string, files *[]resourceFile, kusts *[]string, plain *bool) error {
	k := path.Join(dir, "kustomization.yaml")
	content, err := src.ReadFile(k)
	if err != nil {
		return fmt.Errorf("%s: %w", k, err)
	}
	entries, err := kustomization.Resources(content)
	if err != nil {
		return fmt.Errorf("%s: %w", k, err)
	}
	*kusts = append(*kusts, k)
	own, upward := readFields(content)
	if upward && len(*kusts) > 1 {
		// A kustomization below dir whose fields act on every one above
		// it: a pruned build that leaves its folder out would judge the
		// others without them. Kustomize builds the whole tree.
		return errUnsupported
	}
	*plain = *plain && own
	present, dirs, err := src.Entries(dir)
	if err != nil {
		return err
	}
	*files = slices.Grow(*files, len(entries))
	for _, e := range entries {
		if strings.Contains(e, "/") || strings.Contains(e, ":") || e == "." || e == ".." {
			return errUnsupported
		}
		if h, ok := present[e]; ok {
			*files = append(*files, resourceFile{fileKey{dir, e}, h})
		} else if slices.Contains(dirs, e) {
			if err := collect(src, path.Join(dir, e), files, kusts, plain); err != nil {
				return err
			}
		} else {
			return fmt.Errorf("%s lists %s, which does not exist", k, e)
		}
	}
	return nil
}

// contextFor is how many unchanged entries a kustomization of kdir keeps in
// the pruned build of dir: contextEntries in dir's own and the folders it
// lists (the tiers); below them (shard folders, which list tenant files
// only) none when the folder holds a change, and one otherwise.
func contextFor(dir, kdir string, changedDir map[string]bool) int {
	if depth := strings.Count(strings.TrimPrefix(kdir, dir), "/"); depth < 2 {
		return contextEntries
	}
	if changedDir[kdir] {
		return 0
	}
	return 1
}

// pruning is what the pruned build keeps of a tree: the changed files,
// the folders holding a change, and some context.
type pruning struct {
	isFile     func(fileKey) bool
	isChanged  map[fileKey]bool
	changedDir map[string]bool // every folder above a changed path
	kept       map[fileKey]bool
	dropped    map[string]bool // folders left out, with all below them
}

// list filters a kustomization of kdir for the pruned build: changed files
// and folders holding a change stay, and the first context of the others.
// When that keeps nothing (only removals changed the list), one entry
// stays, so that kustomize still builds it; a list of nothing stays as it
// is (resources: []), for kustomize to judge.
func (pr *pruning) list(content []byte, kdir string, context int) ([]byte, error) {
	for _, ctx := range []int{context, max(context, 1)} {
		n, any := 0, false
		pruned, _, err := kustomization.Filter(content, func(e string) bool {
			key := fileKey{kdir, e} // a listed name without "/" (collect checked)
			folder := !pr.isFile(key)
			if pr.isChanged[key] || folder && pr.changedDir[key.path()] {
				pr.kept[key], any = true, true
				return true
			}
			n++
			if n <= ctx {
				pr.kept[key], any = true, true
				delete(pr.dropped, key.path())
				return true
			}
			if folder {
				pr.dropped[key.path()] = true
			}
			return false
		})
		if err != nil || any {
			return pruned, err
		}
	}
	return content, nil
}

// buildLarge checks a large tree: every listed file exists, no two listed
// resources share an id (what kustomize's duplicate check refuses), and
// kustomize builds a pruned copy holding every kustomization with the
// changed entries and a few others, so it still judges the kustomizations
// themselves and every new resource.
func (c *Checker) buildLarge(src Indexer, dir string, changed []string, files []resourceFile, kusts []string, plain bool) error {
	// Where every kustomization only lists resources (plain), nothing
	// transforms ids or makes two resources meet: the index keys ids as
	// kustomize does, and the change is built in parts. Else (a namespace,
	// a prefix, patches, replacements) ids are keyed as written and the
	// change is built in one pruned piece, as before the parts.
	idx := c.dupIndexFor(dir, plain)
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if err := idx.update(c, src, dir, files); err != nil {
		return err
	}
	parts := [][]string{changed}
	if plain {
		parts = buildParts(dir, changed)
	}
	for _, part := range parts {
		if err := buildPruned(src, dir, part, files, kusts, idx); err != nil {
			return err
		}
	}
	return nil
}

// readFields reads a kustomization's fields besides its resources: plain
// when it holds nothing but fields that never change an id or make two
// resources meet (idNeutral), and upward when it holds a field that
// kustomize hands up to every kustomization above it (upwardFields). One
// that cannot be read is not plain, and left to kustomize in one build,
// which reads it as this does and refuses it wherever the build holds it.
func readFields(content []byte) (plain, upward bool) {
	rest, err := kustomization.Rest(content)
	if err != nil {
		return false, false
	}
	var m map[string]any
	if err := yaml.Unmarshal(rest, &m); err != nil {
		return false, false
	}
	plain = true
	for key, v := range m {
		if !isField(key, idNeutral...) || isField(key, "labels") && !defaultFields(v) {
			plain = false
		}
		upward = upward || isField(key, upwardFields...)
	}
	return plain, upward
}

// isField reports whether key names one of the fields, as kustomize reads
// field names: in any case (it reads YAML as JSON).
func isField(key string, fields ...string) bool {
	return slices.ContainsFunc(fields, func(f string) bool { return strings.EqualFold(f, key) })
}

// upwardFields are the kustomization fields kustomize merges into every
// kustomization above the one that holds them (its resource accumulator's
// transformer configuration): configurations can point a parent's
// commonLabels at metadata.name, crds add field specs the parent's
// transformers follow.
var upwardFields = []string{"configurations", "crds"}

// defaultFields reports whether a labels field (a list of entries) leaves
// every entry's pairs to kustomize's own places for labels: an entry's
// fields (custom fieldSpecs) may write a pair at any path, metadata.name
// or metadata.namespace too.
func defaultFields(labels any) bool {
	if labels == nil {
		return true
	}
	entries, ok := labels.([]any)
	if !ok {
		return false
	}
	for _, e := range entries {
		entry, ok := e.(map[string]any)
		if !ok {
			return false
		}
		for k := range entry {
			if isField(k, "fields") {
				return false
			}
		}
	}
	return true
}

// idNeutral are the kustomization fields besides resources that leave
// every resource's id (group, version, kind, name, namespace) as written
// and act on each resource alone: labels and annotations added to each,
// the order of the output, where each came from (labels only without
// fields of their own: see defaultFields), compared as isField does.
// A namespace, a prefix or suffix, patches, replacements, generators and
// components change ids or make resources meet: not here.
var idNeutral = []string{
	"apiVersion", "kind", "metadata",
	"commonAnnotations", "commonLabels", "labels", "sortOptions", "buildMetadata",
}

// buildPart bounds the changed paths one pruned build holds. Kustomize
// checks each resource it adds against every one added before it, so one
// build of a batch's changes costs the square of the batch: 1,000 new
// tenants took 2.1 s to validate, 500 took 0.74 s. In parts the cost
// follows the batch. Each part still holds every kustomization on the way
// to its changes, with the same context; two changed resources in
// different parts are checked against each other by the id index, as
// changed and unchanged ones always were.
const buildPart = 128

// buildParts splits the changed paths below dir into parts of at most
// buildPart, in path order, so that a part's changes share few folders.
// There is always one part, empty when nothing below dir changed, so that
// the tree is still built.
func buildParts(dir string, changed []string) [][]string {
	var below []string
	for _, p := range changed {
		if strings.HasPrefix(p, dir+"/") {
			below = append(below, p)
		}
	}
	slices.Sort(below)
	below = slices.Compact(below)
	if len(below) == 0 {
		return [][]string{nil}
	}
	return slices.Collect(slices.Chunk(below, buildPart))
}

// buildPruned runs kustomize over a pruned copy of the tree at dir: the
// changed paths, every kustomization above them, and some context.
func buildPruned(src Indexer, dir string, changed []string, files []resourceFile, kusts []string, idx *dupIndex) error {
	isChanged := map[fileKey]bool{}
	for _, p := range changed {
		isChanged[keyOf(p)] = true
	}
	// Folders holding a changed path stay whole; the others are context
	// like unchanged files, and what they list is left out with them.
	pr := &pruning{isFile: func(k fileKey) bool { _, ok := idx.files[k]; return ok }, isChanged: isChanged,
		changedDir: map[string]bool{}, kept: map[fileKey]bool{}, dropped: map[string]bool{}}
	for _, p := range changed {
		for d := path.Dir(p); d != "." && d != "/" && !pr.changedDir[d]; d = path.Dir(d) {
			pr.changedDir[d] = true
		}
	}
	fsys := filesys.MakeFsInMemory()
	for _, k := range kusts {
		kdir := path.Dir(k)
		if pr.dropped[kdir] || pr.dropped[path.Dir(kdir)] {
			pr.dropped[kdir] = true // collect lists a folder before those below it
			continue
		}
		content, err := src.ReadFile(k)
		if err != nil {
			return err
		}
		pruned, err := pr.list(content, kdir, contextFor(dir, kdir, pr.changedDir))
		if err != nil {
			return fmt.Errorf("kustomize build %s: %w", dir, err)
		}
		if err := fsys.WriteFile("/"+k, pruned); err != nil {
			return err
		}
	}
	for _, f := range files {
		if !pr.kept[f.fileKey] {
			continue
		}
		content, err := src.ReadBlob(f.hash)
		if err != nil {
			return err
		}
		if err := fsys.WriteFile("/"+f.path(), content); err != nil {
			return err
		}
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	if _, err := k.Run(fsys, "/"+dir); err != nil {
		return fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return nil
}
