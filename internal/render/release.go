package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrNoReleaseField: the file lacks a value the template sets from the
// release, so a deployment cannot tell what to change in it.
var ErrNoReleaseField = errors.New("no release field where the template sets one")

// ErrNotInPlace: the file has the object the template names, but its
// release value cannot be set in place alone: it is shared through an
// anchor, the object or the key is there twice, the value comes from a
// merge key or an alias, is a block scalar. A deployment leaves the file
// to a person rather than change what the message does not name.
var ErrNotInPlace = errors.New("the release cannot be set in place")

// releaseSentinel stands for the release while the template is read.
const releaseSentinel = "7070707.7070707"

// SetRelease changes, in current, only the values that the template sets
// from {RELEASE_VERSION} (the chart version), to what v renders them as.
// Every other byte stays: hand edits, fields the template gained or lost
// since the file was written, the values Flux image automation owns. A
// deployment does what its message names and nothing else: the result,
// parsed, differs from current only at those values of the objects the
// template names (by kind, namespace and name), or SetRelease fails.
func SetRelease(current, tmpl []byte, v Vars) ([]byte, error) {
	release := v.ReleaseVersion
	v.ReleaseVersion = releaseSentinel
	probe, err := Render(tmpl, v)
	if err != nil {
		return nil, err
	}
	fields, err := releaseFields(probe)
	if err != nil {
		return nil, fmt.Errorf("read the template: %w", err)
	}
	if len(fields) == 0 {
		return current, nil
	}
	before, err := parse(current)
	if err != nil {
		return nil, err
	}
	lines := strings.SplitAfter(string(current), "\n")
	var edits []edit
	wants := map[*yaml.Node]string{}
	for _, f := range fields {
		at := strings.Join(f.path, ".")
		doc, err := find(before, f.obj)
		if err != nil {
			return nil, err
		}
		chain, err := locate(doc, f.path)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", f.obj, at, err)
		}
		n := chain[len(chain)-1]
		want := strings.ReplaceAll(f.value, releaseSentinel, release)
		if n.Value == want {
			continue
		}
		if err := unshared(before, chain, f.path); err != nil {
			return nil, fmt.Errorf("%s %s: %w", f.obj, at, err)
		}
		e, err := replace(lines, n, want)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", f.obj, at, err)
		}
		edits = append(edits, e)
		wants[n] = want
	}
	if len(edits) == 0 {
		return current, nil
	}
	out := apply(lines, edits)
	// What was written must read back as current does, but for the values
	// set: a check that does not trust the reasoning above.
	after, err := parse(out)
	if err != nil {
		return nil, fmt.Errorf("%w: the result would not parse: %v", ErrNotInPlace, err)
	}
	if err := sameExcept(before, after, wants); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotInPlace, err)
	}
	return out, nil
}

// object names a Kubernetes object the way a kustomization tells them
// apart: two with the same name in different namespaces are different.
type object struct{ kind, namespace, name string }

func (o object) String() string {
	name := o.name
	if o.namespace != "" {
		name = o.namespace + "/" + name
	}
	return strings.TrimSpace(o.kind + " " + name)
}

// field is a value the template sets from the release.
type field struct {
	obj   object   // the object it is in, as the template renders it
	path  []string // keys from the document's root
	value string   // with the sentinel for the release
}

func releaseFields(rendered []byte) ([]field, error) {
	docs, err := parse(rendered)
	if err != nil {
		return nil, err
	}
	var out []field
	for _, d := range docs {
		root := rootMapping(d)
		if root == nil {
			continue
		}
		obj := identity(root)
		var walk func(n *yaml.Node, at []string) error
		walk = func(n *yaml.Node, at []string) error {
			switch n.Kind {
			case yaml.MappingNode:
				for i := 0; i+1 < len(n.Content); i += 2 {
					if err := walk(n.Content[i+1], append(at[:len(at):len(at)], n.Content[i].Value)); err != nil {
						return err
					}
				}
			case yaml.SequenceNode:
				if holds(n, releaseSentinel) {
					return fmt.Errorf("the release is set inside a list (%s), which a deployment does not edit", strings.Join(at, "."))
				}
			case yaml.ScalarNode:
				if strings.Contains(n.Value, releaseSentinel) {
					out = append(out, field{obj, at, n.Value})
				}
			}
			return nil
		}
		if err := walk(root, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// holds reports whether a scalar below n contains text.
func holds(n *yaml.Node, text string) bool {
	if n.Kind == yaml.ScalarNode {
		return strings.Contains(n.Value, text)
	}
	for _, c := range n.Content {
		if holds(c, text) {
			return true
		}
	}
	return false
}

// parse reads every document of a YAML stream.
func parse(content []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(content))
	var out []*yaml.Node
	for {
		d := new(yaml.Node)
		err := dec.Decode(d)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
}

// rootMapping is the mapping at the root of document d, or nil.
func rootMapping(d *yaml.Node) *yaml.Node {
	if len(d.Content) > 0 && d.Content[0].Kind == yaml.MappingNode {
		return d.Content[0]
	}
	return nil
}

func identity(root *yaml.Node) object {
	return object{
		kind:      get(root, "kind"),
		namespace: get(root, "metadata", "namespace"),
		name:      get(root, "metadata", "name"),
	}
}

// find is the root of the one document in docs that is obj.
func find(docs []*yaml.Node, obj object) (*yaml.Node, error) {
	var found []*yaml.Node
	for _, d := range docs {
		if root := rootMapping(d); root != nil && identity(root) == obj {
			found = append(found, root)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%w: no %s", ErrNoReleaseField, obj)
	case 1:
		return found[0], nil
	}
	return nil, fmt.Errorf("%w: %s is in the file %d times (lines %d and %d)", ErrNotInPlace, obj, len(found), found[0].Line, found[1].Line)
}

// get reads the scalar at path, through aliases (reading is safe), or "".
func get(n *yaml.Node, path ...string) string {
	for _, key := range path {
		n = resolve(n)
		if n == nil || n.Kind != yaml.MappingNode {
			return ""
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := resolve(n.Content[i]); k != nil && k.Kind == yaml.ScalarNode && k.Value == key {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	if n = resolve(n); n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}
