package kustomization

import (
	"fmt"
	"regexp"
	"slices"
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
		if i > 1 && !verified.has(content) {
			t.Fatalf("edit %d: result not remembered as checked", i)
		}
		if err := verify(content, want); err != nil {
			t.Fatalf("edit %d: %v\n%s", i, err, content)
		}
	}
}
