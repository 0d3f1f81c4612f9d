package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gate"
	"github.com/tenant-worker/tenant-worker/internal/reject"
)

// pageAt returns the page at path (relative to the repository).
func pageAt(t *testing.T, path string) *page {
	t.Helper()
	for _, p := range loadPages(t) {
		if p.path == path {
			return p
		}
	}
	t.Fatalf("no page %s", path)
	return nil
}

// rows returns the rows of the table of p whose header is header.
func rows(t *testing.T, p *page, header string) [][]string {
	t.Helper()
	r := p.table[header]
	if len(r) == 0 {
		t.Fatalf("%s has no table with the header %s", p.path, header)
	}
	return r
}

var (
	envName   = regexp.MustCompile("`([A-Z][A-Z0-9_]+)`")
	quoted    = regexp.MustCompile("`([^`]+)`")
	noDefault = map[string]bool{"": true, "(none)": true, "(required)": true, "(memory)": true}
)

// TestSettings: the settings table of docs/configuration.md lists every
// setting `tenant-worker run` accepts and no other, each with the binary's
// default, and the flag of each is named as the page says.
func TestSettings(t *testing.T) {
	p := pageAt(t, "docs/configuration.md")
	accepted := map[string]setting{}
	for _, s := range settings(t) {
		accepted[s.env] = s
	}
	documented := map[string]bool{}
	for _, row := range rows(t, p, "| variable | default | meaning |") {
		var names []string
		for _, m := range envName.FindAllStringSubmatch(row[0], -1) {
			names = append(names, m[1])
		}
		if len(names) == 0 {
			t.Errorf("docs/configuration.md: settings row %q names no variable", row[0])
			continue
		}
		defaults := splitDefaults(row[1], len(names))
		if defaults == nil {
			t.Errorf("docs/configuration.md: row %s: default %q does not give one value per variable", row[0], row[1])
		}
		for i, name := range names {
			documented[name] = true
			s, ok := accepted[name]
			if !ok {
				t.Errorf("docs/configuration.md: %s is in the settings table, but the binary accepts no such setting (config.EnvNames)", name)
				continue
			}
			if s.flag == nil {
				if !strings.Contains(row[2], "no flag") {
					t.Errorf("docs/configuration.md: %s has no flag, and its row does not say so", name)
				}
				continue
			}
			if want := strings.ToLower(strings.ReplaceAll(name, "_", "-")); s.flag.Name != want {
				t.Errorf("docs/configuration.md: the flag of %s is --%s, not --%s as the page's rule says", name, s.flag.Name, want)
			}
			if defaults != nil && !sameDefault(defaults[i], s.flag.DefValue) {
				t.Errorf("docs/configuration.md: %s defaults to %q, the table says %q", name, s.flag.DefValue, defaults[i])
			}
		}
	}
	for _, s := range settings(t) {
		if !documented[s.env] {
			t.Errorf("docs/configuration.md: the binary accepts %s, but the settings table has no row for it", s.env)
		}
	}
}

// splitDefaults splits a default cell such as "`10s` / `15m`" into n
// values, or returns nil when it does not hold n.
func splitDefaults(cell string, n int) []string {
	cell = strings.TrimSpace(cell)
	if noDefault[cell] {
		return make([]string, n)
	}
	parts := []string{cell}
	if n > 1 {
		for _, sep := range []string{" / ", ", "} {
			if p := strings.Split(cell, sep); len(p) == n {
				parts = p
				break
			}
		}
	}
	if len(parts) != n {
		return nil
	}
	for i, v := range parts {
		v = strings.Trim(strings.TrimSpace(v), "`")
		if noDefault[v] {
			v = ""
		}
		parts[i] = v
	}
	return parts
}

func sameDefault(doc, code string) bool {
	if doc == code {
		return true
	}
	a, errA := time.ParseDuration(doc)
	b, errB := time.ParseDuration(code)
	return errA == nil && errB == nil && a == b
}

var metricRef = regexp.MustCompile(`\btenant_worker_[a-z0-9_]+`)

// TestMetrics: every metric the docs name is one the binary registers,
// and the metrics table of docs/operations.md lists all of them.
func TestMetrics(t *testing.T) {
	registered := metrics(t)
	known := func(name string) bool {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && registered[base] {
				return true
			}
		}
		return false
	}
	for _, p := range loadPages(t) {
		for i, line := range strings.Split(p.text, "\n") {
			for _, loc := range metricRef.FindAllStringIndex(line, -1) {
				name := line[loc[0]:loc[1]]
				if loc[0] > 0 && line[loc[0]-1] == '{' {
					continue // ${tenant_worker_role_arn}: a Flux substitution
				}
				if !known(name) {
					t.Errorf("%s: %s is not a metric the binary registers", p.where(i+1), name)
				}
			}
		}
	}
	listed := map[string]bool{}
	for _, row := range rows(t, pageAt(t, "docs/operations.md"), "| metric | labels |") {
		for _, m := range quoted.FindAllStringSubmatch(row[0], -1) {
			listed[m[1]] = true
		}
	}
	for name := range registered {
		if !listed[name] {
			t.Errorf("docs/operations.md: the binary registers %s, but the metrics table has no row for it", name)
		}
	}
}

