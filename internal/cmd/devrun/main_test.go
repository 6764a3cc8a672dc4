package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The commands `make run` prints are the README's, in the README's order,
// with the redo queue of the demo SKU the README names.
func TestPrintedCommandsAreTheREADMEs(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`curl -s -H "\$H" -d '([^']*)' \$S/shardis\.v1\.(\S+)`)
	var got []call
	for _, m := range re.FindAllStringSubmatch(string(readme), -1) {
		got = append(got, call{method: m[2], body: m[1]})
	}
	want := tryIt(50) // config/example.yaml: redo_queues 50
	if len(got) != len(want) {
		t.Fatalf("README lists %d curl commands, make run prints %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("command %d: README %s %s, make run %s %s", i+1, got[i].method, got[i].body, want[i].method, want[i].body)
		}
	}
	if !strings.Contains(string(readme), "LoadStock` **adds**") {
		t.Error("README does not say that LoadStock adds")
	}
}

// The tour acknowledges nothing: make run starts shardis sync, the redo
// log's one acknowledging consumer (README: run no other).
func TestTourDoesNotAcknowledge(t *testing.T) {
	for _, c := range tryIt(50) {
		if strings.Contains(c.method, "AckRedoLog") {
			t.Errorf("make run prints %s %s while shardis sync is the acknowledging consumer", c.method, c.body)
		}
	}
}

// TestPGDirOutOfAPrivateFolder: run by root from a checkout inside a
// folder closed to other users (/root on Debian, mode 700), PostgreSQL's
// data goes under the temporary folder, where user postgres can reach it
// (initdb failed with "Permission denied"); otherwise under data/pg.
func TestPGDirOutOfAPrivateFolder(t *testing.T) {
	base := t.TempDir()
	private := filepath.Join(base, "home")
	if err := os.MkdirAll(filepath.Join(private, "co"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(base), base} { // t.TempDir's folders are 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(private, "co", ".run")
	if got := pgDir(data, false); got != filepath.Join(data, "pg") {
		t.Errorf("not root: pgDir = %s; want %s", got, filepath.Join(data, "pg"))
	}
	got := pgDir(data, true)
	if strings.HasPrefix(got, private) || !strings.HasPrefix(got, os.TempDir()) || filepath.Base(got) != "pg" {
		t.Errorf("root, private checkout: pgDir = %s; want a folder under %s", got, os.TempDir())
	}
	if st, err := os.Stat(filepath.Dir(got)); err != nil || st.Mode().Perm()&0o001 == 0 {
		t.Errorf("the folder above %s: %v, %v; want it made, searchable by others", got, st, err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(got)) })
	if again := pgDir(data, true); again != got {
		t.Errorf("pgDir twice = %s, %s; want the same folder each run", got, again)
	}
	if err := os.Chmod(private, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(private, "co"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := pgDir(data, true); got != filepath.Join(data, "pg") {
		t.Errorf("root, open checkout: pgDir = %s; want %s", got, filepath.Join(data, "pg"))
	}
}
