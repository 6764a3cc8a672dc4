package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// The rollback nemesis: a node restarts from an older copy of its data,
// as after restoring a backup or losing writes not yet on disk. It copies
// the node's AOF, lets clients run, kills the node, puts the copy back and
// restarts it. Shardis must refuse the node (DOWN, "rolled back") before
// it applies a write to the older data (the node's write sequence must not
// move), and keep refusing it until an operator accepts it; the nemesis
// then accepts it (AcceptNode), as the operator would. A service that sent
// the node nothing since the kill may list it UP until its next probe.
// What the node lost is lost: the checker excuses violations of orders
// and users whose data lived on that node while it was rolled back
// (Report.Excused), and checks everything else as usual.

// FaultRollback is a restart from an older snapshot, then AcceptNode.
const FaultRollback = "restart from older snapshot"

// lossWindow is a node whose writes between from and to were lost.
type lossWindow struct {
	node     string
	from, to time.Time
}

func (n *nemesis) rollback(ctx context.Context, name string, hold time.Duration) {
	c := n.c
	f := Fault{At: n.at(), Kind: FaultRollback, Target: name}
	start := time.Now()
	defer func() {
		f.Hold = time.Since(start)
		n.record(f)
	}()
	p := c.procs[name]
	snap := filepath.Join(p.Dir(), fmt.Sprintf("snapshot-%d", time.Now().UnixNano()))
	if err := p.CopyAOF(snap); err != nil {
		f.Err = "snapshot: " + err.Error()
		return
	}
	from := time.Now()
	sleepCtx(ctx, hold)
	seqAt := func() int64 {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		v, _ := c.directClient(name).HGet(cctx, "shardis:node", "seq").Int64()
		return v
	}
	before := seqAt()
	lost := lossWindow{node: name, from: from}
	repairs := len(p.AOFRepairs())
	if err := p.RestartFrom(snap); err != nil {
		f.Err = "restart from the snapshot: " + err.Error()
		return
	}
	// a copy of a live AOF can end inside a write: the restart repairs it
	// (seed 415 before the nodes refused such a file: a later restart
	// applied half a script, and a/hot on n1 sold 171 of its 170 units)
	n.noteRepairs(name, p.AOFRepairs()[repairs:])
	after := seqAt()
	if after >= before {
		f.Target += " (nothing written meanwhile)"
		return
	}
	f.Target += fmt.Sprintf(" (write seq %d→%d)", before, after)
	// It must be refused, by reason, before it serves a write. A service
	// that sent it nothing since the kill may still list it UP (it has
	// not noticed the restart: no probe yet); what it must not do is
	// apply a write to the older data (the node's write sequence moves)
	// or list it UP again after it noticed (DOWN, then UP, without an
	// accept).
	deadline := time.Now().Add(15 * time.Second)
	noticed := false
	for {
		st, reason := c.nodeState(name)
		if st == v1.NodeState_NODE_STATE_DOWN && strings.Contains(reason, "rolled back") {
			break
		}
		if st == v1.NodeState_NODE_STATE_UP && noticed {
			n.rep.violate("rollback-undetected", "node %s came back from an older snapshot (write seq %d, was %d) and was UP again after it was noticed DOWN: %s", name, after, before, reason)
			break
		}
		if st == v1.NodeState_NODE_STATE_DOWN {
			noticed = true
		}
		if time.Now().After(deadline) {
			f.Err = fmt.Sprintf("not refused within 15s (state %v, reason %q)", st, reason)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if now := seqAt(); now > after {
		n.rep.violate("rollback-undetected", "node %s came back from an older snapshot (write seq %d, was %d) and applied %d writes to its older data before it was refused", name, after, before, now-after)
	}
	for try := 0; ; try++ {
		_, admin := c.rpc()
		actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := admin.AcceptNode(actx, connect.NewRequest(&v1.AcceptNodeRequest{Node: name}))
		cancel()
		if err == nil || (try > 0 && connect.CodeOf(err) == connect.CodeFailedPrecondition) {
			break // a retry finding the node UP: an earlier try's accept went through
		}
		if try == 20 {
			f.Err = "accept: " + err.Error()
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	lost.to = time.Now()
	n.mu.Lock()
	n.lost = append(n.lost, lost)
	n.mu.Unlock()
}

// nodeState asks the service for a node's state and down reason.
func (c *cluster) nodeState(name string) (v1.NodeState, string) {
	_, admin := c.rpc()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err := admin.ListNodes(ctx, connect.NewRequest(&v1.ListNodesRequest{}))
	if err != nil {
		return v1.NodeState_NODE_STATE_UNSPECIFIED, err.Error()
	}
	for _, nd := range res.Msg.Nodes {
		if nd.Name == name {
			return nd.State, nd.DownReason
		}
	}
	return v1.NodeState_NODE_STATE_UNSPECIFIED, "not listed"
}
