package kustomization

import (
	"crypto/sha256"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const fixture = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - dummy-configmap.yaml"

func TestAddFollowsReference(t *testing.T) {
	// The reference appends "\n  - <id>.yaml" to a file without a final newline.
	got, changed, err := Add([]byte(fixture), "tenant-1.yaml")
	if err != nil || !changed {
		t.Fatalf("Add: changed=%v err=%v", changed, err)
	}
	if want := fixture + "\n  - tenant-1.yaml"; string(got) != want {
		t.Fatalf("Add =\n%q\nwant\n%q", got, want)
	}
	again, changed, err := Add(got, "tenant-1.yaml")
	if err != nil || changed || string(again) != string(got) {
		t.Fatalf("second Add changed the file: %v %q", err, again)
	}
}

func TestAddRemove(t *testing.T) {
	tests := []struct {
		name, in, entry, added string
	}{
		{"final newline", "resources:\n  - a.yaml\n", "b.yaml", "resources:\n  - a.yaml\n  - b.yaml\n"},
		{"comments kept", "# top\nresources:  # list\n  - a.yaml # first\nnamePrefix: x\n", "b.yaml",
			"# top\nresources:  # list\n  - a.yaml # first\n  - b.yaml\nnamePrefix: x\n"},
		{"no indent", "resources:\n- a.yaml\n", "b.yaml", "resources:\n- a.yaml\n- b.yaml\n"},
		{"empty list", "kind: Kustomization\nresources:\n", "b.yaml", "kind: Kustomization\nresources:\n  - b.yaml\n"},
		{"flow empty", "kind: Kustomization\nresources: []\n", "b.yaml", "kind: Kustomization\nresources:\n  - b.yaml\n"},
		{"no key", "kind: Kustomization", "b.yaml", "kind: Kustomization\nresources:\n  - b.yaml\n"},
		{"crlf", "resources:\r\n  - a.yaml\r\n", "b.yaml", "resources:\r\n  - a.yaml\r\n  - b.yaml\r\n"},
		{"trailing spaces on key", "resources:  \n  - pool-1.yaml", "pool-2.yaml", "resources:  \n  - pool-1.yaml\n  - pool-2.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed, err := Add([]byte(tt.in), tt.entry)
			if err != nil || !changed {
				t.Fatalf("Add: changed=%v err=%v", changed, err)
			}
			if string(got) != tt.added {
				t.Fatalf("Add =\n%q\nwant\n%q", got, tt.added)
			}
			back, changed, err := Remove(got, tt.entry)
			if err != nil || !changed {
				t.Fatalf("Remove: changed=%v err=%v", changed, err)
			}
			before, _ := Resources([]byte(tt.in))
			after, _ := Resources(back)
			if !slices.Equal(before, after) {
				t.Fatalf("Remove after Add lists %v, want %v", after, before)
			}
		})
	}
}

func TestRemoveKeepsStyle(t *testing.T) {
	in := fixture + "\n  - tenant-1.yaml"
	got, changed, err := Remove([]byte(in), "tenant-1.yaml")
	if err != nil || !changed || string(got) != fixture {
		t.Fatalf("Remove = %q, %v, %v; want %q", got, changed, err, fixture)
	}
	// The reference's defect leaves duplicates behind; removing clears them all.
	dup := fixture + "\n  - t.yaml\n  - t.yaml"
	got, _, err = Remove([]byte(dup), "t.yaml")
	if err != nil || string(got) != fixture {
		t.Fatalf("Remove duplicates = %q, %v", got, err)
	}
	same, changed, err := Remove([]byte(fixture), "absent.yaml")
	if err != nil || changed || string(same) != fixture {
		t.Fatalf("Remove absent changed the file")
	}
}

