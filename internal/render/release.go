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

// releaseSentinel stands for the release while the template is read.
const releaseSentinel = "7070707.7070707"

// SetRelease changes, in current, only the values that the template sets
// from {RELEASE_VERSION} (the chart version), to what v renders them as.
// Every other byte stays: hand edits, fields the template gained or lost
// since the file was written, the values Flux image automation owns. A
// deployment does what its message names and nothing else.
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
	docs, err := documents(current)
	if err != nil {
		return nil, err
	}
	lines := strings.SplitAfter(string(current), "\n")
	for _, f := range fields {
		doc := find(docs, f.kind, f.name)
		if doc == nil {
			return nil, fmt.Errorf("%w: no %s %s", ErrNoReleaseField, f.kind, f.name)
		}
		n := lookup(doc, f.path)
		if n == nil || n.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%w: %s %s has no %s", ErrNoReleaseField, f.kind, f.name, strings.Join(f.path, "."))
		}
		want := strings.ReplaceAll(f.value, releaseSentinel, release)
		if n.Value == want {
			continue
		}
		if err := replaceScalar(lines, n, want); err != nil {
			return nil, fmt.Errorf("%s %s %s: %w", f.kind, f.name, strings.Join(f.path, "."), err)
		}
	}
	out := []byte(strings.Join(lines, ""))
	// What was written must read back as meant, in the same documents.
	after, err := documents(out)
	if err != nil || len(after) != len(docs) {
		return nil, fmt.Errorf("setting the release would break the file: %v", err)
	}
	for _, f := range fields {
		n := lookup(find(after, f.kind, f.name), f.path)
		if want := strings.ReplaceAll(f.value, releaseSentinel, release); n == nil || n.Value != want {
			return nil, fmt.Errorf("setting the release of %s %s did not give %q", f.kind, f.name, want)
		}
	}
	return out, nil
}

// field is a value the template sets from the release.
type field struct {
	kind, name string   // the object it is in
	path       []string // keys from the document's root
	value      string   // with the sentinel for the release
}

func releaseFields(rendered []byte) ([]field, error) {
	docs, err := documents(rendered)
	if err != nil {
		return nil, err
	}
	var out []field
	for _, d := range docs {
		kind, name := identity(d)
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
					out = append(out, field{kind, name, at, n.Value})
				}
			}
			return nil
		}
		if err := walk(d, nil); err != nil {
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

// documents parses a YAML stream into the root mapping of each document.
func documents(content []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(content))
	var out []*yaml.Node
	for {
		var d yaml.Node
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(d.Content) > 0 && d.Content[0].Kind == yaml.MappingNode {
			out = append(out, d.Content[0])
		}
	}
}

func identity(doc *yaml.Node) (kind, name string) {
	if n := lookup(doc, []string{"kind"}); n != nil {
		kind = n.Value
	}
	if n := lookup(doc, []string{"metadata", "name"}); n != nil {
		name = n.Value
	}
	return kind, name
}

func find(docs []*yaml.Node, kind, name string) *yaml.Node {
	for _, d := range docs {
		if k, n := identity(d); k == kind && n == name {
			return d
		}
	}
	return nil
}

func lookup(n *yaml.Node, path []string) *yaml.Node {
	if n == nil {
		return nil
	}
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// replaceScalar writes want in place of the one-line scalar n, in the
// quoting n has.
func replaceScalar(lines []string, n *yaml.Node, want string) error {
	if n.Line < 1 || n.Line > len(lines) {
		return errors.New("value outside the file")
	}
	line := []rune(lines[n.Line-1])
	start := n.Column - 1
	if start < 0 || start >= len(line) {
		return errors.New("value outside its line")
	}
	var end int
	var text string
	switch n.Style {
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		q := line[start]
		end = start + 1
		for end < len(line) && line[end] != q {
			if q == '"' && line[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(line) {
			return errors.New("a quoted value over several lines")
		}
		end++
		text = string(q) + want + string(q)
	case 0, yaml.TaggedStyle:
		end = start
		for end < len(line) && line[end] != '\n' && line[end] != '\r' &&
			!(line[end] == '#' && end > start && (line[end-1] == ' ' || line[end-1] == '\t')) {
			end++
		}
		for end > start && (line[end-1] == ' ' || line[end-1] == '\t') {
			end--
		}
		if string(line[start:end]) != n.Value {
			return errors.New("a plain value over several lines")
		}
		text = want
		if strings.ContainsAny(want, ":#{}[],&*!|>'\"%@`") {
			text = `"` + want + `"`
		}
	default:
		return errors.New("a block scalar")
	}
	lines[n.Line-1] = string(line[:start]) + text + string(line[end:])
	return nil
}
