package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// A sentinel down since before the node started is never identified: the
// node knows it at two addresses, its host-name seed and the IP the
// others name it by, and neither ever answered SENTINEL MYID. Three
// sentinels, all seeded by host name, the third frozen from the start:
// the two that answer are two of three sentinels, a majority, and
// confirm (and one of three does not). Counted by address, the frozen
// one's two addresses made four sentinels of three, two of four, and
// every durable write was refused until it came back (b74f107; the
// per-address count before it confirmed, its two answering sentinels
// counted twice too).
func TestSentinelDownSinceStartCountsOnce(t *testing.T) {
	t.Parallel()
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "downstart", Sentinels: 3})
	addrs := g.SentinelAddrs()
	seeds := hostNameSeeds(addrs, len(addrs))
	sentinels := g.Sentinels()
	t.Cleanup(func() { _ = sentinels[2].Resume() })
	if err := sentinels[2].Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n := newNode(t, node.Options{
		Name:         "s1",
		Sentinel:     &node.SentinelOptions{Master: "downstart", Addrs: seeds},
		ProbeTimeout: 2 * time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	run := masterRun(ctx, t, g)
	if err := n.ConfirmMaster(ctx, run); err != nil {
		t.Fatalf("ConfirmMaster with 2 of 3 sentinels answering, the third down since the node started: %v", err)
	}
	t.Cleanup(func() { _ = sentinels[1].Resume() })
	if err := sentinels[1].Pause(); err != nil {
		t.Fatal(err)
	}
	err := n.ConfirmMaster(ctx, run)
	if !errors.Is(err, node.ErrMasterUnconfirmed) {
		t.Fatalf("ConfirmMaster with 1 of 3 sentinels answering = %v, want ErrMasterUnconfirmed", err)
	}
	t.Logf("1 of 3: %v", err)
}
