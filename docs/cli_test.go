package docs

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/config"
)

// The commands of the binary and of cmd/, and their flags, read from the
// Go source.

// command is a subcommand of tenant-worker: its flags (true for a
// boolean flag, which takes no value), and whether it takes the kind of a
// message (onboarding, ...) as its argument.
type command struct {
	flags map[string]bool
	kind  bool
	// verbs are the words its first argument is compared with
	// (fs.Arg(0) == "show"), for a command that takes one of them.
	verbs []string
}

// goPackage is the declarations of one package's non-test files.
type goPackage struct {
	funcs map[string][]*ast.FuncDecl // functions and methods, by name
	files []*ast.File
}

func parsePackage(t *testing.T, dir string) *goPackage {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	p := &goPackage{funcs: map[string][]*ast.FuncDecl{}}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		p.files = append(p.files, f)
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok {
				p.funcs[fn.Name.Name] = append(p.funcs[fn.Name.Name], fn)
			}
		}
	}
	if len(p.files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return p
}

// flagName is the name a flag-defining call such as fs.Bool("wait", ...)
// or fs.StringVar(&v, "tier", ...) gives its flag, and whether the flag
// is a boolean.
func flagName(call *ast.CallExpr) (name string, isBool, ok bool) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", false, false
	}
	i := -1
	switch sel.Sel.Name {
	case "Bool", "String", "Int", "Int64", "Uint", "Uint64", "Float64", "Duration", "Func", "BoolFunc":
		i = 0
	case "BoolVar", "StringVar", "IntVar", "Int64Var", "UintVar", "Uint64Var", "Float64Var", "DurationVar", "Var", "TextVar":
		i = 1
	default:
		return "", false, false
	}
	if len(call.Args) <= i {
		return "", false, false
	}
	lit, ok := call.Args[i].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false, false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, strings.HasPrefix(sel.Sel.Name, "Bool"), err == nil
}

// fileFlags is every flag a command's source files define (true for a
// boolean).
func fileFlags(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, f := range parsePackage(t, dir).files {
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if name, isBool, ok := flagName(call); ok {
					out[name] = isBool
				}
			}
			return true
		})
	}
	if len(out) == 0 {
		t.Fatalf("found no flags in %s", dir)
	}
	return out
}

// groups are the settings groups a command may bind, by their names in
// internal/config.
var groups = map[string]config.Group{"Queues": config.Queues, "Git": config.Git, "Worker": config.Worker}

// settingFlags is the flags of the settings of g, as the binary binds them
// (true for a boolean).
func settingFlags(g config.Group) map[string]bool {
	fs := flag.NewFlagSet("docs", flag.ContinueOnError)
	o := config.Default()
	o.BindGroups(fs, func(string) string { return "" }, g)
	out := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		out[f.Name] = ok && b.IsBoolFlag()
	})
	return out
}

// cliCommands reads the subcommands from the switch in internal/cli's
// Main, and each one's flags from the function it calls and what that
// calls in turn: flag definitions, and the settings groups it binds.
func cliCommands(t *testing.T) map[string]command {
	t.Helper()
	pkg := parsePackage(t, "internal/cli")
	mains := pkg.funcs["Main"]
	if len(mains) != 1 {
		t.Fatal("internal/cli has no func Main")
	}
	out := map[string]command{}
	ast.Inspect(mains[0].Body, func(n ast.Node) bool {
		cc, ok := n.(*ast.CaseClause)
		if !ok {
			return true
		}
		handler := ""
		for _, stmt := range cc.Body {
			ast.Inspect(stmt, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok && handler == "" {
					if id, ok := call.Fun.(*ast.Ident); ok && pkg.funcs[id.Name] != nil {
						handler = id.Name
					}
				}
				return handler == ""
			})
		}
		for _, e := range cc.List {
			lit, ok := e.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			name, _ := strconv.Unquote(lit.Value)
			if strings.HasPrefix(name, "-") {
				continue
			}
			c := command{flags: map[string]bool{"help": true, "h": true}}
			if handler != "" {
				pkg.collect(t, handler, &c, map[string]bool{})
			}
			out[name] = c
		}
		return false
	})
	if len(out) == 0 {
		t.Fatal("found no subcommands in internal/cli's Main")
	}
	return out
}

// collect adds to c what the functions named fn define.
func (p *goPackage) collect(t *testing.T, fn string, c *command, seen map[string]bool) {
	if seen[fn] {
		return
	}
	seen[fn] = true
	for _, decl := range p.funcs[fn] {
		ast.Inspect(decl, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				call, ok := n.X.(*ast.CallExpr)
				lit, isLit := n.Y.(*ast.BasicLit)
				if ok && isLit && lit.Kind == token.STRING && len(call.Args) == 1 {
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Arg" {
						if v, err := strconv.Unquote(lit.Value); err == nil && !slices.Contains(c.verbs, v) {
							c.verbs = append(c.verbs, v)
						}
					}
				}
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "message" && n.Sel.Name == "Kinds" {
					c.kind = true
				}
			case *ast.CallExpr:
				if name, isBool, ok := flagName(n); ok {
					c.flags[name] = isBool
					return true
				}
				switch f := n.Fun.(type) {
				case *ast.Ident:
					p.collect(t, f.Name, c, seen)
				case *ast.SelectorExpr:
					switch f.Sel.Name {
					case "Bind":
						maps.Copy(c.flags, settingFlags(config.Queues|config.Git|config.Worker))
					case "BindGroups":
						var g config.Group
						ast.Inspect(n.Args[len(n.Args)-1], func(n ast.Node) bool {
							if sel, ok := n.(*ast.SelectorExpr); ok {
								v, ok := groups[sel.Sel.Name]
								if !ok {
									t.Fatalf("BindGroups with unknown group %s", sel.Sel.Name)
								}
								g |= v
								return false
							}
							return true
						})
						maps.Copy(c.flags, settingFlags(g))
					default:
						if p.funcs[f.Sel.Name] != nil {
							p.collect(t, f.Sel.Name, c, seen)
						}
					}
				}
			}
			return true
		})
	}
}
