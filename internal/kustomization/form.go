package kustomization

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/types"
)

// ErrForm marks a kustomization written in a form the editor will not
// edit: two keys that kustomize reads as the resources list, a flow
// mapping, a file kustomize itself refuses. It is a fault of the
// repository, named with the file by the caller, never of a message.
var ErrForm = errors.New("kustomization form the worker does not edit")

// IsForm reports whether err is an ErrForm.
func IsForm(err error) bool { return errors.Is(err, ErrForm) }

// Listed returns the resources kustomize itself reads from content, as
// paths: its own decoder (case-insensitive keys, the last of duplicate
// keys, the deprecated bases appended), so what the editor believes is
// listed can be checked against what Flux will build.
func Listed(content []byte) ([]string, error) {
	var k types.Kustomization
	if err := k.Unmarshal(content); err != nil {
		return nil, fmt.Errorf("%w: kustomize cannot read it: %v", ErrForm, err)
	}
	k.FixKustomization()
	out := make([]string, len(k.Resources))
	for i, r := range k.Resources {
		out[i] = Normalize(r)
	}
	return out, nil
}

// isListKey tells whether kustomize reads a top-level key as (part of) the
// resources list: its decoder matches field names without regard to case,
// and appends the deprecated bases.
func isListKey(key string) bool {
	return strings.EqualFold(key, "resources") || strings.EqualFold(key, "bases")
}

// checkForm holds the line parser's reading b of lines to kustomize's own
// reading of the file. When they agree and one key holds the list, b
// stands. When they disagree but one key of a block mapping holds the list
// (written quoted, spaced, as an explicit "? " key, in another case, as
// bases), b becomes that key's lines, to be rewritten in block style with
// kustomize's entries. Anything else is refused by name.
func checkForm(lines []string, b block) (block, error) {
	content := []byte(strings.Join(lines, ""))
	listed, err := Listed(content)
	if err != nil {
		return b, err
	}
	keys, mapping, err := listKeys(content)
	if err != nil {
		return b, err
	}
	switch {
	case len(keys) > 1:
		var at []string
		for _, k := range keys {
			at = append(at, fmt.Sprintf("%q on line %d", k.Value, k.Line))
		}
		return b, fmt.Errorf("%w: kustomize reads %s as one resources list and keeps only one of them; "+
			"merge them into one resources list", ErrForm, strings.Join(at, " and "))
	case len(keys) == 1 && mapping.Style&yaml.FlowStyle != 0:
		return b, fmt.Errorf("%w: the file is a flow mapping ({...}); write it as a block mapping", ErrForm)
	}
	if slices.Equal(b.values, listed) && (len(keys) == 0 && b.key < 0 || len(keys) == 1 && keys[0].Line-1 == b.key) {
		return b, nil
	}
	if len(keys) == 0 && len(listed) == 0 {
		return b, nil // e.g. a "resources" key the YAML parser does not see as one
	}
	if len(keys) != 1 {
		return b, fmt.Errorf("%w: the editor reads the resources list as %v, kustomize as %v", ErrForm, b.values, listed)
	}
	// Rewrite the key's lines: from the key to the last line before the
	// next key that is neither blank nor a comment.
	start, end := keys[0].Line-1, len(lines)-1
	if next := nextKeyLine(mapping, keys[0]); next > 0 {
		end = next - 2
	}
	for end > start {
		t := strings.TrimSpace(lines[end])
		if t != "" && !strings.HasPrefix(t, "#") {
			break
		}
		end--
	}
	if start > 0 && strings.TrimSpace(withoutNote(strings.TrimRight(lines[start-1], "\r\n"))) == "?" {
		start-- // an explicit key whose "?" stands on a line of its own
	}
	if start < 0 || start >= len(lines) {
		return b, fmt.Errorf("%w: the resources key is not where the YAML parser says", ErrForm)
	}
	return block{key: start, end: end, indent: "  ", values: listed}, nil
}

// listKeys returns the top-level keys that kustomize reads as the
// resources list, and the top-level mapping.
func listKeys(content []byte) ([]*yaml.Node, *yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(content, &doc); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrForm, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil, nil // empty
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("%w: the file is not a mapping", ErrForm)
	}
	var keys []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && isListKey(k.Value) {
			keys = append(keys, k)
		}
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			return nil, nil, fmt.Errorf("%w: a merge key (<<) at the top level", ErrForm)
		}
	}
	return keys, m, nil
}

// nextKeyLine is the line (1-based) of the key after key in mapping m, or 0.
func nextKeyLine(m, key *yaml.Node) int {
	for i := 0; i+2 < len(m.Content); i += 2 {
		if m.Content[i] == key {
			return m.Content[i+2].Line
		}
	}
	return 0
}
