package docs

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/tenant-worker/tenant-worker/internal/message"
)

var (
	mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*([^)\s]+)(?:\s+"[^"]*")?\s*\)`)
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// TestLinks: every relative link of the README and docs/*.md names a file
// of the repository, and every #anchor a heading of the page it points to.
func TestLinks(t *testing.T) {
	pages := loadPages(t)
	byPath := map[string]*page{}
	for _, p := range pages {
		byPath[p.path] = p
	}
	n := 0
	for _, p := range pages {
		for _, l := range p.prose {
			for _, m := range mdLink.FindAllStringSubmatch(l.text, -1) {
				target := m[1]
				if scheme.MatchString(target) {
					continue
				}
				n++
				file, anchor, _ := strings.Cut(target, "#")
				rel := p.path
				if file != "" {
					rel = filepath.ToSlash(filepath.Join(filepath.Dir(p.path), file))
					if rel == ".." || strings.HasPrefix(rel, "../") {
						t.Errorf("%s: link %s leaves the repository (a fresh clone has nothing there)", p.where(l.line), target)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
						t.Errorf("%s: link %s: no such file %s", p.where(l.line), target, rel)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				to := byPath[rel]
				if to == nil && strings.HasSuffix(rel, ".md") {
					b, err := os.ReadFile(filepath.Join(root, rel))
					if err != nil {
						t.Fatal(err)
					}
					to = parsePage(rel, string(b))
				}
				if to == nil {
					t.Errorf("%s: link %s: an anchor into %s, which is not a markdown page", p.where(l.line), target, rel)
					continue
				}
				if !to.anchors()[anchor] {
					t.Errorf("%s: link %s: %s has no heading with anchor #%s", p.where(l.line), target, rel, anchor)
				}
			}
		}
	}
	if n == 0 {
		t.Error("found no relative links: the link parser is broken")
	}
}

// codeLines is every command-like piece of a page: its code spans and the
// lines of its code blocks.
func codeLines(p *page) []located { return append(slices.Clone(p.spans), p.blocks...) }

// TestMakeTargets: every `make <target>` the docs name is a target of the
// Makefile, and every VAR=value given to make is one of its variables.
func TestMakeTargets(t *testing.T) {
	targets, vars := makefile(t)
	n := 0
	for _, p := range loadPages(t) {
		for _, l := range codeLines(p) {
			for _, cmd := range commands(l.text) {
				if len(cmd) == 0 || cmd[0].text != "make" {
					continue
				}
				for _, w := range cmd[1:] {
					switch {
					case assignment.MatchString(w.text):
						name, _, _ := strings.Cut(w.text, "=")
						if !vars[name] {
							t.Errorf("%s: make %s: the Makefile has no variable %s", p.where(l.line), w.text, name)
						}
					case w.quoted || strings.HasPrefix(w.text, "-"):
					default:
						n++
						if !targets[w.text] {
							t.Errorf("%s: make %s: the Makefile has no such target", p.where(l.line), w.text)
						}
					}
				}
			}
		}
	}
	if n == 0 {
		t.Error("found no make targets in the docs: the parser is broken")
	}
}

var flagLike = regexp.MustCompile(`^--?[a-z][a-z0-9-]*(=.*)?$`)

// foreignFlags are flags the docs quote alone that belong to other
// programs, not to tenant-worker, make run or the benchmark.
var foreignFlags = map[string]string{
	"min-retry-delay": "Flux's controllers",
	"feature-gates":   "Flux's kustomize-controller",
	"concurrent":      "Flux's helm-controller",
}

// placeholder is a word that stands for arguments in the docs.
func placeholder(w string) bool {
	return w == "…" || w == "..." || w == ".." || strings.HasPrefix(w, "<")
}

// TestCommands: every `tenant-worker <command>` the docs show is a command
// of the binary, given flags it defines and a kind of message where it
// takes one; every `go run ./cmd/...` names a command of this repository
// with flags it defines; every flag quoted alone is one of them.
func TestCommands(t *testing.T) {
	subs := cliCommands(t)
	cliFlags := map[string]bool{}
	for _, c := range subs {
		for f := range c.flags {
			cliFlags[f] = true
		}
	}
	tools := map[string]map[string]bool{
		"./cmd/bench":    fileFlags(t, "cmd/bench"),
		"./cmd/devstack": fileFlags(t, "cmd/devstack"),
	}
	devFlags := map[string]bool{}
	for _, flags := range tools {
		for f := range flags {
			devFlags[f] = true
		}
	}
	checkFlags := func(where, what string, words []word, known map[string]bool) {
		for _, w := range words {
			if w.quoted || !flagLike.MatchString(w.text) {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(w.text, "-"), "=")
			if _, ok := known[name]; !ok && foreignFlags[name] == "" {
				t.Errorf("%s: %s has no flag %s", where, what, w.text)
			}
		}
	}
	n := 0
	for _, p := range loadPages(t) {
		for _, l := range codeLines(p) {
			where := p.where(l.line)
			// BENCH_FLAGS="..." wherever it is given.
			for _, w := range shellWords(l.text) {
				if v, ok := strings.CutPrefix(w.text, "BENCH_FLAGS="); ok {
					checkFlags(where, "./cmd/bench (BENCH_FLAGS)", shellWords(v), tools["./cmd/bench"])
				}
			}
			for _, cmd := range commands(l.text) {
				if len(cmd) == 0 {
					continue
				}
				switch first := strings.TrimPrefix(cmd[0].text, "./"); {
				case first == "tenant-worker" || first == "bin/tenant-worker":
					n++
					checkCLI(t, where, cmd[1:], subs)
				case first == "go" && len(cmd) > 2 && (cmd[1].text == "run" || cmd[1].text == "test"):
					for _, w := range cmd[2:] {
						if !strings.HasPrefix(w.text, "./") {
							continue
						}
						dir := strings.TrimSuffix(strings.TrimSuffix(w.text, "..."), "/")
						if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
							t.Errorf("%s: go %s %s: no such package", where, cmd[1].text, w.text)
						}
						if flags, ok := tools[dir]; ok {
							checkFlags(where, dir, cmd[3:], flags)
						}
					}
				case flagLike.MatchString(cmd[0].text) && !cmd[0].quoted && slices.Contains(p.spans, l):
					// A flag quoted alone: --wait is the CLI's, -sizes
					// the benchmark's or make run's.
					if strings.HasPrefix(cmd[0].text, "--") {
						checkFlags(where, "tenant-worker", cmd, cliFlags)
					} else {
						checkFlags(where, "./cmd/bench or ./cmd/devstack", cmd, devFlags)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Error("found no tenant-worker commands in the docs: the parser is broken")
	}
}

// checkCLI checks the words after `tenant-worker` against the binary's
// commands.
func checkCLI(t *testing.T, where string, words []word, subs map[string]command) {
	t.Helper()
	if len(words) == 0 {
		return
	}
	sub := words[0].text
	if sub == "--help" || sub == "-h" || sub == "-help" || placeholder(sub) {
		return
	}
	c, ok := subs[sub]
	if !ok {
		names := slices.Sorted(maps.Keys(subs))
		t.Errorf("%s: tenant-worker %s: no such command (the binary has %s)", where, sub, strings.Join(names, ", "))
		return
	}
	positional := 0
	for i := 1; i < len(words); i++ {
		w := strings.TrimSuffix(strings.TrimPrefix(words[i].text, "["), "]")
		switch {
		case words[i].quoted || placeholder(w) || w == "":
		case flagLike.MatchString(w):
			name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
			isBool, ok := c.flags[name]
			if !ok {
				t.Errorf("%s: tenant-worker %s has no flag %s", where, sub, w)
			}
			if ok && !isBool && !hasValue && i+1 < len(words) {
				i++ // the flag's value
			}
		default:
			positional++
			if positional > 1 {
				continue
			}
			if len(c.verbs) > 0 {
				for _, v := range strings.Split(w, "|") {
					if !slices.Contains(c.verbs, v) {
						t.Errorf("%s: tenant-worker %s %s: %q is not one of %v", where, sub, w, v, c.verbs)
					}
				}
				continue
			}
			if !c.kind {
				t.Errorf("%s: tenant-worker %s takes no argument, the docs give it %q", where, sub, w)
				continue
			}
			for _, k := range strings.Split(w, "|") {
				if !slices.Contains(message.Kinds, message.Kind(k)) {
					t.Errorf("%s: tenant-worker %s %s: %q is not a kind of message (%v)", where, sub, w, k, message.Kinds)
				}
			}
		}
	}
}

var citedTest = regexp.MustCompile(`\b(?:Test|Fuzz|Benchmark|Example)[A-Z0-9_]\w*`)

// TestTestNames: every test the docs cite, in docs/guarantees.md and
// everywhere else, is a test function of the repository.
func TestTestNames(t *testing.T) {
	funcs := testFuncs(t)
	for _, p := range loadPages(t) {
		cited := 0
		for i, line := range strings.Split(p.text, "\n") {
			for _, name := range citedTest.FindAllString(line, -1) {
				cited++
				if !funcs[name] {
					t.Errorf("%s: %s is not a test function of any _test.go file", p.where(i+1), name)
				}
			}
		}
		if p.path == "docs/guarantees.md" && cited < 10 {
			t.Errorf("docs/guarantees.md cites %d tests; the parser is broken or the guarantees lost their tests", cited)
		}
	}
}

// headlineHeader is the header of the README's headline numbers, the one
// make bench prints its rows under (internal/testenv/bench.HeadlineHeader).
const headlineHeader = "| what | number (target: verdict) | size | date, machine | command |"

// A headline row is one claim a reader takes in at a glance: its cells
// are a sentence or two each, and the rest is a link to
// docs/performance.md.
const (
	headlineCellWords = 40
	headlineRows      = 12 // about ten
)

var (
	isoDate = regexp.MustCompile(`\b20\d\d-\d\d-\d\d\b`)
	verdict = regexp.MustCompile(`\b(met|missed|no target)\b`)
	// linkTarget is a markdown link's target, which a reader does not read.
	linkTarget = regexp.MustCompile(`\]\([^)]*\)`)
)

// words counts the words of a cell as a reader reads them: link targets
// left out, and marks such as "/" or "≤" not counted.
func words(cell string) int {
	n := 0
	for _, w := range strings.Fields(linkTarget.ReplaceAllString(cell, "]")) {
		if strings.IndexFunc(w, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0 {
			n++
		}
	}
	return n
}

// checkHeadlineRow says what is wrong with one row of the headline table:
// the five cells, none longer than a sentence or two, a verdict on the
// target, a date, and a command.
func checkHeadlineRow(cells []string) []string {
	if len(cells) != 5 {
		return []string{fmt.Sprintf("has %d cells, want 5 (%s)", len(cells), headlineHeader)}
	}
	var out []string
	names := []string{"what", "number", "size", "date, machine", "command"}
	for i, c := range cells {
		if c == "" {
			out = append(out, fmt.Sprintf("its %s cell is empty", names[i]))
		}
		if n := words(c); n > headlineCellWords {
			out = append(out, fmt.Sprintf("its %s cell has %d words, more than %d: say the rest in docs/performance.md and link it", names[i], n, headlineCellWords))
		}
	}
	if cells[1] != "" && !verdict.MatchString(cells[1]) {
		out = append(out, "its number says no target met or missed (or \"no target\")")
	}
	if !isoDate.MatchString(cells[3]) {
		out = append(out, "its date, machine cell has no date (YYYY-MM-DD)")
	}
	if m := quoted.FindStringSubmatch(cells[4]); m == nil || strings.TrimSpace(m[1]) == "" {
		out = append(out, "has no command that measures it (a `code span` in its command cell)")
	}
	return out
}

// TestHeadlineNumbers: the README's headline numbers are about ten rows,
// one claim a row, each with its verdict, date and command.
func TestHeadlineNumbers(t *testing.T) {
	table := rows(t, pageAt(t, "README.md"), headlineHeader)
	if len(table) > headlineRows {
		t.Errorf("README.md: %d headline rows; keep about ten (at most %d), the rest in docs/performance.md", len(table), headlineRows)
	}
	for _, row := range table {
		for _, problem := range checkHeadlineRow(row) {
			t.Errorf("README.md: headline row %q %s", row[0], problem)
		}
	}
}

// TestCheckHeadlineRow: each rule of a headline row fails on a row that
// breaks it.
func TestCheckHeadlineRow(t *testing.T) {
	good := []string{"`SendMessage` to the commit, p50", "33 ms (≤1.3x the floor's: met)", "10 tenants", "2026-12-03, 2 cores", "`make bench`"}
	if p := checkHeadlineRow(good); len(p) > 0 {
		t.Fatalf("a good row: %v", p)
	}
	long := "33 ms on the 3rd, " + strings.Repeat("and every run of every day with every caveat ", 5) + "(met)"
	for _, tc := range []struct {
		name string
		edit func([]string) []string
		want string
	}{
		{"a paragraph in a cell", func(r []string) []string { r[1] = long; return r }, "number cell has"},
		{"no command", func(r []string) []string { r[4] = "make bench"; return r }, "no command"},
		{"an empty command", func(r []string) []string { r[4] = ""; return r }, "no command"},
		{"a cell missing", func(r []string) []string { return r[:4] }, "has 4 cells"},
		{"no verdict", func(r []string) []string { r[1] = "33 ms"; return r }, "no target met or missed"},
		{"no date", func(r []string) []string { r[3] = "last week"; return r }, "no date"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := checkHeadlineRow(tc.edit(slices.Clone(good)))
			if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Errorf("got %q, want a problem saying %q", p, tc.want)
			}
		})
	}
	// A link's target is not read, so it is not counted.
	if n := words("[the same on Gitea](docs/performance.md#against-real-gitea-and-a-very-long-anchor) ≤ / x"); n != 5 {
		t.Errorf("words = %d, want 5", n)
	}
}

var (
	bareURL = regexp.MustCompile(`\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s)>\]]+`)
	// upward is a path that starts by leaving the folder it is read from.
	upward = regexp.MustCompile("(?:^|[\\s=:'\"(`])(\\.\\./[^\\s'\")`]*)")
)

// localHost reports whether a URL's host is this machine (the local
// stack of make run and the tests), which a reader has, not a site.
func localHost(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	h := u.Hostname()
	return h == "localhost" || h == "127.0.0.1" || h == "::1"
}

// checkInside says where a page points outside the repository: a link to
// a site (anything but this machine), a relative link that leaves the
// repository, and a path in its code that starts above the repository
// (commands are run at its root). A clone has nothing there, and the page
// must say what it needs itself.
func checkInside(p *page) []string {
	var out []string
	for _, l := range p.prose {
		text := l.text
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			switch {
			case scheme.MatchString(target):
				if !localHost(target) {
					out = append(out, fmt.Sprintf("%s: links to %s, outside the repository", p.where(l.line), target))
				}
			default:
				file, _, _ := strings.Cut(target, "#")
				if file == "" {
					continue
				}
				rel := filepath.ToSlash(filepath.Join(filepath.Dir(p.path), file))
				if rel == ".." || strings.HasPrefix(rel, "../") {
					out = append(out, fmt.Sprintf("%s: links to %s, which leaves the repository", p.where(l.line), target))
				}
			}
		}
		for _, u := range bareURL.FindAllString(mdLink.ReplaceAllString(text, ""), -1) {
			if !localHost(u) {
				out = append(out, fmt.Sprintf("%s: points at %s, outside the repository", p.where(l.line), u))
			}
		}
	}
	for _, l := range codeLines(p) {
		for _, m := range upward.FindAllStringSubmatch(l.text, -1) {
			out = append(out, fmt.Sprintf("%s: names %s, above the repository's root", p.where(l.line), m[1]))
		}
	}
	return out
}

// TestNothingOutside: no page of the docs points outside the repository.
func TestNothingOutside(t *testing.T) {
	for _, p := range loadPages(t) {
		for _, problem := range checkInside(p) {
			t.Error(problem)
		}
	}
}

// TestCheckInside: each way out of the repository is caught, and what
// stays in it is not.
func TestCheckInside(t *testing.T) {
	for _, tc := range []struct {
		path, text string
		want       string // a substring of the one problem; "" for none
	}{
		{"README.md", "See `../shared/SPEC.md` for the messages.\n", "names ../shared/SPEC.md"},
		{"README.md", "Seeded as\n\n```sh\nbash ../shared/bench/seed-repo.sh\n```\n", "names ../shared/bench/seed-repo.sh"},
		{"README.md", "The [spec](../shared/SPEC.md).\n", "leaves the repository"},
		{"docs/x.md", "The [spec](../../shared/SPEC.md#queues).\n", "leaves the repository"},
		{"docs/x.md", "The [platform](https://github.com/aws-samples/eks-saas-gitops).\n", "links to https://github.com"},
		{"docs/x.md", "Read https://example.org/guide first.\n", "points at https://example.org/guide"},
		{"docs/x.md", "The [README](../README.md#headline-numbers), [Deployment](deployment.md).\n", ""},
		{"docs/x.md", "Open http://127.0.0.1:8080/ or <http://localhost:8080/metrics>.\n", ""},
		{"docs/x.md", "The groups (`.../journal`, `prometheus-operator/.../monitoring`).\n", ""},
	} {
		got := checkInside(parsePage(tc.path, tc.text))
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("%s %q: %q, want nothing", tc.path, tc.text, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("%s %q: %q, want one problem saying %q", tc.path, tc.text, got, tc.want)
		}
	}
}
