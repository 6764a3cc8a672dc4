package main

import (
	"testing"
)

// redo-log --limit outside 1..10000 is a usage error naming the flag (exit
// 2), as parts stuck's. Before, --limit 0 was sent as 0, which the service
// silently replaced by its default (100), and --limit 10001 reached the
// service (exit 1).
func TestReview2RedoLogLimitValidated(t *testing.T) {
	addr, _ := startService(t, "")
	for _, l := range []string{"0", "-1", "10001"} {
		fails(t, 2, "--limit "+l+": want 1..10000", "redo-log", "--addr", addr, "--node", "n1", "--queue", "0", "--limit", l)
	}
	ok(t, addr, "redo-log", "--node", "n1", "--queue", "0", "--limit", "10000")
	ok(t, addr, "redo-log", "--node", "n1", "--queue", "0", "--limit", "1")
}

// A negative --after, --queue or --qty is a usage error naming the flag
// (exit 2), checked before any call, as --limit is. Before, they reached
// the service (exit 1: unavailable with no service, else its
// invalid_argument naming after_offset or quantity, not the flag).
func TestNegativeFlagsAreUsageErrors(t *testing.T) {
	const addr = "127.0.0.1:1" // never called: refused before any call
	fails(t, 2, "--after -7: want an offset", "redo-log", "--addr", addr, "--node", "n1", "--queue", "0", "--after", "-7")
	fails(t, 2, `--queue "-3": want a queue number`, "redo-log", "--addr", addr, "--node", "n1", "--queue", "-3")
	fails(t, 2, `--queue "-1": want a queue number`, "redo-log", "ack", "--addr", addr, "--node", "n1", "--queue", "-1", "5")
	fails(t, 2, "--qty -5: want units to add", "stock", "load", "--addr", addr, "--route", "r", "--sku", "s", "--qty", "-5")
}
