package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/node"
)

// Durability of acknowledged writes (inventory.durability).
//
// Redis replication is asynchronous: a master acknowledges a script before
// any replica has it, and a failover that promotes a replica loses what
// the replica had not received. With durability "replica" every write
// script is sent together with `WAIT 1 <durability_timeout>` as one
// pipeline on one connection of the node's client (a plain pipeline, not
// MULTI: WAIT waits for the writes of its own connection, so the script
// and the WAIT must share it). The pipeline bypasses the auto-pipeliner
// (explicit pipelines never ride it) and passes the node's hook like any
// pipeline: a DOWN node or an open breaker refuses it at once, a network
// failure counts once. The call is acknowledged only when WAIT reports a
// replica; otherwise the script ran on the master but its outcome is
// unknown (the master may die before a replica gets it): the error wraps
// [ErrNotDurable] and [ErrUnavailable], and the callers treat it exactly
// like a timeout (tombstones for reserve parts, "commit outcome unknown",
// deferred settles, the reconciler). The node's write sequence is
// recorded as acknowledged ([node.Node.ObserveSeq]) only once WAIT
// confirmed it, so a promotion that loses an unacknowledged write is not
// mistaken for a rollback.
//
// Durability "aof" uses `WAITAOF 1 1 <timeout>` instead: acknowledged once
// the write is fsynced to the master's AOF and to one replica's. WAITAOF
// exists from Redis 7.2: [New] refuses to start when a node of the
// inventory reports an older version, and a node found older later (a
// downgrade, a promoted replica of another version) is not used.
//
// The server that acknowledged. On a Sentinel group with two replicas or
// more, WAIT on the old master can be answered by a replica that the
// switch under way will resync: the sentinels promoted another (a
// SENTINEL FAILOVER of a running master, or a master cut off from them),
// the old master still takes the write, and the replica not yet
// reconfigured acknowledges it; then it resyncs from the promoted one and
// the old master is converted: an acknowledged reservation gone (its
// units sold again: TestAcknowledgedWriteOnADemotedMasterIsNotDurable).
// Nothing on the server sees it, and the node's own view of the group
// lags (a probe per heartbeat; a pooled connection of a client being
// replaced; an UP node that no sentinel answers stays UP). So on a
// Sentinel group the pipeline carries `INFO server` after the wait, and
// the write is acknowledged only once [node.Node.ConfirmMaster] finds a
// majority of the sentinels answering, each naming that server's run_id
// as the master with no failover under way (node/sentinel_confirm.go);
// otherwise it fails as unknown ([ErrNotDurable]), like a WAIT that timed
// out. The fence of a read goes through the same path. The cost: one
// round of SENTINEL MASTER and IS-MASTER-DOWN-BY-ADDR to every sentinel
// after each wait (writes waiting together share a round), and no write
// is acknowledged while a majority of the sentinels does not answer. A failover led by a sentinel
// this process cannot reach is seen through the sentinels that elected it:
// one whose last vote is newer than the configuration it names confirms
// nothing until it hears of the switch
// (TestFailoverLedByAnUnreachableSentinelDoesNotAcknowledgeOnTheOldMaster).
// Not closed: a SENTINEL FAILOVER (it takes no votes) sent to a sentinel
// this process cannot reach, and the promotion, after the write, of a
// replica that did not have it (below).
//
// What none of this does: make Redis strongly consistent. WAIT only
// says a replica received the write; Sentinel may still promote a replica
// that did not (it prefers the most advanced reachable one, and with one
// replica there is no choice), a replica that acknowledged may itself
// die, and the old master keeps accepting writes during a partition until
// it is demoted. See README "HA shards (Sentinel)".

// Reads a consumer lands. A read sees what the master holds, unacknowledged
// writes included, and a failover may undo those: what `shardis sync`
// lands in PostgreSQL from such a read (a part of a Reserve whose outcome
// was unknown, a redo-log position past entries the promoted replica
// never received) would then name data the node no longer has, and its
// queue would stop as gone back for good. So with durability replica or
// aof, [Inventory.ReadRedoBatch] and [Inventory.PartStates] are followed
// by a fence (durableFence): a write script with nothing but the write
// epilogue, run with its WAIT like any write. The replication stream is
// ordered, so a replica that has the fence has every write the read saw;
// a fence not acknowledged fails the read as unknown ([ErrNotDurable]),
// and the consumer retries it later, as after a timeout.
//
// The fence is a second call, and a failover may come between it and the
// read: the read on the old master (an entry of a Reserve no replica
// had), the fence on the promoted replica, whose own replica acknowledges
// it, and the read was answered as durable though the node no longer had
// what it returned (a consumer stalled between the two, for as long as a
// failover takes: TestFenceAfterFailoverIsNotDurable). So the
// caller reads the node's server process ([node.Node.ServerRun]) before
// its read, and the fence fails as unknown when it is another after the
// fence: every command connection reads the stamp, and with it the
// server's run_id, before it carries a command (node/dialcheck.go), so a
// fence that ran on another server process than the read changed it.

