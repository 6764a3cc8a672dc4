package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strings"
	"testing"
)

// undocumented lists the exported identifiers of file f without a doc
// comment: functions, methods of exported types, types, and constants
// and variables (a spec of a parenthesised group counts as documented
// when it or its group has a comment).
func undocumented(fset *token.FileSet, f *ast.File) []string {
	var out []string
	miss := func(name string, pos token.Pos) {
		out = append(out, fset.Position(pos).String()+": "+name)
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || hasText(d.Doc) {
				continue
			}
			if d.Recv != nil && len(d.Recv.List) > 0 && !ast.IsExported(recvBase(stripStar(d.Recv.List[0].Type))) {
				continue
			}
			miss(funcName(d), d.Pos())
		case *ast.GenDecl:
			if d.Tok == token.IMPORT {
				continue
			}
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && !hasText(s.Doc) && !hasText(d.Doc) {
						miss(s.Name.Name, s.Pos())
					}
				case *ast.ValueSpec:
					if hasText(s.Doc) || hasText(d.Doc) || hasText(s.Comment) {
						continue
					}
					for _, n := range s.Names {
						if n.IsExported() {
							miss(n.Name, n.Pos())
						}
					}
				}
			}
		}
	}
	return out
}

// hasText reports whether c is a comment with words in it.
func hasText(c *ast.CommentGroup) bool { return c != nil && strings.TrimSpace(c.Text()) != "" }

func stripStar(e ast.Expr) ast.Expr {
	if s, ok := e.(*ast.StarExpr); ok {
		return s.X
	}
	return e
}

// Every exported identifier (but in commands, package main, and the
// generated proto/) has a doc comment that states its contract.
func TestExportedHaveDocComments(t *testing.T) {
	var miss []string
	eachSourceFile(t, true, parser.ParseComments, func(fset *token.FileSet, f *ast.File) {
		if f.Name.Name != "main" {
			miss = append(miss, undocumented(fset, f)...)
		}
	})
	sort.Strings(miss)
	for _, m := range miss {
		t.Errorf("exported without a doc comment: %s", m)
	}
}
