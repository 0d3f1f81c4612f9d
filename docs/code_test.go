package docs

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/config"
)

// What the docs are checked against, read from the code and the Makefile
// each time, never from a list kept here.

// root is the repository, seen from this package's folder.
const root = ".."

// skipDir says which folders hold no code of this project: version
// control, the built tools (Gitea's and the control plane's sources among
// them), build output.
func skipDir(rel string, d fs.DirEntry) bool {
	name := d.Name()
	return rel != "." && (strings.HasPrefix(name, ".") || name == "bin" || name == "node_modules")
}

// testFuncs is every top-level Test, Fuzz, Benchmark and Example function
// of every _test.go file.
func testFuncs(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if skipDir(rel, d) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && testName.MatchString(fn.Name.Name) {
				out[fn.Name.Name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("found no test functions")
	}
	return out
}

var testName = regexp.MustCompile(`^(Test|Fuzz|Benchmark|Example)[A-Z0-9_]\w*$`)

var (
	makeRule = regexp.MustCompile(`(?m)^([A-Za-z][\w.-]*(?:[ \t]+[A-Za-z][\w.-]*)*)[ \t]*:(?:[^=]|$)`)
	makeVar  = regexp.MustCompile(`(?m)^([A-Z_][A-Z0-9_]*)[ \t]*[?:+]?=`)
	phony    = regexp.MustCompile(`(?m)^\.PHONY:(.*)$`)
)

// makefile is the Makefile's targets and variables.
func makefile(t *testing.T) (targets, vars map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets, vars = map[string]bool{}, map[string]bool{}
	for _, m := range makeRule.FindAllStringSubmatch(string(b), -1) {
		for _, name := range strings.Fields(m[1]) {
			targets[name] = true
		}
	}
	for _, m := range phony.FindAllStringSubmatch(string(b), -1) {
		for _, name := range strings.Fields(m[1]) {
			targets[name] = true
		}
	}
	for _, m := range makeVar.FindAllStringSubmatch(string(b), -1) {
		vars[m[1]] = true
	}
	if !targets["test"] {
		t.Fatal("the Makefile has no target test: parsing it failed")
	}
	return targets, vars
}

// setting is one environment variable the worker reads, and its flag.
type setting struct {
	env  string
	flag *flag.Flag // nil for GIT_TOKEN, which has no flag
}

var envInUsage = regexp.MustCompile(`\(env ([A-Z0-9_]+)\)$`)

// settings lists what `tenant-worker run` accepts: every environment
// variable config.EnvNames reports, each with the flag whose usage names it.
func settings(t *testing.T) []setting {
	t.Helper()
	fs := flag.NewFlagSet("docs", flag.ContinueOnError)
	o := config.Default()
	o.Bind(fs, func(string) string { return "" })
	byEnv := map[string]*flag.Flag{}
	fs.VisitAll(func(f *flag.Flag) {
		if m := envInUsage.FindStringSubmatch(f.Usage); m != nil {
			byEnv[m[1]] = f
		}
	})
	var out []setting
	for _, env := range config.EnvNames() {
		out = append(out, setting{env, byEnv[env]})
	}
	if len(out) == 0 {
		t.Fatal("config.EnvNames reports no settings")
	}
	return out
}

var metricName = regexp.MustCompile(`Name:\s*"(tenant_worker_[a-z0-9_]+)"`)

// metrics is every metric the code registers (Name: "tenant_worker_...").
func metrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricName.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("found no metrics in internal/")
	}
	return out
}

var alertRule = regexp.MustCompile(`(?m)^\s*-\s*alert:\s*(\S+)\s*$`)

// alerts is every alert rule of deploy/monitoring/alerts.yaml.
func alerts(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deploy", "monitoring", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range alertRule.FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatal("found no alert rules in deploy/monitoring/alerts.yaml")
	}
	return out
}

// packages is every folder under cmd/ and internal/ with non-test Go files.
func packages(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, top := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				rel, _ := filepath.Rel(root, filepath.Dir(path))
				out[filepath.ToSlash(rel)] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
