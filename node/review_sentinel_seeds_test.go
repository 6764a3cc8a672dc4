package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// SentinelOptions.Addrs is a seed list: more sentinels are discovered
// from them (README "HA shards (Sentinel)", config sentinel.addrs). A
// node configured with one seed whose seed then died still has the
// group's other sentinels: after an outage it must come back UP on the
// master they name, and its renewed clients and re-dialled probe must
// reach it (review: sentinelsAgree asked the seeds only, "no sentinel
// answered", and every client built after the seed died knew only the
// seed).
func TestReviewSentinelSeedDies(t *testing.T) {
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "sgrp"})
	ctx := context.Background()
	seed := g.SentinelAddrs()[0]
	n := newNode(t, node.Options{
		Name: "d1", Sentinel: &node.SentinelOptions{Master: "sgrp", Addrs: []string{seed}}, ProbeTimeout: time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	if err := n.Client().Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := g.Sentinels()[0].Kill(); err != nil {
		t.Fatal(err)
	}
	master := g.Master()
	// an outage: every connection to the master is cut, the scheduler
	// marks the node DOWN, and reconnect probes follow
	if err := g.Client(t, master).Do(ctx, "client", "kill", "type", "normal").Err(); err != nil {
		t.Fatal(err)
	}
	n.SetDown(errors.New("test: connections cut"))
	probeUntil(t, n, 5*time.Second, "UP again through the discovered sentinels", func(err error) bool { return err == nil })
	if n.MasterAddr() != master {
		t.Errorf("MasterAddr %q, want %q", n.MasterAddr(), master)
	}
	if err := n.Client().Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Errorf("SET through the renewed client: %v", err)
	}
}
