package node_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// A node's hold after a new server process is counted by its clock from
// the first read of its stamp there (run_at, identity.go "A new server
// process"). A host that rebooted with its clock an hour ahead (a real
// time clock kept in local time, a VM restored) records run_at an hour
// ahead; NTP then steps the clock back. The hold must still end about
// health.hold_back after it began, not an hour later: every instance
// refuses a held node (an outage of a node that lost nothing). Before,
// the hold lasted until the node's clock caught up with run_at.
func TestHoldBackEndsAfterTheNodeClockStepsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	skew := filepath.Join(t.TempDir(), "n1.skew")
	redistest.SetSkew(t, skew, 3600_000) // an hour ahead after the reboot
	s := redistest.Start(t, redistest.Options{AOF: true, Env: redistest.SkewClock(t, skew)})
	const settle = time.Second
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), Critical: true, Settle: settle}, nil)
	if err := n.Probe(ctx); err != nil {
		t.Fatalf("first probe: %v", err)
	}
	s.Kill() // AOF (always): nothing lost
	s.Restart()
	var held *node.HeldBackError
	if err := n.Probe(ctx); !errors.As(err, &held) {
		t.Fatalf("probe on the new server process: %v, want held back", err)
	}
	redistest.SetSkew(t, skew, 0) // NTP steps the node's clock back an hour
	deadline := time.Now().Add(settle + 3*time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = n.Probe(ctx); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("node still refused %v after the hold of %v began (it lost nothing): %v", settle+3*time.Second, settle, err)
}