var alertRef = regexp.MustCompile(`\bTenantWorker[A-Z]\w*`)

// TestOperations: docs/operations.md has a runbook for every alert rule
// and every cause of a pause, and its table of rejection reasons is the
// code's; every alert the docs name exists.
func TestOperations(t *testing.T) {
	p := pageAt(t, "docs/operations.md")
	headings := map[string]bool{}
	for _, h := range p.headings {
		headings[strings.Trim(h, "`")] = true
	}
	rules := alerts(t)
	for _, a := range rules {
		if !headings[a] {
			t.Errorf("docs/operations.md: alert %s (deploy/monitoring/alerts.yaml) has no runbook section (### %s)", a, a)
		}
	}
	for _, pg := range loadPages(t) {
		for i, line := range strings.Split(pg.text, "\n") {
			for _, name := range alertRef.FindAllString(line, -1) {
				if !slices.Contains(rules, name) {
					t.Errorf("%s: %s is not an alert of deploy/monitoring/alerts.yaml", pg.where(i+1), name)
				}
			}
		}
	}
	for _, c := range gate.Causes {
		if !headings[string(c)] {
			t.Errorf("docs/operations.md: pause cause %s (internal/gate) has no runbook section (### `%s`)", c, c)
		}
	}
	listed := map[string]bool{}
	for _, row := range rows(t, p, "| reason | the message |") {
		r := strings.Trim(row[0], "`")
		listed[r] = true
		if !slices.Contains(reject.Reasons, reject.Reason(r)) {
			t.Errorf("docs/operations.md: rejection reason %s is not one of internal/reject's", r)
		}
	}
	for _, r := range reject.Reasons {
		if !listed[string(r)] {
			t.Errorf("docs/operations.md: rejection reason %s (internal/reject) is not in the table", r)
		}
	}
}

// TestLayout: the layout table of docs/architecture.md names every package
// under cmd/ and internal/, and every path it names exists.
func TestLayout(t *testing.T) {
	named := map[string]bool{}
	for _, row := range rows(t, pageAt(t, "docs/architecture.md"), "| path | what |") {
		for _, m := range quoted.FindAllStringSubmatch(row[0], -1) {
			path := strings.TrimSuffix(m[1], "/")
			named[path] = true
			if !exists(path) {
				t.Errorf("docs/architecture.md: layout names %s, which does not exist", m[1])
			}
		}
	}
	for pkg := range packages(t) {
		if !named[pkg] {
			t.Errorf("docs/architecture.md: package %s is not in the layout table", pkg)
		}
	}
}

// exists reports whether path, relative to the repository and perhaps a
// glob, names something.
func exists(path string) bool {
	m, err := filepath.Glob(filepath.Join(root, path))
	return err == nil && len(m) > 0
}

var (
	repoPath = regexp.MustCompile(`^(\.ci|bench|cmd|deploy|docs|integration|internal|templates)(/[\w.*-]+)*/?$|^(Makefile|Dockerfile|go\.mod|docker-compose[\w.-]*\.yaml)$`)
	// generated are paths the docs name that a fresh clone does not have.
	generated = map[string]string{
		"integration/testdata/status-page.png": "written by the browser test with SCREENSHOT=1, ignored by git",
	}
)

// TestPaths: every file or folder of the repository the docs quote, such
// as `deploy/monitoring/alerts.yaml`, exists.
func TestPaths(t *testing.T) {
	n := 0
	for _, p := range loadPages(t) {
		for _, l := range codeLines(p) {
			for _, w := range shellWords(l.text) {
				path := strings.TrimRight(strings.TrimPrefix(w.text, "./"), ",;:)")
				if !repoPath.MatchString(path) || generated[path] != "" {
					continue
				}
				n++
				if !exists(strings.TrimSuffix(path, "/")) {
					t.Errorf("%s: %s does not exist", p.where(l.line), path)
				}
			}
		}
	}
	if n == 0 {
		t.Error("found no paths in the docs: the parser is broken")
	}
	for path := range generated {
		if _, err := os.Stat(filepath.Join(root, ".gitignore")); err == nil {
			b, _ := os.ReadFile(filepath.Join(root, ".gitignore"))
			if !strings.Contains(string(b), path) {
				t.Errorf("%s is treated as generated, but .gitignore does not name it", path)
			}
		}
	}
}
