package render

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// locate walks path from root by mapping keys and returns every node on
// the way, root first, the scalar to set last. It goes through no alias and
// no merge key: what is reached that way is written elsewhere, for other
// places too.
func locate(root *yaml.Node, path []string) ([]*yaml.Node, error) {
	chain := []*yaml.Node{root}
	n := root
	for i, key := range path {
		if n.Kind == yaml.AliasNode {
			return nil, fmt.Errorf("%w: %s is an alias (*%s)", ErrNotInPlace, dotted(path[:i]), n.Value)
		}
		if n.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%w: no %s (%s is not a mapping)", ErrNoReleaseField, dotted(path), dotted(path[:i]))
		}
		var next *yaml.Node
		merged := false
		for j := 0; j+1 < len(n.Content); j += 2 {
			k := resolve(n.Content[j])
			switch {
			case k == nil || k.Kind != yaml.ScalarNode:
			case k.ShortTag() == "!!merge":
				merged = true
			case k.Value == key:
				if next != nil {
					return nil, fmt.Errorf("%w: key %s given twice (lines %d and %d)", ErrNotInPlace, dotted(path[:i+1]), next.Line, n.Content[j+1].Line)
				}
				next = n.Content[j+1]
			}
		}
		switch {
		case next == nil && merged:
			return nil, fmt.Errorf("%w: %s comes from a merge key (<<)", ErrNotInPlace, dotted(path[:i+1]))
		case next == nil:
			return nil, fmt.Errorf("%w: no %s", ErrNoReleaseField, dotted(path[:i+1]))
		}
		n = next
		chain = append(chain, n)
	}
	switch n.Kind {
	case yaml.ScalarNode:
		return chain, nil
	case yaml.AliasNode:
		return nil, fmt.Errorf("%w: the value is an alias (*%s)", ErrNotInPlace, n.Value)
	}
	return nil, fmt.Errorf("%w: line %d holds no single value", ErrNotInPlace, n.Line)
}

func dotted(path []string) string {
	if len(path) == 0 {
		return "the document"
	}
	return strings.Join(path, ".")
}

