package docs

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

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
