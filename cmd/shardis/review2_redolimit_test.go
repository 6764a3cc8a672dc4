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
