package chaos

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

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
// whose data lived on that node while it was rolled back, and of the
// quotas (route, SKU, user) and database rows that loss can explain
// (excuse.go; Report.Excused), and checks everything else as usual. A
// node that is not refused, or whose write sequence cannot be read to
// tell whether it applied writes to its older data, is a violation
// (judgeRollback).

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
	before, err := c.seqAt(name)
	if err != nil { // nothing restarted yet: nothing lost
		f.Err = "write seq before the restart: " + err.Error()
		return
	}
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
	r := refusal{before: before}
	r.after, r.afterErr = c.seqAt(name)
	if r.afterErr == nil && r.after >= before {
		f.Target += " (nothing written meanwhile)"
		return
	}
	f.Target += fmt.Sprintf(" (write seq %d→%s)", before, r.afterText())
	n.waitRefused(name, &r)
	r.now, r.nowErr = c.seqAt(name)
	judgeRollback(n.rep, name, r)
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

// refusal is what the rollback nemesis saw of a node restarted from
// older data: its write sequence before the restart, after it, and once
// the wait for its refusal ended (each with its read's error), and how
// that wait ended.
type refusal struct {
	before, after, now int64
	afterErr, nowErr   error
	refused            bool          // listed DOWN, "rolled back", within refuseWithin
	upAgain            bool          // listed UP again after it was listed DOWN
	waited             time.Duration // until refused, UP again, or refuseWithin
	state              v1.NodeState  // the last state the service listed
	reason             string        // and its down reason
}

// refuseWithin bounds the wait for the service to refuse a node restarted
// from older data: it probes every node every heartbeat (200 ms).
const refuseWithin = 15 * time.Second

// afterText is the write sequence read after the restart, "?" if the
// read failed.
func (r refusal) afterText() string {
	if r.afterErr != nil {
		return "?"
	}
	return fmt.Sprint(r.after)
}

// waitRefused polls the service's view of node name until it lists it
// DOWN as rolled back, lists it UP again after it listed it DOWN, or
// refuseWithin passes, and records how the wait ended in r. A service
// that sent the node nothing since the kill may list it UP until its next
// probe: only UP after DOWN, without an accept, is a wrong answer.
func (n *nemesis) waitRefused(name string, r *refusal) {
	start := time.Now()
	noticed := false
	for {
		r.state, r.reason = n.c.nodeState(name)
		r.waited = time.Since(start)
		switch {
		case r.state == v1.NodeState_NODE_STATE_DOWN && strings.Contains(r.reason, "rolled back"):
			r.refused = true
			return
		case r.state == v1.NodeState_NODE_STATE_UP && noticed:
			r.upAgain = true
			return
		case r.state == v1.NodeState_NODE_STATE_DOWN:
			noticed = true
		}
		if r.waited > refuseWithin {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// judgeRollback holds what the rollback nemesis saw of node name (r)
// against the promise: the service refuses the node (DOWN, "rolled
// back") within refuseWithin, does not list it UP again before an accept,
// and applies no write to its older data (the write sequence does not
// move past the one read after the restart). A sequence that could not be
// read, after the restart or after the wait, leaves that last check
// undone: a violation too, never a pass.
func judgeRollback(rep *Report, name string, r refusal) {
	was := fmt.Sprintf("write seq %s, was %d", r.afterText(), r.before)
	switch {
	case r.upAgain:
		rep.violate("rollback-undetected", "node %s came back from an older snapshot (%s) and was UP again after it was noticed DOWN: %s", name, was, r.reason)
	case !r.refused:
		rep.violate("rollback-undetected", "node %s came back from an older snapshot (%s) and was not refused within %v (state %v, reason %q)",
			name, was, refuseWithin, r.state, r.reason)
	}
	switch {
	case r.afterErr != nil:
		rep.violate("rollback-unchecked", "node %s came back from an older snapshot: its write sequence could not be read after the restart (%v), so whether it applied writes to its older data is unknown", name, r.afterErr)
	case r.nowErr != nil:
		rep.violate("rollback-unchecked", "node %s came back from an older snapshot (%s): its write sequence could not be read after the wait for its refusal (%v), so whether it applied writes to its older data is unknown", name, was, r.nowErr)
	case r.now > r.after:
		rep.violate("rollback-undetected", "node %s came back from an older snapshot (%s) and applied %d writes to its older data before it was refused", name, was, r.now-r.after)
	}
}

// seqAt reads node name's write sequence (shardis:node seq; 0 before its
// first write), retrying for up to 5 s a node that does not answer yet (a
// restart still loading its data).
func (c *cluster) seqAt(name string) (int64, error) {
	var err error
	for try := 0; try < 20; try++ {
		if try > 0 {
			time.Sleep(250 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var v int64
		v, err = c.directClient(name).HGet(ctx, "shardis:node", "seq").Int64()
		cancel()
		switch {
		case err == nil:
			return v, nil
		case errors.Is(err, redis.Nil):
			return 0, nil
		}
	}
	return 0, fmt.Errorf("reading the write sequence of %s: %w", name, err)
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
