package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPatchNeedsEachEditOnce: a redis.go without the field, or with a line
// twice, is refused naming the file; a file with each line once is patched
// and gains the closure type.
func TestPatchNeedsEachEditOnce(t *testing.T) {
	good := "package redis\n\ntype baseClient struct {\n\tcscClientWeak weak.Pointer[Client]\n}\n\n" +
		"func a() { c.baseClient.cscClientWeak = weak.Make(&c) }\n" +
		"func b() { clone.baseClient.cscClientWeak = weak.Make(clone.cscLifecycleOwner) }\n"
	for name, tc := range map[string]struct {
		src, err string
	}{
		"patched":    {src: good},
		"upstream":   {src: strings.Replace(good, "weak.Pointer[Client]", "*Client", 1), err: "redis.go holds \"cscClientWeak weak.Pointer[Client]\" 0 times"},
		"duplicated": {src: good + "func d() { x = weak.Make(&c) }\n", err: "holds \"= weak.Make(&c)\" 2 times"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "redis.go"), []byte(tc.src), 0o644); err != nil {
				t.Fatal(err)
			}
			err := patch(dir)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("patch: %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(filepath.Join(dir, "redis.go"))
			if strings.Contains(string(b), "weak.Pointer[Client]") || strings.Count(string(b), "weakRef(weak.Make(") != 2 {
				t.Fatalf("patched redis.go:\n%s", b)
			}
			if _, err := os.Stat(filepath.Join(dir, addedName)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestModFileAddsOneReplace: the module file is go.mod plus the replace
// directive, with go.sum beside it; a go.mod that already replaces go-redis
// is refused.
func TestModFileAddsOneReplace(t *testing.T) {
	home, repo := t.TempDir(), t.TempDir()
	t.Chdir(repo)
	mod := "module example.com/x\n\ngo 1.26\n\nrequire " + module + " v9.23.0\n"
	os.WriteFile("go.mod", []byte(mod), 0o644)
	os.WriteFile("go.sum", []byte("sums\n"), 0o644)
	path, err := writeModFile(home, "/copy")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if want := mod + "\nreplace " + module + " => /copy\n"; string(got) != want {
		t.Fatalf("module file:\n%s\nwant:\n%s", got, want)
	}
	if sum, _ := os.ReadFile(strings.TrimSuffix(path, ".mod") + ".sum"); string(sum) != "sums\n" {
		t.Fatalf("sum file %q", sum)
	}
	os.WriteFile("go.mod", []byte(mod+"replace "+module+" => ../fork\n"), 0o644)
	if _, err := writeModFile(home, "/copy"); err == nil || !strings.Contains(err.Error(), "already replaces") {
		t.Fatalf("writeModFile with a replace: %v", err)
	}
}
