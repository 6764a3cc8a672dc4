package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// eachSourceFile parses every non-test Go file of the module (but in
// bin/, testdata/, hidden directories and the generated proto/; also
// internal/ unless withInternal) and calls visit with it, its positions
// naming the file relative to the module root. It fails the test when the
// walk fails or reads too few files to be the module.
func eachSourceFile(t *testing.T, withInternal bool, mode parser.Mode, visit func(fset *token.FileSet, f *ast.File)) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == "proto", rel == "bin", d.Name() == "testdata", rel == "internal" && !withInternal,
				strings.HasPrefix(d.Name(), ".") && rel != ".":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, rel, src, mode|parser.SkipObjectResolution) // positions name rel
		if err != nil {
			return err
		}
		files++
		visit(fset, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d Go files under %s: the walk missed the source", files, root)
	}
}
