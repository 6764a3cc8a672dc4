package node_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// Sentinels that announce host names (sentinel resolve-hostnames and
// announce-hostnames yes, as docker/compose.yaml runs them) name the
// master "localhost:PORT", while the connection the probe dialled knows
// only the address it reached, "127.0.0.1:PORT". The reconnect probe's
// agreement check (sentinelsAgree) must see that these are the same
// server: every sentinel names the master the probe reached, and the node
// comes UP (review: it compared the strings and refused the node for
// ever, first probe included).
func TestReviewSentinelHostnamesAgree(t *testing.T) {
	t.Parallel() // its own group (master, replica, sentinels); it mostly waits for them
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "hgrp"})
	ctx := context.Background()
	_, port, err := net.SplitHostPort(g.Master())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range g.SentinelAddrs() {
		sc := redis.NewClient(&redis.Options{Addr: a, Protocol: 2})
		for _, cmd := range [][]any{
			{"sentinel", "config", "set", "resolve-hostnames", "yes"},
			{"sentinel", "config", "set", "announce-hostnames", "yes"},
			{"sentinel", "remove", "hgrp"},
			{"sentinel", "monitor", "hgrp", "localhost", port, 2},
		} {
			if err := sc.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%s: %v: %v", a, cmd, err)
			}
		}
		v, err := sc.Do(ctx, "sentinel", "get-master-addr-by-name", "hgrp").StringSlice()
		_ = sc.Close()
		if err != nil || len(v) != 2 || v[0] != "localhost" {
			t.Fatalf("%s names the master %v %v, want localhost", a, v, err)
		}
	}
	n := newNode(t, node.Options{
		Name: "h1", Sentinel: &node.SentinelOptions{Master: "hgrp", Addrs: g.SentinelAddrs()}, ProbeTimeout: time.Second,
	}, nil)
	probeUntil(t, n, 5*time.Second, "UP on the master the sentinels name by host name", func(err error) bool { return err == nil })
	if want := net.JoinHostPort("127.0.0.1", port); n.MasterAddr() != want && n.MasterAddr() != net.JoinHostPort("localhost", port) {
		t.Errorf("MasterAddr %q, want %s", n.MasterAddr(), want)
	}
	if err := n.Client().Set(ctx, "k", strconv.Itoa(1), 0).Err(); err != nil {
		t.Errorf("SET: %v", err)
	}
}