func TestResources(t *testing.T) {
	got, err := Resources([]byte("resources:\n  - a.yaml\n  - 'b.yaml'\n  - \"c.yaml\" # note\n\n  - d.yaml\ncomponents:\n  - e.yaml\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.yaml", "b.yaml", "c.yaml", "d.yaml"}; !slices.Equal(got, want) {
		t.Fatalf("Resources = %v, want %v", got, want)
	}
}

// TestForms edits the forms of a kustomization that kustomize accepts: an
// onboarding adds t2, an offboarding removes t1, a repeated message changes
// nothing, and the rest of each file stays as written.
func TestForms(t *testing.T) {
	const head = "apiVersion: kustomize.config.k8s.io/v1beta1 # keep me\nkind: Kustomization\n"
	for name, content := range map[string]string{
		"plain":                   head + "resources:\n  - dummy-configmap.yaml\n  - t1.yaml\n",
		"quoted":                  head + "resources:\n  - \"dummy-configmap.yaml\"\n  - 't1.yaml'\n",
		"inline comments":         head + "resources:\n  - dummy-configmap.yaml # the tier's\n  - t1.yaml # a tenant\n",
		"full-line comments":      head + "resources:\n  # tenants below\n  - dummy-configmap.yaml\n\n  # t1\n  - t1.yaml\n",
		"CRLF":                    strings.ReplaceAll(head+"resources:\n  - dummy-configmap.yaml\n  - t1.yaml\n", "\n", "\r\n"),
		"BOM":                     "\ufeff" + head + "resources:\n  - dummy-configmap.yaml\n  - t1.yaml\n",
		"BOM, resources first":    "\ufeffresources:\n  - dummy-configmap.yaml\n  - t1.yaml\n" + head,
		"no indent":               head + "resources:\n- dummy-configmap.yaml\n- t1.yaml\n",
		"four spaces":             head + "resources:\n    - dummy-configmap.yaml\n    - t1.yaml\n",
		"keys after resources":    head + "resources:\n  - dummy-configmap.yaml\n  - t1.yaml\nnamePrefix: x- # keep me too\n",
		"resources first":         "resources:\n  - dummy-configmap.yaml\n  - t1.yaml\n" + head,
		"dot-slash entries":       head + "resources:\n  - ./dummy-configmap.yaml\n  - ./t1.yaml\n",
		"flow list":               head + "resources: [dummy-configmap.yaml, t1.yaml] # keep me too\nnamePrefix: x-\n",
		"multi-line flow list":    head + "resources: [\n  dummy-configmap.yaml,\n  t1.yaml\n]\nnamePrefix: x-\n",
		"anchor on the list":      head + "resources: &list\n  - dummy-configmap.yaml\n  - t1.yaml\n",
		"anchors on items":        head + "resources:\n  - &d dummy-configmap.yaml\n  - t1.yaml\n",
		"no trailing newline":     head + "resources:\n  - dummy-configmap.yaml\n  - t1.yaml",
		"no resources, t1 absent": head,
		"empty flow, t1 absent":   head + "resources: []\n",
		// Every spelling of the key that YAML allows and kustomize reads.
		"double-quoted key":         head + "\"resources\":\n  - dummy-configmap.yaml\n  - t1.yaml\n",
		"single-quoted key":         head + "'resources':\n  - dummy-configmap.yaml\n  - t1.yaml\n",
		"space before the colon":    head + "resources :\n  - dummy-configmap.yaml\n  - t1.yaml\nnamePrefix: x-\n",
		"explicit key":              head + "? resources\n: - dummy-configmap.yaml\n  - t1.yaml\nnamePrefix: x-\n",
		"explicit key, own line":    head + "?\n  resources\n:\n  - dummy-configmap.yaml\n  - t1.yaml\n",
		"quoted key, flow list":     head + "\"resources\": [dummy-configmap.yaml, t1.yaml]\nnamePrefix: x-\n",
		"key in another case":       head + "Resources:\n  - dummy-configmap.yaml\n  - t1.yaml\n",
		"escaped key":               head + "\"reso\\u0075rces\":\n  - dummy-configmap.yaml\n  - t1.yaml\n",
		"deprecated bases":          head + "bases:\n  - dummy-configmap.yaml\n  - t1.yaml\n# keep me too\nnamePrefix: x-\n",
		"quoted key, comment after": head + "\"resources\": # the list\n  - dummy-configmap.yaml\n  - t1.yaml\n\n# keep me too\nnamePrefix: x-\n",
		// Lists whose end only the YAML parser can tell.
		"flow list, entries at column 0": head + "resources: [\n\"dummy-configmap.yaml\",\n\"t1.yaml\"\n]\n# keep me too\nnamePrefix: x-\n",
		"tagged compact list":            head + "resources: !!seq\n- dummy-configmap.yaml\n- t1.yaml\n",
		"tagged list, no final newline":  head + "resources: !!seq\n  - dummy-configmap.yaml\n  - t1.yaml",
		"explicit next key, own line":    head + "resources: [dummy-configmap.yaml,\n  t1.yaml]\n?\n  namePrefix\n: x-\n",
		// Kustomize reads only the first YAML document: the rest is kept.
		"second document after":            head + "resources:\n  - dummy-configmap.yaml\n  - t1.yaml\n---\n# keep me too\nnamePrefix: x-\n",
		"flow list, second document after": head + "resources: [dummy-configmap.yaml,\nt1.yaml]\n...\n---\nresources: [namePrefix: x-]\n",
		"no resources, document end after": head + "---\n# keep me too\nnamePrefix: x-\n",
		// A "resources:" line inside a quoted scalar, the list under bases:
		// the list is rewritten once, the scalar left alone.
		"resources: line in a scalar, list under bases": head + "namePrefix: \"x-\nresources:\n  - t3.yaml\n\"\nbases:\n  - dummy-configmap.yaml\n  - t1.yaml\n",
	} {
		t.Run(name, func(t *testing.T) {
			before, err := Listed([]byte(content))
			if err != nil {
				t.Fatalf("the form itself does not parse: %v", err)
			}
			got, err := Resources([]byte(content))
			if err != nil || !slices.Equal(got, before) {
				t.Fatalf("Resources = %v, %v; want %v", got, err, before)
			}
			check := func(op string, out []byte, want []string) {
				t.Helper()
				after, err := Listed(out)
				if err != nil || !slices.Equal(after, want) {
					t.Fatalf("%s: lists %v (%v), want %v:\n%s", op, after, err, want, out)
				}
				// Kustomize reads every other field as before.
				kb, _ := reading([]byte(content))
				ka, _ := reading(out)
				kb.Resources, ka.Resources = nil, nil
				if !reflect.DeepEqual(ka, kb) {
					t.Fatalf("%s changed more than the resources list: %+v, was %+v:\n%s", op, ka, kb, out)
				}
				for _, keep := range []string{"# keep me", "kind: Kustomization", "namePrefix: x-"} {
					if strings.Contains(content, keep) && !strings.Contains(string(out), keep) {
						t.Fatalf("%s lost %q:\n%s", op, keep, out)
					}
				}
			}
			// Onboarding t2, then the same message again.
			added, changed, err := Add([]byte(content), "t2.yaml")
			if err != nil || !changed {
				t.Fatalf("Add t2: %v (changed %v)", err, changed)
			}
			check("Add t2", added, append(slices.Clone(before), "t2.yaml"))
			again, changed, err := Add(added, "t2.yaml")
			if err != nil || changed || string(again) != string(added) {
				t.Fatalf("Add t2 again changed the file (%v):\n%s", err, again)
			}
			// A repeated onboarding of t1, written either way.
			for _, e := range []string{"t1.yaml", "./t1.yaml"} {
				out, changed, err := Add([]byte(content), e)
				if slices.Contains(before, "t1.yaml") && (err != nil || changed || string(out) != content) {
					t.Fatalf("Add %s of a listed tenant changed the file (%v)", e, err)
				}
			}
			// Offboarding t1.
			removed, changed, err := Remove([]byte(content), "t1.yaml")
			if err != nil || changed != slices.Contains(before, "t1.yaml") {
				t.Fatalf("Remove t1: %v (changed %v)", err, changed)
			}
			check("Remove t1", removed, slices.DeleteFunc(slices.Clone(before), func(e string) bool { return e == "t1.yaml" }))
		})
	}
}

// TestFormsRefused: forms in which kustomize reads the list from a key the
// editor cannot hold to one place are refused by name, and nothing is
// written: two keys that kustomize reads as one list (it keeps only one),
// a flow mapping, a merge key. So are "resources:" lines kustomize does
// not read as the key, in a later YAML document (kustomize reads only the
// first) or inside a multi-line quoted scalar: the line editor would edit
// a list kustomize never builds, or the text of another field (a
// namePrefix, which renames every object). Every refusal is ErrForm, a
// fault of the repository that pauses the worker and names the file,
// never an error a message is retried for.
func TestFormsRefused(t *testing.T) {
	const head = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
	for name, content := range map[string]string{
		"duplicate key, quoted first":     head + "\"resources\":\n  - dummy-configmap.yaml\n  - t1.yaml\nresources:\n  - t1.yaml\n",
		"duplicate key, plain first":      head + "resources:\n  - dummy-configmap.yaml\n  - t1.yaml\n'resources':\n  - t1.yaml\n",
		"duplicate key, same lists":       head + "resources:\n  - t1.yaml\nresources :\n  - t1.yaml\n",
		"key in two cases":                head + "resources:\n  - dummy-configmap.yaml\nResources:\n  - t1.yaml\n",
		"resources and bases":             head + "resources:\n  - dummy-configmap.yaml\nbases:\n  - t1.yaml\n",
		"flow mapping":                    "{apiVersion: kustomize.config.k8s.io/v1beta1, kind: Kustomization, resources: [dummy-configmap.yaml, t1.yaml]}\n",
		"multi-line flow mapping":         "{\n  kind: Kustomization,\n  resources: [\n    dummy-configmap.yaml, t1.yaml]\n}\n",
		"merge key":                       head + "<<: {namePrefix: x-}\nresources:\n  - t1.yaml\n",
		"a field kustomize does not know": head + "resources:\n  - t1.yaml\nresourcez:\n  - t2.yaml\n",
		"list in a second document":       head + "---\nresources:\n  - dummy-configmap.yaml\n  - t1.yaml\n",
		"list after a document end":       "kind: Kustomization\n...\n---\nresources:\n  - dummy-configmap.yaml\n  - t1.yaml\n",
		"list inside a quoted scalar":     head + "namePrefix: \"a\nresources:\n  - t1.yaml\n b\"\n",
		"whole list in a quoted scalar":   "namePrefix: \"\nresources:\n- dummy-configmap.yaml\n- t1.yaml\n\"\n",
		"empty list in a quoted scalar":   head + "namePrefix: \"a\nresources: []\n\"\n",
		// An anchor on the list, or inside it, that another field uses:
		// an edit of the list would edit that field too.
		"anchored list used by crds":            head + aliasedLists["crds"],
		"anchored list used by configurations":  head + aliasedLists["configurations"],
		"anchored flow list used by components": head + aliasedLists["components"],
		"anchored item used by crds":            head + aliasedLists["item"],
		"anchored list used in helm values":     head + aliasedLists["helm values"],
	} {
		t.Run(name, func(t *testing.T) {
			for op, edit := range map[string]func([]byte, string) ([]byte, bool, error){"Add": Add, "Remove": Remove} {
				for _, e := range []string{"t1.yaml", "t2.yaml"} {
					out, changed, err := edit([]byte(content), e)
					if !IsForm(err) || changed || out != nil {
						t.Fatalf("%s %s: changed=%v err=%v, want ErrForm and nothing written:\n%s", op, e, changed, err, out)
					}
				}
			}
			if _, err := Resources([]byte(content)); !IsForm(err) {
				t.Fatalf("Resources: %v, want ErrForm", err)
			}
		})
	}
}

// aliasedLists are resources lists with an anchor (on the list or on an
// entry) that another field kustomize reads uses through an alias.
var aliasedLists = map[string]string{
	"crds":           "resources: &list\n  - dummy-configmap.yaml\n  - t1.yaml\ncrds: *list\n",
	"configurations": "resources: &list # the tier's\n  - dummy-configmap.yaml\n  - t1.yaml\nconfigurations: *list\n",
	"components":     "resources: &list [dummy-configmap.yaml, t1.yaml]\ncomponents: *list\n",
	"item":           "resources:\n  - &d dummy-configmap.yaml\n  - t1.yaml\ncrds:\n  - *d\n",
	"helm values":    "resources: &list\n  - dummy-configmap.yaml\n  - t1.yaml\nhelmCharts:\n  - name: x\n    valuesInline:\n      tenants: *list\n",
}

// TestAliasedListRefusedThoughVerified: a list that another field uses
// through an alias is refused by the name of its anchor, even when its
// content was once remembered as checked, so no edit takes the fast path
// that checks only the edited lines.
func TestAliasedListRefusedThoughVerified(t *testing.T) {
	const head = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
	for name, list := range aliasedLists {
		content := []byte(head + list)
		anchor := "&list"
		if name == "item" {
			anchor = "&d"
		}
		verified.add(sha256.Sum256(content))
		for op, edit := range map[string]func([]byte) ([]byte, bool, error){
			"Add t2":    func(c []byte) ([]byte, bool, error) { return Add(c, "t2.yaml") },
			"Remove t1": func(c []byte) ([]byte, bool, error) { return Remove(c, "t1.yaml") },
			"Filter":    func(c []byte) ([]byte, bool, error) { return Filter(c, func(string) bool { return false }) },
		} {
			out, changed, err := edit(content)
			if !IsForm(err) || changed || out != nil || !strings.Contains(err.Error(), anchor) {
				t.Errorf("%s, %s: changed=%v err=%v, want ErrForm naming %s:\n%s", name, op, changed, err, anchor, out)
			}
		}
	}
}

func FuzzEdit(f *testing.F) {
	f.Add([]byte(fixture), "t.yaml")
	f.Add([]byte("resources:\n- a\n- b\n"), "b")
	f.Add([]byte("kind: K\n"), "x.yaml")
	f.Fuzz(func(t *testing.T, content []byte, entry string) {
		if entry == "" || !validEntry(entry) {
			return
		}
		before, err := Resources(content)
		if err != nil {
			return
		}
		added, _, err := Add(content, entry)
		if err != nil {
			return // Add verifies its own output; refusing is allowed
		}
		got, err := Resources(added)
		if err != nil || !slices.Contains(got, entry) {
			t.Fatalf("after Add(%q): %v %v", entry, got, err)
		}
		if n := count(got, entry); n != max(1, count(before, entry)) {
			t.Fatalf("Add made %d copies of %q", n, entry)
		}
		removed, _, err := Remove(added, entry)
		if err != nil {
			return
		}
		got, _ = Resources(removed)
		if slices.Contains(got, entry) {
			t.Fatalf("Remove left %q in %v", entry, got)
		}
	})
}

func validEntry(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func count(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}

// TestAddRemembersItsParse: the parse Add caches for a file it wrote, a
// tier's large one or a shard folder's small one, is the parse of that
// file read afresh, whatever its line endings, final newline, comments and
// blank lines after the list.
func TestAddRemembersItsParse(t *testing.T) {
	for _, n := range []int{3, 2000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { testAddRemembersItsParse(t, n) })
	}
}

func testAddRemembersItsParse(t *testing.T, n int) {
	var list strings.Builder
	for i := range n {
		fmt.Fprintf(&list, "  - tenant-%d.yaml # t%d\n", i, i)
	}
	for name, content := range map[string]string{
		"plain":         "kind: Kustomization\nresources:\n" + list.String(),
		"crlf":          strings.ReplaceAll("kind: Kustomization\nresources:\n"+list.String(), "\n", "\r\n"),
		"no final nl":   "resources:\n" + strings.TrimSuffix(list.String(), "\n"),
		"comment after": "resources:\n" + list.String() + "\n# end\n",
		"key after":     "resources:\n" + list.String() + "patches: []\n",
		"dash indent":   "resources:\n" + strings.ReplaceAll(list.String(), "  - ", "- "),
	} {
		out, changed, err := Add([]byte(content), "new-tenant.yaml")
		if err != nil || !changed {
			t.Fatalf("%s: Add: %v, changed %v", name, err, changed)
		}
		cached, ok := parsed.get(sha256.Sum256(out))
		if !ok {
			t.Errorf("%s: the parse of Add's output is not cached", name)
			continue
		}
		lines := splitLines(out)
		fresh, err := parse(lines)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cached.lines, lines) || !reflect.DeepEqual(cached.block, fresh) {
			t.Errorf("%s: cached parse differs from a fresh one:\n%+v\n%+v", name, cached.block.items[len(cached.block.items)-3:], fresh.items[len(fresh.items)-3:])
		}
	}
}

