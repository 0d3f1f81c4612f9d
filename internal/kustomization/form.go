package kustomization

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/types"
)

// ErrForm marks a kustomization written in a form the editor will not
// edit: two keys that kustomize reads as the resources list, a flow
// mapping, a "resources:" line kustomize does not read as the key, a list
// with an anchor that another field uses, a file kustomize itself refuses,
// an edit that would change what kustomize reads beyond the one entry. It
// is a fault of the repository, named with the file by the caller, never
// of a message; every refusal of the package is one, so no caller retries
// a file that cannot change by itself.
var ErrForm = errors.New("kustomization form the worker does not edit")

// yamlBytes counts the bytes handed to a YAML parser (see YAMLBytes).
var yamlBytes atomic.Int64

// YAMLBytes returns how many bytes of kustomization files the package has
// handed to a YAML parser since the process started. A read served by the
// parse cache costs none, an append checked on its own lines only those:
// BenchmarkBatchInShardFolders holds a batch's count to the same at any
// repository size.
func YAMLBytes() int64 { return yamlBytes.Load() }

// IsForm reports whether err is an ErrForm.
func IsForm(err error) bool { return errors.Is(err, ErrForm) }

// Listed returns the resources kustomize itself reads from content, as
// paths: its own decoder (case-insensitive keys, the last of duplicate
// keys, the deprecated bases appended, only the first YAML document), so
// what the editor believes is listed can be checked against what Flux
// will build.
func Listed(content []byte) ([]string, error) {
	k, err := reading(content)
	if err != nil {
		return nil, err
	}
	return normalized(k.Resources), nil
}

// reading is the kustomization as kustomize reads it (krusty decodes the
// file, then fixes it up the same way).
func reading(content []byte) (types.Kustomization, error) {
	yamlBytes.Add(int64(len(content)))
	var k types.Kustomization
	if err := k.Unmarshal(content); err != nil {
		return k, fmt.Errorf("%w: kustomize cannot read it: %v", ErrForm, err)
	}
	k.FixKustomization()
	return k, nil
}

func normalized(entries []string) []string {
	out := make([]string, len(entries))
	for i, r := range entries {
		out[i] = Normalize(r)
	}
	return out
}

// checkEdit holds an edit to its promise: kustomize reads after exactly as
// it reads before, but for the resources list, which must be want. Whatever
// the line editor believed, an edit kustomize would read otherwise is
// refused, never written.
func checkEdit(before, after []byte, want []string) error {
	kb, err := reading(before)
	if err != nil {
		return err
	}
	ka, err := reading(after)
	if err != nil {
		return fmt.Errorf("edited kustomization: %w", err)
	}
	if got := normalized(ka.Resources); !slices.Equal(got, want) {
		return fmt.Errorf("%w: after the edit kustomize would list %v, want %v", ErrForm, got, want)
	}
	ka.Resources, kb.Resources = nil, nil
	if !reflect.DeepEqual(ka, kb) {
		return fmt.Errorf("%w: the edit would change more of the kustomization than its resources list", ErrForm)
	}
	return nil
}

// isListKey tells whether kustomize reads a top-level key as (part of) the
// resources list: its decoder matches field names without regard to case,
// and appends the deprecated bases.
func isListKey(key string) bool {
	return strings.EqualFold(key, "resources") || strings.EqualFold(key, "bases")
}

// checkForm holds the line parser's reading b of lines to kustomize's own
// reading of the file. When they agree, one key holds the list and the line
// parser can edit it in place, b stands. When one key of a block mapping
// holds the list but the line parser reads it otherwise (written quoted,
// spaced, as an explicit "? " key, in another case, as bases, as a flow or
// tagged list, or a "resources:" line elsewhere fooled it), b becomes that
// key's lines as the YAML parser places them, to be rewritten in block
// style with kustomize's entries. Anything else is refused by name, and so
// is a list with an anchor that another field uses through an alias.
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
	case len(keys) == 0 && b.key >= 0:
		// Kustomize reads no list, the line editor would edit one that
		// kustomize never builds (or text inside another field).
		return b, fmt.Errorf("%w: line %d starts with \"resources:\", but kustomize does not read it as the resources key: "+
			"it is %s; kustomize lists %v", ErrForm, b.key+1, whereNotKey(lines, b.key), listed)
	case len(keys) == 0 && len(listed) > 0:
		return b, fmt.Errorf("%w: kustomize reads the resources list as %v from a key the editor does not find", ErrForm, listed)
	case len(keys) == 0:
		return b, nil // no list at all
	}
	if err := aliasedAnchor(mapping, keys[0]); err != nil {
		return b, err
	}
	if b.end < 0 && keys[0].Line-1 == b.key && slices.Equal(b.values, listed) {
		return b, nil
	}
	start, end, err := extent(lines, mapping, keys[0])
	if err != nil {
		return b, err
	}
	return block{key: start, end: end, indent: "  ", values: listed}, nil
}

