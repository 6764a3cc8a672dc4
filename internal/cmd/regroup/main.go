// Command regroup moves top-level declarations between the files of one
// Go package, as a plan file lists them, without changing a byte of any
// declaration: each is carried with its doc comment to the end of its
// target file (created if missing), in the plan's order. Then each touched
// file gets the imports its code uses and is gofmt'ed, and a touched file
// left with no declaration is deleted.
//
//	go run ./internal/cmd/regroup -dir inventory internal/cmd/regroup/reserve.plan
//
// A plan line is `NAME target.go`: a function (digestOf), a method
// (Inventory.reserveStaged: the receiver's type name), a type, const or
// var; a grouped declaration moves whole. Text after # is ignored. A name
// already in its target stays put, so a plan applies again on a later
// checkout, carrying bodies as they stand then. A name declared nowhere or
// twice, or a file with a build constraint, stops the run before anything
// is written. A moved declaration's imports come from its old file.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// found is one top-level declaration: its file, and its bytes there from
// the line its doc comment starts on to the end of its last line.
type found struct {
	file       string
	start, end int
}

type move struct {
	found
	target string
}

func main() {
	dir := flag.String("dir", ".", "the package's folder")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: regroup [-dir PKGDIR] PLAN")
		os.Exit(2)
	}
	if err := run(*dir, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "regroup:", err)
		os.Exit(1)
	}
}

func run(dir, planPath string) error {
	plan, err := os.ReadFile(planPath)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	src, parsed := map[string][]byte{}, map[string]*ast.File{}
	decls := map[string][]found{}
	var problems []string
	paths, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, path := range paths {
		name := filepath.Base(path)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if src[name], err = os.ReadFile(path); err != nil {
			return err
		}
		if parsed[name], err = parser.ParseFile(fset, path, src[name], parser.ParseComments); err != nil {
			return err
		}
		for _, d := range parsed[name].Decls {
			for _, n := range declNames(d) {
				decls[n] = append(decls[n], span(fset, src[name], name, d))
			}
		}
	}
	if len(parsed) == 0 {
		return fmt.Errorf("no Go files in %s", dir)
	}
	var moves []move
	seen := map[found]bool{}
	for i, line := range strings.Split(string(plan), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		at := fmt.Sprintf("%s:%d: ", planPath, i+1)
		switch {
		case len(f) == 0:
		case len(f) != 2 || filepath.Base(f[1]) != f[1] || !strings.HasSuffix(f[1], ".go") || strings.HasSuffix(f[1], "_test.go"):
			problems = append(problems, at+"want `NAME file.go`")
		case len(decls[f[0]]) != 1:
			problems = append(problems, fmt.Sprintf("%s%s is declared %d times in %s", at, f[0], len(decls[f[0]]), dir))
		case decls[f[0]][0].file != f[1] && !seen[decls[f[0]][0]]:
			seen[decls[f[0]][0]] = true
			moves = append(moves, move{decls[f[0]][0], f[1]})
		}
	}
	touched := map[string]bool{}
	for _, m := range moves {
		touched[m.file], touched[m.target] = true, true
	}
	for name := range touched {
		if f := parsed[name]; f != nil && slices.ContainsFunc(f.Comments, func(c *ast.CommentGroup) bool {
			return c.Pos() < f.Package && strings.HasPrefix(c.List[0].Text, "//go:build")
		}) {
			problems = append(problems, name+" has a build constraint: move by hand")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("nothing written:\n\t%s", strings.Join(problems, "\n\t"))
	}

	names := packageNames(dir, parsed)
	out := map[string][]byte{}
	avail := map[string]map[string]string{} // file → imports it may use: name → import line
	for name := range touched {
		avail[name] = map[string]string{}
		if src[name] != nil {
			out[name] = slices.Clone(src[name])
		} else {
			out[name] = []byte("package " + parsed[moves[0].file].Name.Name + "\n")
		}
	}
	cuts := slices.Clone(moves)
	slices.SortFunc(cuts, func(a, b move) int { return b.start - a.start })
	for _, m := range cuts {
		out[m.file] = slices.Delete(out[m.file], m.start, m.end)
	}
	for _, m := range moves {
		out[m.target] = append(append(out[m.target], '\n'), src[m.file][m.start:m.end]...)
		for n, l := range imports(parsed[m.file], names) {
			avail[m.target][n] = l
		}
	}
	module := modulePath(dir)
	for name := range touched {
		if parsed[name] != nil {
			for n, l := range imports(parsed[name], names) {
				avail[name][n] = l // a file's own imports come first
			}
		}
		b, err := fixImports(out[name], avail[name], module)
		if err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
		path := filepath.Join(dir, name)
		if b == nil {
			fmt.Printf("removed %s: no declaration left\n", path)
			err = os.Remove(path)
		} else {
			err = os.WriteFile(path, b, 0o644)
		}
		if err != nil {
			return err
		}
	}
	fmt.Printf("moved %d declarations; %d files touched\n", len(moves), len(touched))
	return nil
}

// declNames names d as a plan line does.
func declNames(d ast.Decl) (names []string) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil || len(d.Recv.List) == 0 {
			return []string{d.Name.Name}
		}
		t := d.Recv.List[0].Type
		for {
			switch x := t.(type) {
			case *ast.StarExpr:
				t = x.X
			case *ast.IndexExpr:
				t = x.X
			case *ast.IndexListExpr:
				t = x.X
			case *ast.Ident:
				return []string{x.Name + "." + d.Name.Name}
			default:
				return nil
			}
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				names = append(names, s.Name.Name)
			case *ast.ValueSpec:
				for _, n := range s.Names {
					names = append(names, n.Name)
				}
			}
		}
	}
	return names
}

