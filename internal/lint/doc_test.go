package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
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
			if !d.Name.IsExported() || d.Doc != nil {
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
					if s.Name.IsExported() && s.Doc == nil && d.Doc == nil {
						miss(s.Name.Name, s.Pos())
					}
				case *ast.ValueSpec:
					if s.Doc != nil || d.Doc != nil || s.Comment != nil {
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

func stripStar(e ast.Expr) ast.Expr {
	if s, ok := e.(*ast.StarExpr); ok {
		return s.X
	}
	return e
}

// Every exported identifier (but in commands, package main, and the
// generated proto/) has a doc comment that states its contract.
func TestExportedHaveDocComments(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var miss []string
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "proto" || rel == "bin" || d.Name() == "testdata" || (strings.HasPrefix(d.Name(), ".") && rel != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		if f.Name.Name == "main" {
			return nil
		}
		miss = append(miss, undocumented(fset, f)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d Go files under %s: the walk missed the source", files, root)
	}
	sort.Strings(miss)
	for _, m := range miss {
		t.Errorf("exported without a doc comment: %s", strings.TrimPrefix(m, root+"/"))
	}
}