// aliasedAnchor refuses a resources list that another field uses through
// an alias of an anchor on the list, on its key or on a node inside it
// ("resources: &list" and "crds: *list"): an edit of the list in place
// would edit that field too, and a rewrite would drop the anchor the alias
// needs. An alias inside the list itself is only a way to write an entry.
func aliasedAnchor(mapping, key *yaml.Node) error {
	inside := map[*yaml.Node]bool{}
	var mark func(n *yaml.Node)
	mark = func(n *yaml.Node) {
		inside[n] = true
		for _, c := range n.Content {
			mark(c)
		}
	}
	mark(key)
	mark(valueOf(mapping, key))
	var use *yaml.Node
	var find func(n *yaml.Node)
	find = func(n *yaml.Node) {
		if use != nil || inside[n] {
			return
		}
		if n.Kind == yaml.AliasNode && inside[n.Alias] {
			use = n
			return
		}
		for _, c := range n.Content {
			find(c)
		}
	}
	for i := 0; i+1 < len(mapping.Content) && use == nil; i += 2 {
		field := mapping.Content[i]
		find(field)
		find(mapping.Content[i+1])
		if use != nil {
			where := "a key"
			if use != field {
				where = fmt.Sprintf("%q", field.Value)
			}
			what := "list"
			if use.Alias == key {
				what = "key"
			}
			return fmt.Errorf("%w: the resources %s carries the anchor &%s (line %d), and %s uses it on line %d (*%s): "+
				"an edit of the list would change that field too; write its value out instead of the alias",
				ErrForm, what, use.Alias.Anchor, use.Alias.Line, where, use.Line, use.Value)
		}
	}
	return nil
}

// valueOf is the value of key in mapping m (a node of no content when
// there is none).
func valueOf(m, key *yaml.Node) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i] == key {
			return m.Content[i+1]
		}
	}
	return &yaml.Node{}
}

// extent is the lines of the top-level key's entry, as the YAML parser
// places it: from the key to the last line before the next key, or before
// the end of the document, that is neither blank nor a comment.
func extent(lines []string, mapping, key *yaml.Node) (start, end int, err error) {
	start, end = key.Line-1, len(lines)-1
	if next := nextKeyLine(mapping, key); next > 0 {
		end = next - 2
	} else if d := documentEnd(lines, start+1); d >= 0 {
		end = d - 1 // kustomize reads only the first document; the rest stays
	}
	for end > start && end < len(lines) {
		t := strings.TrimSpace(withoutNote(strings.TrimRight(lines[end], "\r\n")))
		if t != "" && !strings.HasPrefix(t, "#") && !(t == "?" && lines[end][0] == '?') {
			break // the "?" of the next key when it stands on a line of its own
		}
		end--
	}
	if start > 0 && strings.TrimSpace(withoutNote(strings.TrimRight(lines[start-1], "\r\n"))) == "?" {
		start-- // an explicit key whose "?" stands on a line of its own
	}
	if start < 0 || start >= len(lines) || end < start || end >= len(lines) {
		return 0, 0, fmt.Errorf("%w: the resources key is not where the YAML parser says", ErrForm)
	}
	return start, end, nil
}

// isDocumentMarker tells whether line is a document start ("---") or end
// ("...") marker. At column 0 nothing else can begin so: YAML forbids it
// inside a quoted scalar and ends a plain one there.
func isDocumentMarker(line string) bool {
	line = strings.TrimRight(line, "\r\n")
	for _, m := range []string{"---", "..."} {
		if rest, ok := strings.CutPrefix(line, m); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			return true
		}
	}
	return false
}

// documentEnd is the first line from from on that ends the document, or -1.
func documentEnd(lines []string, from int) int {
	for i := from; i < len(lines); i++ {
		if isDocumentMarker(lines[i]) {
			return i
		}
	}
	return -1
}

// firstDocumentEnd is the line of the marker that ends the first document
// (one after content: a leading "---" starts it), or -1.
func firstDocumentEnd(lines []string) int {
	content := false
	for i, l := range lines {
		if isDocumentMarker(l) {
			if content {
				return i
			}
			continue
		}
		if t := strings.TrimSpace(strings.TrimPrefix(l, "\ufeff")); t != "" && t[0] != '#' && t[0] != '%' {
			content = true
		}
	}
	return -1
}

// whereNotKey says, for the refusal, why a "resources:" line at column 0
// is no key to kustomize.
func whereNotKey(lines []string, line int) string {
	if end := firstDocumentEnd(lines); end >= 0 && end < line {
		return fmt.Sprintf("in a later YAML document (line %d ends the first, the only one kustomize reads)", end+1)
	}
	return "inside a multi-line scalar or a flow collection of another field"
}

// listKeys returns the top-level keys that kustomize reads as the
// resources list, and the top-level mapping.
func listKeys(content []byte) ([]*yaml.Node, *yaml.Node, error) {
	yamlBytes.Add(int64(len(content)))
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
