package node_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// Every probe of an UP Sentinel node asks each sentinel who the master is
// (sentinelsAgree). It must ask on kept connections, not dial each
// sentinel per heartbeat: ten probes of a node whose askers exist add at
// most two connections per sentinel, and the node's Close closes them.
// Dialling per probe added ten. Not none: on a loaded machine an exchange
// that outlasts its bound (a quarter of the probe timeout) drops its
// connection and the next probe dials again, and the sentinels' own links
// to each other count in the same statistic (a CI run beside other work:
// one connection more).
func TestUpProbesAskSentinelsOnKeptConnections(t *testing.T) {
	t.Parallel()
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "k7grp"})
	n, err := node.New(node.Options{Name: "k7grp", Sentinel: &node.SentinelOptions{Master: "k7grp", Addrs: g.SentinelAddrs()},
		ProbeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = n.Close()
		}
	})
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	if err := n.Probe(context.Background()); err != nil { // an UP probe: the askers exist from here
		t.Fatal(err)
	}
	before := sentinelStat(t, g, "total_connections_received")
	for i := 0; i < 10; i++ {
		if err := n.Probe(context.Background()); err != nil {
			t.Fatalf("probe %d of an UP node: %v", i, err)
		}
	}
	after := sentinelStat(t, g, "total_connections_received")
	for addr, b := range before {
		// One connection is the stat's own read.
		if d := after[addr] - b - 1; d > 2 {
			t.Errorf("sentinel %s: %d connections for 10 probes of an UP node, want at most 2 (not one per probe)", addr, d)
		}
	}
	// Each sentinel's clients are its peers' links to it and this read's
	// own (the floor), and the node's connections. Under load one asker
	// may have dropped its connection (an exchange past its bound) just
	// before: the node holds connections to some sentinels, not
	// necessarily all, and Close must leave none anywhere.
	floor := len(g.SentinelAddrs())
	clients := sentinelStat(t, g, "connected_clients")
	held := false
	for _, c := range clients {
		held = held || c > floor
	}
	if !held {
		t.Fatalf("connected clients per sentinel %v: the node holds no connection to any (floor %d)", clients, floor)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	deadline := time.Now().Add(5 * time.Second)
	for {
		now := sentinelStat(t, g, "connected_clients")
		left := 0
		for _, c := range now {
			if c > floor {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connected clients per sentinel %v before Close, %v 5s after (floor %d: peers' links and this read): Close left a sentinel's connection open", clients, now, floor)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sentinelStat reads field of INFO from every sentinel of g.
func sentinelStat(t *testing.T, g *redistest.Group, field string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, addr := range g.SentinelAddrs() {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1})
		info, err := c.Info(context.Background()).Result()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				out[addr], _ = strconv.Atoi(v)
			}
		}
	}
	return out
}
