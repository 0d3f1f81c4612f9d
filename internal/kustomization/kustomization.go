// Package kustomization edits the resources list of a kustomization.yaml as
// text: entries are added and removed as a set and every other byte of the
// file (comments, spacing, a missing final newline) is left as it was.
package kustomization

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

var (
	resourcesKey   = regexp.MustCompile(`^resources:[ \t]*(#.*)?$`)
	resourcesEmpty = regexp.MustCompile(`^resources:[ \t]*\[[ \t]*\][ \t]*(#.*)?$`)
	listItem       = regexp.MustCompile(`^([ \t]*)-[ \t]+(.*?)[ \t]*$`)
	trailingNote   = regexp.MustCompile(`[ \t]+#.*$`)
)

// block locates the resources list in a file split into lines.
type block struct {
	key    int      // line of "resources:"; -1 when absent
	empty  bool     // written as "resources: []"
	items  []int    // lines of list items, in order
	values []string // entries, parallel to items
	indent string   // indentation of the items ("  " when there are none)
}

// Resources returns the entries of the top-level resources list.
func Resources(content []byte) ([]string, error) {
	b, err := parse(splitLines(content))
	if err != nil {
		return nil, err
	}
	return b.values, nil
}

// Contains reports whether entry is in the resources list.
func Contains(content []byte, entry string) (bool, error) {
	values, err := Resources(content)
	return slices.Contains(values, entry), err
}

// Add appends entry to the resources list unless it is already there. It
// reports whether the content changed.
func Add(content []byte, entry string) ([]byte, bool, error) {
	lines := splitLines(content)
	b, err := parse(lines)
	if err != nil {
		return nil, false, err
	}
	if slices.Contains(b.values, entry) {
		return content, false, nil
	}
	item := b.indent + "- " + entry
	switch {
	case len(b.items) > 0:
		last := b.items[len(b.items)-1]
		lines = insertAfter(lines, last, item)
	case b.key >= 0:
		// "resources:" with no items, or "resources: []".
		if b.empty {
			lines[b.key] = "resources:" + lineEnding(lines[b.key])
		}
		lines = insertAfter(lines, b.key, item)
	default:
		if n := len(lines); n > 0 && !strings.HasSuffix(lines[n-1], "\n") {
			lines[n-1] += "\n"
		}
		lines = append(lines, "resources:\n", item+"\n")
	}
	out := []byte(strings.Join(lines, ""))
	return out, true, verify(out, append(b.values, entry))
}

// Remove deletes every occurrence of entry from the resources list. It
// reports whether the content changed.
func Remove(content []byte, entry string) ([]byte, bool, error) {
	return Filter(content, func(e string) bool { return e != entry })
}

// Filter keeps the entries of the resources list for which keep is true, in
// one pass. It reports whether the content changed.
func Filter(content []byte, keep func(entry string) bool) ([]byte, bool, error) {
	lines := splitLines(content)
	b, err := parse(lines)
	if err != nil {
		return nil, false, err
	}
	var drop []int
	var kept []string
	for i, v := range b.values {
		if keep(v) {
			kept = append(kept, v)
		} else {
			drop = append(drop, b.items[i])
		}
	}
	if len(drop) == 0 {
		return content, false, nil
	}
	for i := len(drop) - 1; i >= 0; i-- {
		lines = removeLine(lines, drop[i])
	}
	out := []byte(strings.Join(lines, ""))
	return out, true, verify(out, kept)
}

func parse(lines []string) (block, error) {
	b := block{key: -1, indent: "  "}
	for i, l := range lines {
		text := strings.TrimRight(l, "\r\n")
		if resourcesEmpty.MatchString(text) {
			b.key, b.empty = i, true
			return b, nil
		}
		if resourcesKey.MatchString(text) {
			b.key = i
			break
		}
		if strings.HasPrefix(text, "resources:") {
			return b, fmt.Errorf("resources list in an unsupported form: %q", text)
		}
	}
	if b.key < 0 {
		return b, nil
	}
	for i := b.key + 1; i < len(lines); i++ {
		text := strings.TrimRight(lines[i], "\r\n")
		trimmed := strings.TrimSpace(text)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		m := listItem.FindStringSubmatch(text)
		if m == nil {
			break
		}
		if len(b.items) == 0 {
			b.indent = m[1]
		} else if m[1] != b.indent {
			break
		}
		b.items = append(b.items, i)
		b.values = append(b.values, unquote(trailingNote.ReplaceAllString(m[2], "")))
	}
	return b, nil
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// verify re-reads the edited file as YAML, so a bug in the text editing can
// never write a kustomization that means something other than intended.
func verify(content []byte, want []string) error {
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(content, &k); err != nil {
		return fmt.Errorf("edited kustomization does not parse: %w", err)
	}
	if !slices.Equal(k.Resources, want) && !(len(k.Resources) == 0 && len(want) == 0) {
		return fmt.Errorf("edited kustomization lists %v, want %v", k.Resources, want)
	}
	return nil
}

// splitLines splits content after each "\n", keeping the separators, so
// joining the lines gives back the exact bytes.
func splitLines(content []byte) []string {
	if len(content) == 0 {
		return nil
	}
	parts := bytes.SplitAfter(content, []byte("\n"))
	lines := make([]string, 0, len(parts))
	for _, p := range parts {
		if len(p) > 0 {
			lines = append(lines, string(p))
		}
	}
	return lines
}

func lineEnding(line string) string {
	if strings.HasSuffix(line, "\r\n") {
		return "\r\n"
	}
	if strings.HasSuffix(line, "\n") {
		return "\n"
	}
	return ""
}

// insertAfter adds text as a new line after line i, keeping a missing final
// newline missing.
func insertAfter(lines []string, i int, text string) []string {
	nl := lineEnding(lines[i])
	if nl == "" {
		lines[i] += "\n"
		return slices.Insert(lines, i+1, text)
	}
	return slices.Insert(lines, i+1, text+nl)
}

// removeLine deletes line i; when it was the last line and had no newline,
// the line before loses its newline, so the file keeps its final-newline style.
func removeLine(lines []string, i int) []string {
	if i == len(lines)-1 && lineEnding(lines[i]) == "" && i > 0 {
		lines[i-1] = strings.TrimRight(lines[i-1], "\r\n")
	}
	return slices.Delete(lines, i, i+1)
}
