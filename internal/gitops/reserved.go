package gitops

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tenant-worker/tenant-worker/internal/reject"
)

// object names a Kubernetes object as it is applied: kind, namespace (empty
// for cluster-scoped kinds, or when the file leaves it to its
// Kustomization) and name.
type object struct{ kind, namespace, name string }

func (o object) String() string {
	if o.namespace == "" {
		return o.kind + "/" + o.name
	}
	return o.kind + " " + o.namespace + "/" + o.name
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#[^\r\n]*)?\r?$`)

// Documents splits a YAML stream at its "---" lines, as kustomize and Flux
// read multi-document files, with either line end ("---\r\n" too: a file
// saved on Windows is read whole by kustomize, so it must be here).
func Documents(content []byte) []string { return docSeparator.Split(string(content), -1) }

// objects lists the objects the YAML documents of content declare;
// documents that are not Kubernetes objects are passed over, and lists
// (a kind ending in List, with items) stand for their items, as kustomize
// reads them.
func objects(content []byte) []object {
	var out []object
	for _, doc := range Documents(content) {
		var body map[string]any
		if yaml.Unmarshal([]byte(doc), &body) != nil {
			continue
		}
		for _, o := range Expand(body) {
			kind, _ := o["kind"].(string)
			meta, _ := o["metadata"].(map[string]any)
			name, _ := meta["name"].(string)
			ns, _ := meta["namespace"].(string)
			if kind != "" && name != "" {
				out = append(out, object{kind, ns, name})
			}
		}
	}
	return out
}

// Expand returns the objects a document stands for, as kustomize reads
// it: a list (kind FooList or List, with an items field) stands for its
// items, lists within it too; nil items, for nothing; anything else, for
// itself.
func Expand(body map[string]any) []map[string]any {
	if body == nil {
		return nil
	}
	kind, _ := body["kind"].(string)
	items, ok := body["items"]
	if !strings.HasSuffix(kind, "List") || !ok {
		return []map[string]any{body}
	}
	list, _ := items.([]any)
	var out []map[string]any
	for _, it := range list {
		m, _ := it.(map[string]any)
		out = append(out, Expand(m)...)
	}
	return out
}

// declared walks the whole repository except the tier folders, the
// templates and the ledger, and returns every object its YAML files
// declare, with the file that declares it. What the platform declares is
// read from the tree each time: no list of its names is built in.
func (l Layout) declared(r Reader, tiers []string) (map[object]string, error) {
	skip := map[string]bool{l.TemplatesDir(): true, path.Join(l.Root, ".tenant-worker"): true}
	for _, t := range tiers {
		skip[l.TierDir(t)] = true
	}
	found := map[object]string{}
	var walk func(dir string) error
	walk = func(dir string) error {
		list := dir
		if list == "" {
			list = "."
		}
		names, err := r.ReadDir(list)
		if err != nil {
			return err
		}
		for _, n := range names {
			name := path.Join(dir, n)
			if skip[name] {
				continue
			}
			if strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml") {
				content, err := r.ReadFile(name)
				if errors.Is(err, fs.ErrNotExist) {
					continue // a folder named like a file
				}
				if err != nil {
					return fmt.Errorf("read %s: %w", name, err)
				}
				for _, o := range objects(content) {
					if _, ok := found[o]; !ok {
						found[o] = name
					}
				}
				continue
			}
			if err := walk(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, fmt.Errorf("read what the platform declares: %w", err)
	}
	return found, nil
}

// checkCollisions refuses a tenant whose rendered file would declare an
// object that the rest of the repository declares (same kind, namespace
// and name), or a Namespace that the platform's objects live in: Flux
// would apply both, and offboarding the tenant would let Flux prune what
// the platform needs.
func (p *planner) checkCollisions(id string, rendered []byte) error {
	platform, err := p.declared(p.r, p.tiers)
	if err != nil {
		return err
	}
	namespaces := map[string]string{}
	for o, file := range platform {
		if o.namespace != "" {
			namespaces[o.namespace] = file
		}
	}
	mine := objects(rendered)
	slices.SortFunc(mine, func(a, b object) int { return strings.Compare(a.String(), b.String()) })
	for _, o := range mine {
		if file, ok := platform[o]; ok {
			return reject.Errorf(reject.NameCollision, "tenant %s would declare %s, which %s declares", id, o, file)
		}
		if file, ok := namespaces[o.name]; ok && o.kind == "Namespace" {
			return reject.Errorf(reject.NameCollision, "tenant %s would declare Namespace %s, where %s puts the platform's objects", id, o.name, file)
		}
	}
	return nil
}