// ErrNotDurable is wrapped (with [ErrUnavailable]) when a write script ran
// on a node's master but no replica (durability replica) or AOF (aof)
// acknowledged it within inventory.durability_timeout: its outcome is
// unknown, like a timeout's.
var ErrNotDurable = errors.New("write not acknowledged by a replica in time")

// aofMinMajor and aofMinMinor are the first Redis version with WAITAOF.
const aofMinMajor, aofMinMinor = 7, 2

// durable reports whether write scripts wait for a replica or an AOF.
func (inv *Inventory) durable() bool {
	return inv.cfg.Durability == config.DurabilityReplica || inv.cfg.Durability == config.DurabilityAOF
}

// checkAOFVersions returns an error naming every inventory node whose
// Redis is known to be too old for durability aof.
func checkAOFVersions(durability string, nodes []*node.Node) error {
	if durability != config.DurabilityAOF {
		return nil
	}
	var old []string
	for _, n := range nodes {
		if s, ok := n.Settings(); ok && !s.AtLeast(aofMinMajor, aofMinMinor) {
			old = append(old, fmt.Sprintf("node %s runs Redis %s", n.Name(), versionOf(s)))
		}
	}
	if len(old) == 0 {
		return nil
	}
	return fmt.Errorf("inventory.durability aof needs WAITAOF, which Redis has from %d.%d: %s; upgrade, or use durability replica",
		aofMinMajor, aofMinMinor, strings.Join(old, ", "))
}

// tooOld reports whether durability aof cannot be had from n (its Redis
// predates WAITAOF), and says why.
func (inv *Inventory) tooOld(n *node.Node) (string, bool) {
	if inv.cfg.Durability != config.DurabilityAOF {
		return "", false
	}
	s, ok := n.Settings()
	if !ok || s.AtLeast(aofMinMajor, aofMinMinor) {
		return "", false
	}
	return fmt.Sprintf("Redis %s has no WAITAOF (needs %d.%d for inventory.durability aof)", versionOf(s), aofMinMajor, aofMinMinor), true
}

func versionOf(s node.Settings) string {
	if s.Version == "" {
		return "of unknown version"
	}
	return s.Version
}

// durableFenceScript is the fence: no keys, no body but its reply.
var durableFenceScript = newScript("durable-fence", true, luaFile("durable_fence.lua"))

// durableFence returns nil once a replica (or the AOFs) acknowledged
// every write n applied before it was called, on the server process
// readOn (n.ServerRun() read before the caller's read), at once when
// durability is none: see "Reads a consumer lands".
func (inv *Inventory) durableFence(ctx context.Context, n *node.Node, readOn string) error {
	if !inv.durable() {
		return nil
	}
	if _, err := inv.run(ctx, n, durableFenceScript, nil); err != nil {
		return err
	}
	if on := n.ServerRun(); on != readOn {
		return fmt.Errorf("%w: %w: node %s: the read ran on server process %q, its fence on %q (a failover or restart "+
			"between them): what it read may be on no replica; its outcome is unknown", ErrUnavailable, ErrNotDurable, n.Name(), readOn, on)
	}
	return nil
}

// runDurable runs a write script followed by WAIT (or WAITAOF) in one
// pipeline on one connection and returns the script's reply, or an error:
// the script's own (as without durability), or one wrapping
// [ErrNotDurable] when the script ran but was not acknowledged.
func (inv *Inventory) runDurable(ctx context.Context, n *node.Node, s *luaScript, a evalArgs) (any, error) {
	c := n.Client()
	ev, wait, run := inv.evalWait(ctx, n, c, s, false, a)
	// Not loaded on the node (a restarted or flushed node), or FCALL
	// refused: nothing ran; load it, or send the source (luafunc.go).
	if functionMissing(ev.Err()) {
		inv.afterRefusal(ctx, n, s, func(source bool) error {
			ev, wait, run = inv.evalWait(ctx, n, c, s, source, a)
			return ev.Err()
		})
	}
	if err := ev.Err(); err != nil {
		return nil, err
	}
	if err := inv.waited(ctx, n, s.name, wait, run); err != nil {
		return nil, err
	}
	return ev.Val(), nil
}