// unshared fails when a node of chain (see locate) is anchored and used
// again through an alias anywhere in the stream: changing the value would
// change it at the alias too. yaml.v3 resolves an alias against anchors of
// earlier documents as well, so every document is searched.
func unshared(docs []*yaml.Node, chain []*yaml.Node, path []string) error {
	anchored := map[*yaml.Node]int{}
	for i, n := range chain {
		if n.Anchor != "" {
			anchored[n] = i
		}
	}
	if len(anchored) == 0 {
		return nil
	}
	var found error
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if found != nil {
			return
		}
		if i, ok := anchored[n.Alias]; ok && n.Kind == yaml.AliasNode {
			found = fmt.Errorf("%w: %s is anchored as &%s and used again at line %d (*%s), which would change too",
				ErrNotInPlace, dotted(path[:i]), n.Alias.Anchor, n.Line, n.Value)
			return
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	for _, d := range docs {
		walk(d)
	}
	return found
}

// edit replaces the runes [start, end) of a line (0-based) by text.
type edit struct {
	line, start, end int
	text             string
}

// replace finds the one-line scalar n in lines and returns the edit that
// writes want in its place, in the quoting n has where want allows.
func replace(lines []string, n *yaml.Node, want string) (edit, error) {
	if n.Line < 1 || n.Line > len(lines) {
		return edit{}, fmt.Errorf("%w: value outside the file", ErrNotInPlace)
	}
	line := []rune(lines[n.Line-1])
	pos := n.Column - 1
	if n.Line == 1 && len(line) > 0 && line[0] == '\ufeff' {
		pos++ // the parser counts columns after a byte order mark
	}
	// The node's position is that of its properties, an anchor and a tag.
	for pos >= 0 && pos < len(line) && (line[pos] == '&' || line[pos] == '!') {
		end := pos
		for end < len(line) && !strings.ContainsRune(" \t\r\n", line[end]) {
			end++
		}
		if line[pos] == '&' && string(line[pos+1:end]) != n.Anchor {
			return edit{}, fmt.Errorf("%w: the value is not where the parser puts it", ErrNotInPlace)
		}
		pos = end
		for pos < len(line) && (line[pos] == ' ' || line[pos] == '\t') {
			pos++
		}
	}
	if pos < 0 || pos >= len(line) || strings.ContainsRune("\r\n#", line[pos]) {
		return edit{}, fmt.Errorf("%w: the value is on a line of its own after its anchor or tag", ErrNotInPlace)
	}
	e := edit{line: n.Line - 1, start: pos}
	switch {
	case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		return edit{}, fmt.Errorf("%w: a block scalar", ErrNotInPlace)
	case n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0:
		q := line[pos]
		end := pos + 1
		for ; end < len(line); end++ {
			if q == '"' && line[end] == '\\' {
				end++ // an escape: \" does not close
				continue
			}
			if line[end] == q {
				if q == '\'' && end+1 < len(line) && line[end+1] == '\'' {
					end++ // '' is a quote inside single quotes
					continue
				}
				break
			}
		}
		if end >= len(line) {
			return edit{}, fmt.Errorf("%w: a quoted value over several lines", ErrNotInPlace)
		}
		e.end = end + 1
		var read string
		if yaml.Unmarshal([]byte(string(line[e.start:e.end])), &read) != nil || read != n.Value {
			return edit{}, fmt.Errorf("%w: the value is not where the parser puts it", ErrNotInPlace)
		}
		e.text = doubleQuoted(want)
		if q == '\'' && printable(want) {
			e.text = "'" + strings.ReplaceAll(want, "'", "''") + "'"
		}
	default:
		e.end = pos + len([]rune(n.Value))
		if e.end > len(line) || string(line[pos:e.end]) != n.Value {
			return edit{}, fmt.Errorf("%w: a plain value over several lines", ErrNotInPlace)
		}
		// Blank, end of line, or the end of an entry of a flow collection.
		if e.end < len(line) && !strings.ContainsRune(" \t\r\n,]}", line[e.end]) {
			return edit{}, fmt.Errorf("%w: the value is not where the parser puts it", ErrNotInPlace)
		}
		e.text = want
		if !plainSafe(want, n) {
			if n.Style&yaml.TaggedStyle == 0 && n.ShortTag() != "!!str" {
				return edit{}, fmt.Errorf("%w: the value is a %s, and %q would not be", ErrNotInPlace, n.ShortTag(), want)
			}
			e.text = doubleQuoted(want)
		}
	}
	return e, nil
}

// plainSafe reports whether want can be written unquoted in n's place, in
// a block or a flow collection, and read back as the same text of the same
// type.
func plainSafe(want string, n *yaml.Node) bool {
	if want == "" || strings.TrimSpace(want) != want || !printable(want) ||
		strings.ContainsAny(want, ":#{}[],&*!|>'\"%@`\\") {
		return false
	}
	var probe yaml.Node
	if yaml.Unmarshal([]byte(want), &probe) != nil || len(probe.Content) != 1 {
		return false
	}
	s := probe.Content[0]
	if s.Kind != yaml.ScalarNode || s.Value != want {
		return false
	}
	// An explicit tag stays in front of the value and types it.
	return n.Style&yaml.TaggedStyle != 0 || s.ShortTag() == n.ShortTag()
}

func printable(s string) bool {
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

func doubleQuoted(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case strconv.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// apply makes the edits, right to left within a line so that the columns
// of the others stay right.
func apply(lines []string, edits []edit) []byte {
	sort.Slice(edits, func(i, j int) bool {
		if edits[i].line != edits[j].line {
			return edits[i].line < edits[j].line
		}
		return edits[i].start > edits[j].start
	})
	out := append([]string(nil), lines...)
	for _, e := range edits {
		line := []rune(out[e.line])
		out[e.line] = string(line[:e.start]) + e.text + string(line[e.end:])
	}
	return []byte(strings.Join(out, ""))
}
