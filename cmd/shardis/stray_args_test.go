package main

import (
	"strings"
	"testing"
)

// serve, topology show|apply and functions show|prune take no arguments:
// a stray word is refused as a usage mistake naming it, whether it comes
// before or after --config (flags may come before or after the
// arguments, `shardis help`). Found by a review: a word before --config
// stopped the flag parsing there, so they said --config was missing,
// which it was not, and never named the word.
func TestStrayWordBeforeOrAfterConfigIsNamed(t *testing.T) {
	for _, cmd := range [][]string{{"serve"}, {"topology", "show"}, {"topology", "apply"}, {"functions", "show"}, {"functions", "prune"}} {
		for _, tail := range [][]string{{"extra.yaml", "--config", "/nonexistent.yaml"}, {"--config", "/nonexistent.yaml", "extra.yaml"}} {
			args := append(append([]string{}, cmd...), tail...)
			var out, errb strings.Builder
			code := run(args, strings.NewReader(""), &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), `"extra.yaml"`) || strings.Contains(errb.String(), "needs --config") {
				t.Errorf("shardis %s: exit %d, stderr %q; want 2 naming \"extra.yaml\"", strings.Join(args, " "), code, errb.String())
			}
		}
	}
}
