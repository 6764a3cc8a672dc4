package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A plan moves a function with its doc comment, byte for byte, and a
// method by its receiver's type; the files it leaves and enters get the
// imports their code uses; a file left with no declaration is deleted;
// and a second run moves nothing.
func TestRunMovesDeclarationsAndFixesImports(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/p\n\ngo 1.22\n")
	write("a.go", `package p

import (
	"fmt"
	"strings"
)

// Upper returns s in capitals.
func Upper(s string) string { return strings.ToUpper(s) }

// Show prints v.
func Show(v any) { fmt.Println(v) }
`)
	write("b.go", `package p

import "strconv"

// T is a number.
type T int

// String formats t.
func (t T) String() string { return strconv.Itoa(int(t)) }
`)
	write("plan", "# a comment\nUpper c.go\nT.String c.go\nT c.go\n")
	if err := run(dir, filepath.Join(dir, "plan")); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	c := read("c.go")
	for _, want := range []string{"// Upper returns s in capitals.\nfunc Upper(s string) string { return strings.ToUpper(s) }",
		"// String formats t.\nfunc (t T) String() string { return strconv.Itoa(int(t)) }", "// T is a number.\ntype T int",
		`"strconv"`, `"strings"`} {
		if !strings.Contains(c, want) {
			t.Errorf("c.go lacks %q:\n%s", want, c)
		}
	}
	if a := read("a.go"); strings.Contains(a, "Upper") || strings.Contains(a, `"strings"`) || !strings.Contains(a, `"fmt"`) {
		t.Errorf("a.go after the move:\n%s", a)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.go")); !os.IsNotExist(err) {
		t.Errorf("b.go, left with no declaration, was kept (%v)", err)
	}
	if err := run(dir, filepath.Join(dir, "plan")); err != nil {
		t.Fatal(err)
	}
	if again := read("c.go"); again != c {
		t.Errorf("a second run changed c.go:\n%s", again)
	}
}

// A plan naming a declaration the package does not have writes nothing
// and names the line.
func TestRunRefusesAnUnknownName(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.go"), []byte("package p\n\nfunc F() {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plan"), []byte("F b.go\nG b.go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(dir, filepath.Join(dir, "plan"))
	if err == nil || !strings.Contains(err.Error(), "G") {
		t.Fatalf("run = %v, want an error naming G", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.go")); !os.IsNotExist(err) {
		t.Errorf("b.go was written though the plan was refused (%v)", err)
	}
}