// waited returns nil when the wait command sent after the script name
// reports the write acknowledged and, on a Sentinel group, the sentinels
// then confirm the server it ran on (run: INFO server, sent after the
// wait on the same connection; nil for a standalone node) as the master
// ("The server that acknowledged"), else an error wrapping [ErrNotDurable].
func (inv *Inventory) waited(ctx context.Context, n *node.Node, name string, wait, run *redis.Cmd) error {
	acked, werr := inv.acks(wait)
	if werr == nil && acked {
		if run == nil {
			return nil
		}
		id, err := runID(run)
		if err == nil {
			err = n.ConfirmMaster(ctx, id)
		}
		if err == nil {
			return nil
		}
		// Not %w of err: it must not read as "the script did not run".
		return fmt.Errorf("%w: the %s script ran and a replica of its server acknowledged it, but the server is not "+
			"confirmed as the group's master (a switch under way may resync that replica): %s; its outcome is unknown",
			ErrNotDurable, name, err)
	}
	what := "WAIT 1"
	if inv.cfg.Durability == config.DurabilityAOF {
		what = "WAITAOF 1 1"
	}
	cause := "no replica acknowledged it"
	if werr != nil {
		cause = werr.Error()
	}
	// Not %w of werr: an error reply of WAIT must not read as "the
	// script did not run" (outcomeUnknown).
	return fmt.Errorf("%w: the %s script ran on the master, then %s %dms: %s; its outcome is unknown",
		ErrNotDurable, name, what, inv.cfg.DurabilityTimeout.Milliseconds(), cause)
}

// Bare writes. The scripts that run outside the runner (newBareScript:
// topoWriteScript, which moves a node's epoch, and limitSetScript, which
// copies per-user limits to a joining node) write inventory data too, and
// what they acknowledge is relied on: an apply that reported a node moved
// and its limits copied does not copy them again. So with durability
// replica or aof they are sent with the wait like every write script
// (runBare): one that was not acknowledged fails as unknown
// ([ErrNotDurable]), and the caller retries it (the apply is run again;
// an instance reads the topology again). Before, a failover that promoted
// a replica without them undid them silently: the joining node kept the
// new epoch (an instance gave it the record again) but no per-user limit,
// and users whose quota counter it held bought past their limit (a review
// found it: tests/sentinel_topology_durable_test.go).
//
// For the same reason they advance the node's write sequence, as every
// write script does (lua.go), and the caller acknowledges it
// ([node.Node.Acknowledge], after the wait): a node that loses only them
// (a crash before they reached its disk, a failover to a replica without
// them) is behind what was acknowledged, so it is refused as gone back
// until an accept, which fences a node behind its peers' topology
// (topology/doc.go, "A node that went back"). Before, its sequence did not
// move: a node that lost only its bump (an apply that moved nothing off
// it) came back UP at the earlier token once its hold ended, never
// refused, so never accepted nor fenced, and an instance still at that
// epoch acted on it after the apply reported the topology applied
// (TestNodeThatLostOnlyItsTopologyWritesIsRefused).

// bareWriteLua wraps body (a bare write script's, after the identity
// check) so that it advances the stamp KEYS[1]'s write sequence when it
// did not fail and replies {seq, body's reply}; an error reply is passed
// on, the sequence untouched (a bare script writes nothing before an
// error, as every script: lua.go).
func bareWriteLua(body string) string {
	return "local r = (function()\n" + body + "\nend)()\n" +
		"if type(r) == 'table' and r.err then return r end\n" +
		"return {redis.call('HINCRBY', KEYS[1], 'seq', '1'), r}\n"
}

// runBareWrite is runBare for a script built with bareWriteLua: it
// acknowledges the write sequence the script replies ([node.Node.Acknowledge])
// and returns the body's reply. An acknowledgement refused (no peer holds
// a mark of the node's first write) is an error like runBare's: the
// script ran, its outcome is unknown.
func (inv *Inventory) runBareWrite(ctx context.Context, n *node.Node, s *redis.Script, name string, keys []string, args ...any) (any, error) {
	v, err := inv.runBare(ctx, n, s, name, keys, args...)
	if err != nil {
		return nil, err
	}
	r := newReplyReader(n.Name(), name)
	l := r.list(v, 2)
	seq := r.int(l, 0)
	if r.err != nil {
		return nil, r.err
	}
	if err := n.Acknowledge(ctx, seq); err != nil {
		return nil, err
	}
	return l[1], nil
}