// span is where d lies in src: from the start of its doc comment's first
// line to the end of its last line, a comment trailing it included.
func span(fset *token.FileSet, src []byte, file string, d ast.Decl) found {
	start := d.Pos()
	if fd, ok := d.(*ast.FuncDecl); ok && fd.Doc != nil {
		start = fd.Doc.Pos()
	} else if gd, ok := d.(*ast.GenDecl); ok && gd.Doc != nil {
		start = gd.Doc.Pos()
	}
	s, e := fset.Position(start).Offset, fset.Position(d.End()).Offset
	s = bytes.LastIndexByte(src[:s], '\n') + 1
	nl := bytes.IndexByte(src[e:], '\n')
	if nl < 0 {
		return found{file, s, len(src)}
	}
	if rest := strings.TrimSpace(string(src[e : e+nl])); rest == "" || strings.HasPrefix(rest, "//") {
		e += nl + 1
	}
	return found{file, s, e}
}

// packageNames maps each import path of files to its package name, as go
// list gives it (else the path's last element).
func packageNames(dir string, files map[string]*ast.File) map[string]string {
	names := map[string]string{}
	for _, f := range files {
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			names[p] = p[strings.LastIndexByte(p, '/')+1:]
		}
	}
	cmd := exec.Command("go", append([]string{"list", "-e", "-f", "{{.ImportPath}} {{.Name}}"}, slices.Sorted(maps.Keys(names))...)...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "regroup: go list:", err, "(taking package names from paths)")
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, n, ok := strings.Cut(l, " "); ok && n != "" {
			names[p] = n
		}
	}
	return names
}

// imports maps the name by which f uses each of its imports (_ or . and
// the path for a blank or dot import) to the import's line.
func imports(f *ast.File, names map[string]string) map[string]string {
	m := map[string]string{}
	for _, spec := range f.Imports {
		p, _ := strconv.Unquote(spec.Path.Value)
		n, line := names[p], spec.Path.Value
		if spec.Name != nil {
			n, line = spec.Name.Name, spec.Name.Name+" "+line
		}
		if n == "_" || n == "." {
			n += p
		}
		m[n] = line
	}
	return m
}

// fixImports gives src the imports of avail its code uses, keeping its own
// blank and dot ones, and leaves its import block alone when that set is
// unchanged; it returns nil for a file that declares nothing.
func fixImports(src []byte, avail map[string]string, module string) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	var have, need []string
	for _, spec := range f.Imports {
		line := spec.Path.Value
		if spec.Name != nil {
			line = spec.Name.Name + " " + line
			if n := spec.Name.Name; n == "_" || n == "." {
				need = append(need, line)
			}
		}
		have = append(have, line)
	}
	for _, d := range f.Decls {
		ast.Inspect(d, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Obj == nil {
					used[id.Name] = true
				}
			}
			return true
		})
	}
	if len(f.Decls) == countImportDecls(f) {
		return nil, nil
	}
	for n, line := range avail {
		if used[n] {
			need = append(need, line)
		}
	}
	if bytes.Contains(src, []byte("\n//go:embed ")) && !used["embed"] {
		need = append(need, `_ "embed"`) // what a //go:embed directive needs
	}
	slices.Sort(have)
	slices.Sort(need)
	need = slices.Compact(need)
	if !slices.Equal(have, need) {
		src = rewriteImports(fset, f, src, need, module)
	}
	return format.Source(src)
}

func countImportDecls(f *ast.File) (n int) {
	for _, d := range f.Decls {
		if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.IMPORT {
			n++
		}
	}
	return n
}

// rewriteImports replaces f's import declarations by one block of lines,
// grouped as goimports does here: standard library, other modules, module.
func rewriteImports(fset *token.FileSet, f *ast.File, src []byte, lines []string, module string) []byte {
	var groups [3][]string
	for _, l := range lines {
		p := strings.Trim(l[strings.IndexByte(l, '"'):], `"`)
		g := 0
		if p == module || strings.HasPrefix(p, module+"/") {
			g = 2
		} else if strings.Contains(strings.Split(p, "/")[0], ".") {
			g = 1
		}
		groups[g] = append(groups[g], "\t"+l+"\n")
	}
	var block []string
	for _, g := range groups {
		if len(g) > 0 {
			slices.SortFunc(g, func(a, b string) int {
				return strings.Compare(a[strings.IndexByte(a, '"'):], b[strings.IndexByte(b, '"'):])
			})
			block = append(block, strings.Join(g, ""))
		}
	}
	out := slices.Clone(src)
	for i := len(f.Decls) - 1; i >= 0; i-- {
		if gd, ok := f.Decls[i].(*ast.GenDecl); ok && gd.Tok == token.IMPORT {
			s := gd.Pos()
			if gd.Doc != nil {
				s = gd.Doc.Pos()
			}
			out = slices.Delete(out, fset.Position(s).Offset, fset.Position(gd.End()).Offset)
		}
	}
	text := ""
	if len(block) > 0 {
		text = "\n\nimport (\n" + strings.Join(block, "\n") + ")\n"
	}
	return slices.Insert(out, fset.Position(f.Name.End()).Offset, []byte(text)...)
}

// modulePath is the module path in the go.mod nearest above dir.
func modulePath(dir string) string {
	d, _ := filepath.Abs(dir)
	for ; d != filepath.Dir(d); d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			if m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(b); m != nil {
				return string(m[1])
			}
		}
	}
	return ""
}
