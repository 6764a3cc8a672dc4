package service

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// An admin call that cannot reach its node answers unavailable (README's
// table: "no node can serve (the message names the node)"), as for a
// node already DOWN. Before, node.Accept and node.PersistRouteEnabled
// returned the raw dial error, which rpcError answered internal: the code
// of corrupt data, failed scripts and malformed replies. Now the node
// package wraps it in node.ErrUnreachable, and rpcError answers any
// network error unavailable.

// AcceptNode of a node whose Redis cannot be reached (Accept runs on the
// probe connection, past the state gate). The node is still UP (no probe
// saw it die yet), so the accept takes force.
func TestAcceptUnreachableNodeIsUnavailable(t *testing.T) {
	_, srvs, admin := startOverNodes(t, 0)
	srvs[0].Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := admin.AcceptNode(ctx, connect.NewRequest(&v1.AcceptNodeRequest{Node: "n1", Force: true}))
	if err == nil {
		t.Fatal("AcceptNode of a killed node succeeded")
	}
	if code := connect.CodeOf(err); code != connect.CodeUnavailable {
		t.Errorf("AcceptNode of an unreachable node: code %v (%v), want unavailable", code, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "n1") || !strings.Contains(msg, node.ErrUnreachable.Error()) {
		t.Errorf("AcceptNode of an unreachable node: message %q, want it to name n1 and say %q", msg, node.ErrUnreachable)
	}
}

// SetRouteEnabled (a drain) of a node whose Redis just died, before a
// probe marked it DOWN (a heartbeat of a minute): the node cannot serve,
// as a DOWN one.
func TestDrainUnreachableNodeIsUnavailable(t *testing.T) {
	_, srvs, admin := startOverNodes(t, time.Minute)
	srvs[0].Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := admin.SetRouteEnabled(ctx, connect.NewRequest(&v1.SetRouteEnabledRequest{Node: "n1", Server: "inventory", Route: "all", Enabled: false}))
	if err == nil {
		t.Fatal("drain of a killed node succeeded")
	}
	if code := connect.CodeOf(err); code != connect.CodeUnavailable {
		t.Errorf("drain of an unreachable node: code %v (%v), want unavailable", code, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "n1") || !strings.Contains(msg, node.ErrUnreachable.Error()) {
		t.Errorf("drain of an unreachable node: message %q, want it to name n1 and say %q", msg, node.ErrUnreachable)
	}
}

// AcceptNode of a node that is UP (not refused) is refused,
// failed_precondition naming the node and force, and changes nothing:
// accepting a healthy node gave it a new incarnation for nothing, and the
// sync reported it as a node accepted after a loss. With force it runs.
func TestAcceptOfAnUpNodeNeedsForce(t *testing.T) {
	_, _, admin := startOverNodes(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := admin.AcceptNode(ctx, connect.NewRequest(&v1.AcceptNodeRequest{Node: "n1"}))
	if code := connect.CodeOf(err); code != connect.CodeFailedPrecondition ||
		!strings.Contains(err.Error(), `"n1"`) || !strings.Contains(err.Error(), "force") {
		t.Fatalf("AcceptNode of an UP node: %v (code %v), want failed_precondition naming n1 and force", err, code)
	}
	res, err := admin.AcceptNode(ctx, connect.NewRequest(&v1.AcceptNodeRequest{Node: "n1", Force: true}))
	if err != nil || res.Msg.Generation < 1 {
		t.Fatalf("AcceptNode of an UP node with force: %v, %v; want a new incarnation", res, err)
	}
}

// A drain of a node whose server runs a script past the busy threshold
// (every other command is answered BUSY), before a probe marked it DOWN:
// the node cannot serve now, unavailable, as the data path answers for
// it. The BUSY reply answered internal, the code of corrupt data.
func TestDrainBusyNodeIsUnavailable(t *testing.T) {
	_, srvs, admin := startOverNodes(t, time.Minute)
	c := srvs[0].Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.ConfigSet(ctx, "busy-reply-threshold", "50").Err(); err != nil {
		t.Fatal(err)
	}
	busy := make(chan error, 1)
	go func() { // a read-only script SCRIPT KILL can end
		busy <- srvs[0].Client(t).Eval(ctx, "while true do redis.call('PING') end", nil).Err()
	}()
	defer func() {
		for ctx.Err() == nil && c.ScriptKill(ctx).Err() != nil {
			time.Sleep(10 * time.Millisecond)
		}
		<-busy
	}()
	waitBusy(ctx, t, c)
	_, err := admin.SetRouteEnabled(ctx, connect.NewRequest(&v1.SetRouteEnabledRequest{Node: "n1", Server: "inventory", Route: "all", Enabled: false}))
	if err == nil {
		t.Fatal("drain of a busy node succeeded")
	}
	if code := connect.CodeOf(err); code != connect.CodeUnavailable || !strings.Contains(err.Error(), "n1") {
		t.Errorf("drain of a busy node: code %v (%v), want unavailable naming n1", code, err)
	}
}

// waitBusy waits until the server c reaches answers BUSY.
func waitBusy(ctx context.Context, t *testing.T, c interface {
	Ping(context.Context) *redis.StatusCmd
}) {
	t.Helper()
	for {
		err := c.Ping(ctx).Err()
		if err != nil && strings.HasPrefix(err.Error(), "BUSY") {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the server never answered BUSY: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A drain of a node restarted empty, before a probe marked it DOWN: the
// new connection's stamp check refuses it (node.ErrDataLost), and the
// drain answers unavailable, as a Reserve on it would, naming the node
// and the loss. It answered internal.
func TestDrainOfANodeRestartedEmptyIsUnavailable(t *testing.T) {
	_, srvs, admin := startOverNodes(t, time.Minute)
	srvs[0].Restart() // killed, and started again without its data
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := admin.SetRouteEnabled(ctx, connect.NewRequest(&v1.SetRouteEnabledRequest{Node: "n1", Server: "inventory", Route: "all", Enabled: false}))
	if err == nil {
		t.Fatal("drain of a node restarted empty succeeded")
	}
	if code := connect.CodeOf(err); code != connect.CodeUnavailable || !strings.Contains(err.Error(), "n1") ||
		!strings.Contains(err.Error(), node.ErrDataLost.Error()) {
		t.Errorf("drain of a node restarted empty: code %v (%v), want unavailable naming n1 and %q", code, err, node.ErrDataLost)
	}
}
