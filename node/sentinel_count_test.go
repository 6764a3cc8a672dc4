package node_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// A confirm round counts sentinels, not addresses. Five sentinels, the
// node seeded with two of them by host name (localhost:PORT) and three by
// IP: its first probe learns the two again by the IP they announce, seven
// addresses for five sentinels. With three sentinels frozen, the two left
// answer at four of the seven addresses: counted by address that was a
// majority, and a minority confirmed a write (a minority misses the
// leader's election, and the write could be on a master already switched
// away from). Counted by SENTINEL MYID it is two of five, refused; three
// of five confirm again, also when one of them is frozen under both of
// its addresses (the ID it gave when last dialled still counts it once).
func TestMinorityOfSentinelsSeededByHostNameDoesNotConfirm(t *testing.T) {
	t.Parallel()
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "byid", Sentinels: 5})
	seeds := hostNameSeeds(g.SentinelAddrs(), 2)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n := newNode(t, node.Options{
		Name:         "s1",
		Sentinel:     &node.SentinelOptions{Master: "byid", Addrs: seeds},
		ProbeTimeout: 2 * time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	run := masterRun(ctx, t, g)
	if err := n.ConfirmMaster(ctx, run); err != nil {
		t.Fatalf("ConfirmMaster with every sentinel answering: %v", err)
	}

	sentinels := g.Sentinels()
	pause := func(i int) {
		t.Helper()
		if err := sentinels[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	resume := func(i int) {
		t.Helper()
		if err := sentinels[i].Resume(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range sentinels {
			_ = s.Resume()
		}
	})
	pause(2)
	pause(3)
	pause(4)
	err := n.ConfirmMaster(ctx, run)
	if !errors.Is(err, node.ErrMasterUnconfirmed) {
		t.Fatalf("ConfirmMaster with 2 of 5 sentinels answering (each at two addresses) = %v, want ErrMasterUnconfirmed", err)
	}
	t.Logf("2 of 5: %v", err)

	resume(2)
	if err := n.ConfirmMaster(ctx, run); err != nil {
		t.Fatalf("ConfirmMaster with 3 of 5 sentinels answering: %v", err)
	}
	pause(0)
	resume(3)
	if err := n.ConfirmMaster(ctx, run); err != nil {
		t.Fatalf("ConfirmMaster with 3 of 5 sentinels answering, one seeded by host name frozen: %v", err)
	}
}

// hostNameSeeds returns addrs with the first k seeded by host name
// (localhost:PORT) while the sentinels announce their IPs: the node then
// knows each of those sentinels at two addresses.
func hostNameSeeds(addrs []string, k int) []string {
	seeds := append([]string(nil), addrs...)
	for i := range k {
		_, port, _ := net.SplitHostPort(addrs[i])
		seeds[i] = net.JoinHostPort("localhost", port)
	}
	return seeds
}

// masterRun returns the run_id of the server the sentinels of g name as
// the master.
func masterRun(ctx context.Context, t *testing.T, g *redistest.Group) string {
	t.Helper()
	info, err := g.Client(t, g.Master()).Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	return node.InfoRunID(info)
}
