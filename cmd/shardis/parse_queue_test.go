package main

import (
	"flag"
	"io"
	"testing"
)

// --queue takes a queue number or a redo log's name (inv:redo:N); a
// segment key (inv:redo:7:3) or another key is a usage error naming it,
// where its last number was taken as the queue (3).
func TestParseQueue(t *testing.T) {
	c := &client{fs: flag.NewFlagSet("redo-log", flag.ContinueOnError), stderr: io.Discard}
	for arg, want := range map[string]int32{"7": 7, "inv:redo:7": 7, "0": 0} {
		if got, err := parseQueue(c, arg); err != nil || got != want {
			t.Errorf("parseQueue(%q) = %d, %v; want %d", arg, got, err, want)
		}
	}
	for _, arg := range []string{"inv:redo:7:3", "redo:7", "x:7", "", "seven"} {
		if got, err := parseQueue(c, arg); err == nil {
			t.Errorf("parseQueue(%q) = %d, want a usage error", arg, got)
		}
	}
}
