package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"testing"
)

// maxComplexity is the most cyclomatic complexity a non-test function
// outside internal/ may have (issue 25: "functions a reader can hold in
// their head").
const maxComplexity = 20

// complexity is gocyclo's measure of fn: 1, plus 1 for each if, for,
// range, non-default case of a switch or select, && and ||, counted over
// the whole declaration (function literals inside it included, as gocyclo
// counts them).
func complexity(fn *ast.FuncDecl) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

// funcName is fn's name as gocyclo prints it: (*T).M, (T).M or F.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if ix, ok := t.(*ast.IndexExpr); ok { // a generic receiver T[K]
		t = ix.X
	}
	if ix, ok := t.(*ast.IndexListExpr); ok {
		t = ix.X
	}
	switch t := t.(type) {
	case *ast.StarExpr:
		return fmt.Sprintf("(*%s).%s", recvBase(t.X), fn.Name.Name)
	default:
		return fmt.Sprintf("(%s).%s", recvBase(t), fn.Name.Name)
	}
}

func recvBase(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return recvBase(e.X)
	case *ast.IndexListExpr:
		return recvBase(e.X)
	}
	return "?"
}

// Every non-test function outside internal/ (and the generated proto/)
// stays at or under maxComplexity.
func TestFunctionComplexity(t *testing.T) {
	var over []string
	eachSourceFile(t, false, 0, func(fset *token.FileSet, f *ast.File) {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if c := complexity(fn); c > maxComplexity {
				over = append(over, fmt.Sprintf("%d %s %s", c, funcName(fn), fset.Position(fn.Pos())))
			}
		}
	})
	sort.Strings(over)
	for _, o := range over {
		t.Errorf("cyclomatic complexity over %d (split the function): %s", maxComplexity, o)
	}
}

// The measure counts what gocyclo counts, checked on a known function.
func TestComplexityMeasure(t *testing.T) {
	src := `package p
func f(a, b bool, xs []int, ch chan int) {
	if a && b || a { }
	for i := 0; i < 1; i++ { }
	for range xs { }
	switch { case a: case b: default: }
	select { case <-ch: default: }
	g := func() { if b { } }
	g()
}`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	// 1 + if + && + || + for + range + 2 cases + 1 comm case + the literal's if
	if got := complexity(f.Decls[0].(*ast.FuncDecl)); got != 10 {
		t.Errorf("complexity = %d, want 10", got)
	}
}
