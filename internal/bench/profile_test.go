package bench

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Every function of this module that the profile report looks for
// (profileFocus) is declared in its package's source: a renamed or
// removed function would read "no sample" in BENCHMARKS.md forever (the
// report named stageTake and runBatches.func1 for a run after both were
// gone). A closure (F.funcN) needs F to hold at least N function literals.
func TestProfileFocusFunctionsExist(t *testing.T) {
	const module = "github.com/shardis/shardis/"
	// pkg.(*Recv).Name or pkg.Name, then .funcN for a closure
	name := regexp.MustCompile(`^([a-z/]+)\.(?:\(\*?([A-Za-z0-9_]+)\)\.)?([A-Za-z0-9_]+)(?:\.func([0-9]+))?$`)
	// package dir → "Recv.Name" or "Name" → how many function literals
	// its body holds (-1 for none: declared)
	declared := map[string]map[string]int{}
	decls := func(dir string) map[string]int {
		if d, ok := declared[dir]; ok {
			return d
		}
		d := map[string]int{}
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range file.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok {
					continue
				}
				key := fn.Name.Name
				if fn.Recv != nil && len(fn.Recv.List) == 1 {
					typ := fn.Recv.List[0].Type
					if star, ok := typ.(*ast.StarExpr); ok {
						typ = star.X
					}
					if id, ok := typ.(*ast.Ident); ok {
						key = id.Name + "." + key
					}
				}
				lits := 0
				if fn.Body != nil {
					ast.Inspect(fn.Body, func(n ast.Node) bool {
						if _, ok := n.(*ast.FuncLit); ok {
							lits++
						}
						return true
					})
				}
				d[key] = lits
			}
		}
		declared[dir] = d
		return d
	}
	checked := 0
	for _, pf := range profileFocus {
		rest, ok := strings.CutPrefix(pf.name, module)
		if !ok {
			continue // the runtime's or the standard library's
		}
		m := name.FindStringSubmatch(rest)
		if m == nil {
			t.Errorf("profile focus %q: not a function name this test can read", pf.name)
			continue
		}
		key := m[3]
		if m[2] != "" {
			key = m[2] + "." + key
		}
		lits, ok := decls(m[1])[key]
		switch {
		case !ok:
			t.Errorf("profile focus %q (%s): no such function in %s", pf.name, pf.what, m[1])
		case m[4] != "":
			if n, _ := strconv.Atoi(m[4]); n > lits {
				t.Errorf("profile focus %q (%s): %s holds %d function literals, no func%s", pf.name, pf.what, key, lits, m[4])
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no focus function of this module checked")
	}
}
