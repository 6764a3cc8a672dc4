package router

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The runnable examples of every package are code an embedder copies: they
// import no internal package (which an embedder cannot import). The
// throwaway servers they run against come from each package's TestMain.
func TestExamplesImportNoInternalPackage(t *testing.T) {
	files, err := filepath.Glob("../*/example*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example files found (%v)", err)
	}
	for _, f := range files {
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(path, "/internal/") {
				t.Errorf("%s imports %s: an embedder cannot", f, path)
			}
		}
	}
}
