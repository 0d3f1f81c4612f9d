package kustomization

import (
	"crypto/sha256"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The regular expressions listItemOf and withoutNote stand in for.
var (
	listItemRE     = regexp.MustCompile(`^([ \t]*)-[ \t]+(.*?)[ \t]*$`)
	trailingNoteRE = regexp.MustCompile(`[ \t]+#.*$`)
)

func checkItem(t *testing.T, text string) {
	indent, value, ok := listItemOf(text)
	m := listItemRE.FindStringSubmatch(text)
	if ok != (m != nil) || (ok && (indent != m[1] || value != m[2])) {
		t.Fatalf("listItemOf(%q) = %q, %q, %v; the regexp says %q", text, indent, value, ok, m)
	}
	if ok {
		if got, want := withoutNote(value), trailingNoteRE.ReplaceAllString(value, ""); got != want {
			t.Fatalf("withoutNote(%q) = %q, want %q", value, got, want)
		}
	}
}

func TestListItemMatchesTheRegexp(t *testing.T) {
	for _, s := range []string{
		"", "-", "- ", "-x", "- a.yaml", "  - a.yaml  ", "\t-\ta.yaml\t", "  - a.yaml # note", "  - a.yaml#x",
		"  - 'a.yaml'  #  c # d", "  -  \t b c  ", "x - a", "  - #only", "- a\t#", "  --a", "- - a",
	} {
		checkItem(t, s)
	}
}

func FuzzListItem(f *testing.F) {
	for _, s := range []string{"  - tenant-1.yaml", "- a # b", "\t-\t'x'\t#\ty"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := 0; i < len(s); i++ {
			if s[i] == '\n' || s[i] == '\r' {
				return // lines reach the parser without their ending
			}
		}
		checkItem(t, s)
	})
}

// TestEditsOfCheckedFiles: once a file is confirmed as YAML, later edits
// check only their own lines; the result must still be what a YAML parser
// reads, edit after edit.
func TestEditsOfCheckedFiles(t *testing.T) {
	content := []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - dummy-configmap.yaml # keep\n\n# tenants\n  - \"t0.yaml\"")
	want := []string{"dummy-configmap.yaml", "t0.yaml"}
	for i := 1; i <= 30; i++ {
		var err error
		entry := fmt.Sprintf("t%d.yaml", i)
		if i%3 == 0 {
			drop := fmt.Sprintf("t%d.yaml", i-2)
			content, _, err = Remove(content, drop)
			want = slices.DeleteFunc(want, func(e string) bool { return e == drop })
		} else {
			content, _, err = Add(content, entry)
			want = append(want, entry)
		}
		if err != nil {
			t.Fatalf("edit %d: %v", i, err)
		}
		if i > 1 && !verified.has(sha256.Sum256(content)) {
			t.Fatalf("edit %d: result not remembered as checked", i)
		}
		if err := verify(content, want); err != nil {
			t.Fatalf("edit %d: %v\n%s", i, err, content)
		}
	}
}

// The line-by-line removal Filter used to do, kept as its oracle.
// removeLine deletes line i; when it was the last line and had no newline,
// the line before loses its newline, so the file keeps its final-newline style.
func removeLine(lines []string, i int) []string {
	if i == len(lines)-1 && lineEnding(lines[i]) == "" && i > 0 {
		lines[i-1] = strings.TrimRight(lines[i-1], "\r\n")
	}
	return slices.Delete(lines, i, i+1)
}

// FuzzFilter: of a list the line editor edits in place, Filter gives the
// same bytes as removing the dropped entries' lines one by one from the
// end; of any other, kustomize reads the kept entries after it. Either
// way keep is asked once per entry, in order.
func FuzzFilter(f *testing.F) {
	f.Add([]byte("kind: K\nresources:\n  - a.yaml\n  - b.yaml\n  - c.yaml"), byte(2))
	f.Add([]byte("resources:\r\n- a # x\r\n\r\n- b\r\n"), byte(1))
	f.Add([]byte("resources: [a,\nb, c]\nnamePrefix: x-\n"), byte(5))
	f.Fuzz(func(t *testing.T, content []byte, mask byte) {
		lines := splitLines(content)
		b, err := parse(lines)
		if err != nil {
			return
		}
		if b, err = checkForm(lines, b); err != nil || len(b.values) == 0 {
			return
		}
		keep := func(i int) bool { return mask&(1<<(i%8)) != 0 }
		if b.end >= 0 {
			var want []string
			for i, v := range b.values {
				if keep(i) {
					want = append(want, v)
				}
			}
			n := 0
			got, _, err := Filter(content, func(string) bool { n++; return keep(n - 1) })
			if n != len(b.values) {
				t.Fatalf("Filter asked keep %d times of %d entries", n, len(b.values))
			}
			if err != nil {
				return // refusing is allowed
			}
			if l, err := Listed(got); err != nil || !slices.Equal(l, want) {
				t.Fatalf("after Filter kustomize reads %v (%v), want %v:\n%s", l, err, want, got)
			}
			return
		}
		var drop []int
		for i := range b.values {
			if !keep(i) {
				drop = append(drop, b.items[i])
			}
		}
		for i := len(drop) - 1; i >= 0; i-- {
			lines = removeLine(lines, drop[i])
		}
		want := strings.Join(lines, "")
		n := 0
		got, _, err := Filter(content, func(string) bool { n++; return keep(n - 1) })
		if err != nil {
			return // Filter verifies its output; refusing is allowed
		}
		if len(drop) == 0 {
			want = string(content)
		}
		if string(got) != want {
			t.Fatalf("Filter gives %q, line removal %q", got, want)
		}
	})
}
