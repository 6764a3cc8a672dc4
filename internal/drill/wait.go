package drill

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/node"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// WaitState polls the service's ListNodes until node name is in state
// want, at most limit, and returns how long that took and the node's
// address as listed; past limit it returns an error naming the node and
// the state, with what the last call said (its error, or the state it
// listed the node in). Every call runs under a deadline at limit after
// the start, so a service that accepts calls and never answers does not
// hold it longer.
func WaitState(ctx context.Context, admin shardisv1connect.AdminServiceClient, name string, want v1.NodeState, limit time.Duration) (time.Duration, string, error) {
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(limit))
	defer cancel()
	var addr string
	last := errors.New("not called")
	err := Poll(limit, func() bool {
		res, err := admin.ListNodes(ctx, connect.NewRequest(&v1.ListNodesRequest{}))
		if err != nil {
			last = fmt.Errorf("last ListNodes: %w", err)
			return false
		}
		last = errors.New("last ListNodes does not list it")
		for _, n := range res.Msg.Nodes {
			if n.Name != name {
				continue
			}
			if n.State == want {
				addr = n.Addr
				return true
			}
			last = fmt.Errorf("last ListNodes lists it %v", n.State)
		}
		return false
	})
	if err != nil {
		return 0, "", fmt.Errorf("node %s did not become %v: %w (%v)", name, want, err, last)
	}
	return time.Since(start), addr, nil
}

// downReasonLimit bounds DownReason's call.
const downReasonLimit = 5 * time.Second

// DownReason returns why the service's ListNodes says node name is down
// ("not listed" when it lists no such node, the call's error when it
// fails or takes over 5 s).
func DownReason(ctx context.Context, admin shardisv1connect.AdminServiceClient, name string) string {
	ctx, cancel := context.WithTimeout(ctx, downReasonLimit)
	defer cancel()
	res, err := admin.ListNodes(ctx, connect.NewRequest(&v1.ListNodesRequest{}))
	if err != nil {
		return err.Error()
	}
	for _, n := range res.Msg.Nodes {
		if n.Name == name {
			return n.DownReason
		}
	}
	return "not listed"
}

// Poll calls cond every 5 ms until it returns true, at most limit; past
// limit it returns an error saying so.
func Poll(limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// OnPromoted reports whether a node's address as the service shows it
// ("sentinel:<group> (master <ip:port>)") names the promoted master, which
// the sentinels may name by host name (announce-hostnames): the same
// server by node.SameServer's rule. A drill that compared the text saw a
// node UP on "127.0.0.1:26312" as not on the promoted "localhost:26312".
func OnPromoted(ctx context.Context, shown, promoted string) bool {
	_, master, ok := strings.Cut(shown, "(master ")
	if !ok {
		return false
	}
	return node.SameServer(ctx, promoted, strings.TrimSuffix(master, ")"))
}
