package main

import (
	"os"
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