// runBare runs the bare script s (named name) on n with keys and args and
// returns its reply: with durability replica or aof, followed by the wait
// in one pipeline on one connection (runDurable's rule). Errors are n's
// raw ones, or one wrapping [ErrNotDurable]: callers map them by nodeErr.
func (inv *Inventory) runBare(ctx context.Context, n *node.Node, s *redis.Script, name string, keys []string, args ...any) (any, error) {
	c := n.Client()
	if !inv.durable() {
		return s.Run(ctx, c, keys, args...).Result()
	}
	ev, wait, run := inv.bareWait(ctx, n, c, s, false, keys, args)
	if redis.HasErrorPrefix(ev.Err(), "NOSCRIPT") {
		ev, wait, run = inv.bareWait(ctx, n, c, s, true, keys, args) // not cached on the node: nothing ran
	}
	if err := ev.Err(); err != nil {
		return nil, err
	}
	if err := inv.waited(ctx, n, name, wait, run); err != nil {
		return nil, err
	}
	return ev.Val(), nil
}

// bareWait sends s by its hash (by its source when source is set) and the
// wait command as one pipeline (with INFO server on a Sentinel group:
// queueWait).
func (inv *Inventory) bareWait(ctx context.Context, n *node.Node, c *redis.Client, s *redis.Script, source bool, keys []string, args []any) (ev, wait, run *redis.Cmd) {
	p := c.Pipeline()
	if source {
		ev = s.Eval(ctx, p, keys, args...)
	} else {
		ev = s.EvalSha(ctx, p, keys, args...)
	}
	wait, run = inv.queueWait(ctx, n, p)
	_, _ = p.Exec(ctx) // errors are on the commands
	return ev, wait, run
}

// evalWait sends the script's command line a (its function, or its
// source) and the wait command as one pipeline (with INFO server on a
// Sentinel group: queueWait).
func (inv *Inventory) evalWait(ctx context.Context, n *node.Node, c *redis.Client, s *luaScript, source bool, a evalArgs) (ev, wait, run *redis.Cmd) {
	p := c.Pipeline()
	ev = s.cmd(ctx, a, source)
	_ = p.Process(ctx, ev) // queued; its error is the command's after Exec
	wait, run = inv.queueWait(ctx, n, p)
	_, _ = p.Exec(ctx) // errors are on the commands
	return ev, wait, run
}

// queueWait queues the durability level's wait command on p: WAIT 1, or
// WAITAOF 1 1, for durability_timeout; on a Sentinel group, INFO server
// after it (run), which names the server process the pipeline ran on
// ("The server that acknowledged"); run is nil otherwise.
func (inv *Inventory) queueWait(ctx context.Context, n *node.Node, p redis.Pipeliner) (wait, run *redis.Cmd) {
	ms := inv.cfg.DurabilityTimeout.Milliseconds()
	if inv.cfg.Durability == config.DurabilityAOF {
		wait = p.Do(ctx, "waitaof", 1, 1, ms)
	} else {
		wait = p.Do(ctx, "wait", 1, ms)
	}
	if n.IsSentinel() {
		run = p.Do(ctx, "info", "server")
	}
	return wait, run
}

// runID is the run_id in the reply of INFO server.
func runID(info *redis.Cmd) (string, error) {
	v, err := info.Text()
	if err != nil {
		return "", err
	}
	if id := node.InfoRunID(v); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("no run_id in INFO server")
}

// acks reads a WAIT (replicas) or WAITAOF ([local, replicas]) reply:
// whether the write is acknowledged as the durability level wants.
func (inv *Inventory) acks(wait *redis.Cmd) (bool, error) {
	if inv.cfg.Durability == config.DurabilityAOF {
		v, err := wait.Int64Slice()
		if err != nil {
			return false, err
		}
		if len(v) != 2 {
			return false, fmt.Errorf("WAITAOF replied %v", v)
		}
		return v[0] >= 1 && v[1] >= 1, nil
	}
	v, err := wait.Int64()
	if err != nil {
		return false, err
	}
	return v >= 1, nil
}