// TestParseCacheForgetsTheOldestPastItsBound: the cache holds parses up to
// its byte bound, forgetting the oldest first, and a file read again after
// it was forgotten parses as before.
func TestParseCacheForgetsTheOldestPastItsBound(t *testing.T) {
	c := newParseCache(1000)
	files := make([]parsedFile, 5)
	for i := range files {
		content := []byte(fmt.Sprintf("resources:\n  - %s.yaml\n", strings.Repeat("x", 150+i)))
		lines := splitLines(content)
		b, err := parse(lines)
		if err != nil {
			t.Fatal(err)
		}
		files[i] = parsedFile{lines, b}
		c.put(sha256.Sum256(content), files[i])
		if c.bytes > c.limit {
			t.Fatalf("after %d puts the cache holds %d bytes, over its bound %d", i+1, c.bytes, c.limit)
		}
	}
	sum := func(p parsedFile) [32]byte { return sha256.Sum256([]byte(strings.Join(p.lines, ""))) }
	if _, ok := c.get(sum(files[0])); ok {
		t.Error("the oldest parse is still held past the bound")
	}
	if got, ok := c.get(sum(files[4])); !ok || !reflect.DeepEqual(got, files[4]) {
		t.Errorf("the newest parse: held %v, %+v", ok, got)
	}
	want := 0
	for _, k := range c.order {
		want += c.m[k].size()
	}
	if len(c.order) != len(c.m) || c.bytes != want {
		t.Errorf("order %d, map %d, bytes %d, sizes %d: out of step", len(c.order), len(c.m), c.bytes, want)
	}
}

// TestVerifiedHoldsThousandsOfFolders: the set of files checked as YAML
// holds a repository's shard folders, each in a few versions, so that no
// folder's kustomization is parsed as YAML again because hundreds of
// others were read since (at 256, 300 shard folders pushed each other out).
func TestVerifiedHoldsThousandsOfFolders(t *testing.T) {
	var sums [][32]byte
	for i := range 4000 {
		content := []byte(fmt.Sprintf("resources:\n  - shard-%d-a.yaml\n  - shard-%d-b.yaml\n", i, i))
		if _, err := Resources(content); err != nil {
			t.Fatal(err)
		}
		sums = append(sums, sha256.Sum256(content))
	}
	for i, sum := range sums {
		if !verified.has(sum) {
			t.Fatalf("file %d of %d read is no longer known as checked", i+1, len(sums))
		}
	}
}
