package node

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Witnesses.
//
// A node's own stamp cannot prove that its data did not go back: restored
// from an older snapshot or restarted after losing writes not yet on disk,
// it holds an older but self-consistent stamp. So what a node acknowledged
// is also recorded outside it: every process writes, for each node X, a
// mark "gen:incarnation:seq" (the highest write sequence X acknowledged to
// it) into the hash WitnessKey on X's peers, when X goes DOWN and
// periodically while it changes (package router does; see
// router.Options). The rule that makes it safe: a mark is only ever
// raised (same generation and incarnation: a higher sequence; a higher
// generation: replaced), and only [Node.Accept] raises the generation.
//
// First write of an incarnation. The periodic marks lag the writes by up
// to a heartbeat, so a process that dies (or closes) within a heartbeat of
// its first write to an incarnation could leave no mark of it anywhere:
// the node restarting empty while no process runs would then look new and
// be stamped afresh, its acknowledged writes silently gone. Hence: the
// first write of an incarnation that a process acknowledges (the first
// after its first contact with the node, or after the node was accepted)
// is acknowledged only once a peer holds a mark of that generation and
// incarnation with at least that write's sequence ([Node.Acknowledge],
// [Witnesses.Hold]); until one does, the write's outcome is reported as
// unknown ([ErrUnwitnessed]). Later writes of the same incarnation are
// acknowledged at once and their marks may lag by a heartbeat as before.
// It costs one round trip to the peers per incarnation per process. Then a
// node that comes back without its stamp is witnessed (refused with
// [ErrDataLost]) and one that comes back with an older stamp is behind a
// mark (refused with [ErrRolledBack]), whichever process probes it.
//
// Off the probe's path. A probe is one round trip to its node (Probe): it
// never talks to peers. The marks peers hold of a node are read by a
// background loop (package router: before the first probes, then every
// heartbeat) and, before its first command, by every new command
// connection of the node (dialcheck.go: a restart kills every connection,
// so the first write after one reads them), and handed to the node with
// [Node.SetWitnessed]; every probe compares the stamp with the last view
// and refuses the node when the stamp is behind it. So an instance that
// saw fewer writes than another does not use a node that lost the
// other's: the other's marks are on the peers. Reading and writing marks
// runs on a client of its own per node (not the probe's one
// connection) and never changes a node's state: a slow or silent peer
// cannot make a probe time out. A view is at most a heartbeat older than
// the marks on the peers; marks of this process's own writes are checked
// against what it saw acknowledged, without any lag.
//
// Accept is two steps: stamp the node (new incarnation, generation G+1),
// then raise its mark on every peer. A crash between them is safe: a probe
// then finds peers at generation G and the stamp at G+1, which is ahead of
// every witness ("accepted since"), so the node is used; its first write
// acknowledged then raises a peer to G+1. Accepting twice only raises the
// generation again.
//
// What it cannot see: writes acknowledged after the last mark that
// reached a peer, when every process that saw them died with the node
// (marks of later writes lag by up to a heartbeat); a node without peers;
// peers that lost their own data; peers that did not answer the reads of
// the view. A process that saw the writes, is alive and reaches the node
// but not its peers records the loss on the node (wentback.go).

// WitnessKey is the hash on every node holding the marks of its peers
// (field: node name; value: "gen:incarnation:seq").
const WitnessKey = "shardis:witness"

// Mark is what is known of a node's writes: its acceptance generation, its
// stamp's incarnation and its write sequence.
type Mark struct {
	// Gen is the node's acceptance generation: 0 until the node is first
	// accepted, raised only by [Node.Accept].
	Gen int64
	// Incarnation is the stamp's incarnation: a random hex id written
	// when the node was first stamped and replaced by each Accept.
	Incarnation string
	// Seq is the highest write sequence (the stamp's seq field, advanced
	// by every inventory write script) known acknowledged.
	Seq int64
}

// String formats the mark as stored: "gen:incarnation:seq".
func (m Mark) String() string {
	return strconv.FormatInt(m.Gen, 10) + ":" + m.Incarnation + ":" + strconv.FormatInt(m.Seq, 10)
}

// ParseMark reads a stored mark.
func ParseMark(s string) (Mark, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return Mark{}, fmt.Errorf("mark %q is not gen:incarnation:seq", s)
	}
	gen, err1 := strconv.ParseInt(parts[0], 10, 64)
	seq, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || parts[1] == "" {
		return Mark{}, fmt.Errorf("mark %q is not gen:incarnation:seq", s)
	}
	return Mark{Gen: gen, Incarnation: parts[1], Seq: seq}, nil
}

// After reports whether m supersedes o: a higher generation, or the same
// generation and incarnation with a higher sequence.
func (m Mark) After(o Mark) bool {
	if m.Gen != o.Gen {
		return m.Gen > o.Gen
	}
	return m.Incarnation == o.Incarnation && m.Seq > o.Seq
}

// Witnesses is what a node needs of its peers for the first write of an
// incarnation. Package router implements it over the peers; node stays
// free of upward imports.
type Witnesses interface {
	// Hold makes sure that at least one peer holds a mark of the named
	// node at or after m (same generation and incarnation with a sequence
	// of at least m.Seq, or a higher generation), writing it where needed.
	// It returns nil once one peer does, or when the node has no peers to
	// hold one; otherwise an error naming why no peer does.
	Hold(ctx context.Context, name string, m Mark) error
	// Witnessed reads now, within ctx and the implementation's own
	// bound, the marks the named node's peers that are in use hold of
	// it, and returns the highest, and whether any peer answered with
	// one. A new command connection waits for it (dialcheck.go).
	Witnessed(ctx context.Context, name string) (Mark, bool)
}

// peerView is the highest mark the peers held of a node when they were
// last read (found false: none held one).
type peerView struct {
	mark  Mark
	found bool
}

// SetWitnessed records the highest mark the node's peers hold of it, as
// read off the probe's path (package router). The view only rises: a mark
// that does not supersede the one recorded ([Mark.After]) is ignored, so a
// peer that did not answer one read does not lower it. Every probe of a
// node whose data must be kept (Options.Critical) refuses the node when
// its stamp is behind the view (Probe).
func (n *Node) SetWitnessed(m Mark) {
	for {
		cur := n.witnessed.Load()
		if cur != nil && !m.After(cur.mark) {
			return
		}
		if n.witnessed.CompareAndSwap(cur, &peerView{mark: m, found: true}) {
			return
		}
	}
}

// Witnessed returns the highest mark recorded with [Node.SetWitnessed],
// and whether any was.
func (n *Node) Witnessed() (Mark, bool) {
	if v := n.witnessed.Load(); v != nil {
		return v.mark, v.found
	}
	return Mark{}, false
}

// raiseScript raises the mark of node ARGV[1] in KEYS[1] to ARGV[2..4]
// (gen, incarnation, seq) when it supersedes the stored one. It returns 1
// when it raised the mark, 2 when the stored mark already covers it (same
// generation and incarnation, a sequence at least as high; or a higher
// generation), 0 when the stored mark is of another incarnation of the
// same generation (left as it is). The mark is deleted before it is set:
// an HDEL takes no memory, so the HSET after it is let through on a peer
// over its maxmemory (stampSrc says why): a full peer still witnesses.
var raiseScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local gen, inc, seq = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
if cur then
  local g, i, s = string.match(cur, '^(%-?%d+):([^:]+):(%-?%d+)$')
  if g then
    g, s = tonumber(g), tonumber(s)
    if gen < g or (gen == g and inc == i and seq <= s) then return 2 end
    if gen == g and inc ~= i then return 0 end
  end
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3] .. ':' .. ARGV[4])
return 1
`)

// Witness records on this node (a peer) that node name reached mark m,
// raising the stored mark only (see [Mark.After]), and reports whether
// this node now holds a mark at or after m (false: it holds one of
// another incarnation of the same generation). It runs on the node's
// witness client, off the probe's connection and past the state gate and
// breaker, so neither a peer's open breaker stops it nor does it delay a
// probe. For a Sentinel group that client is replaced on every DOWN→UP
// ([Node.SetUp]): once the node is UP at a new master, marks are written
// and read there, not on the demoted one.
func (n *Node) Witness(ctx context.Context, name string, m Mark) (bool, error) {
	r, err := raiseScript.Run(ctx, n.side.get(), []string{WitnessKey}, name, m.Gen, m.Incarnation, m.Seq).Int64()
	return r != 0, err
}

// WitnessOf returns the mark this node (a peer) holds of node name, read
// on the witness client.
func (n *Node) WitnessOf(ctx context.Context, name string) (Mark, bool, error) {
	v, err := n.side.get().HGet(ctx, WitnessKey, name).Result()
	if err == redis.Nil {
		return Mark{}, false, nil
	}
	if err != nil {
		return Mark{}, false, err
	}
	m, err := ParseMark(v)
	return m, err == nil, err
}

// WitnessMarks returns every mark this node (a peer) holds, by node name,
// read on the witness client in one command. Unparsable entries are left
// out.
func (n *Node) WitnessMarks(ctx context.Context) (map[string]Mark, error) {
	all, err := n.side.get().HGetAll(ctx, WitnessKey).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]Mark, len(all))
	for name, v := range all {
		if m, err := ParseMark(v); err == nil {
			out[name] = m
		}
	}
	return out, nil
}

// acceptScript gives a node a new incarnation at generation ARGV[2], or
// one above the stamp's when that is not above it (two accepts that chose
// the same generation, a retry after a lost reply: the second must not
// reuse the first's generation with another incarnation, which every
// process that saw the first would refuse as gone back), keeping its
// write sequence; it stamps a node without a stamp. Returns {seq, gen}. Field
// data_of becomes the incarnation the node's data was stamped with before
// (NoEarlierData when it had no stamp: it came back empty). With ARGV[5]
// set, a topology token in field epoch that is still ARGV[5] becomes
// FencePrefix .. ARGV[5] (Accept's fence). A loss recorded on the node
// (field went_back, wentback.go) is forgotten: the operator accepted it.
// That HDEL comes first: it takes no memory, so the writes after it are
// let through on a node over its maxmemory (stampSrc says why), and an
// operator can accept a node that came back full.
var acceptScript = redis.NewScript(`
local was = redis.call('HGET', KEYS[1], 'incarnation') or '` + NoEarlierData + `'
local gen = math.max(tonumber(ARGV[2]), (tonumber(redis.call('HGET', KEYS[1], 'gen')) or 0) + 1)
redis.call('HDEL', KEYS[1], '` + wentBackField + `')
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'incarnation', ARGV[3], 'gen', gen, 'stamped_at', ARGV[4], 'data_of', was)
if ARGV[5] ~= '' and redis.call('HGET', KEYS[1], 'epoch') == ARGV[5] then
  redis.call('HSET', KEYS[1], 'epoch', '` + FencePrefix + `' .. ARGV[5])
end
return {tonumber(redis.call('HGET', KEYS[1], 'seq')) or 0, gen}
`)

// NoEarlierData is a stamp's data_of when the node had no stamp before
// it was stamped or accepted: its data descends from no earlier
// incarnation (it came back empty), so nothing it holds, and nothing in
// its redo log, was written under one.
const NoEarlierData = "none"

// FencePrefix begins the topology token of a node accepted behind its
// peers (Accept with a fence): no script's prelude matches it, so every
// instance refuses the node until `shardis topology apply` brings it
// forward (inventory: topology/doc.go, "A node that went back").
const FencePrefix = "behind:"

// TopologyKey is the inventory's topology record on every inventory node
// (topology/doc.go): Topology reads its field attempt.
const TopologyKey = "shardis:topology"

// TopoStamp is where a node's topology stands, as an accept compares it
// with its peers' (router.AcceptNode): Token is the stamp's field epoch as
// it is (FencePrefix included; "" when none), Attempt the apply attempt
// that moved it there (the stamp's field attempt, or the record's for a
// node stamped by a release before; "" for a first epoch).
type TopoStamp struct {
	// Token is the stamp's field epoch as it is, FencePrefix included;
	// "" when the node has none.
	Token string
	// Attempt is the apply attempt that moved the node to Token (the
	// stamp's field attempt, or the topology record's for a node stamped
	// by a release before); "" for a first epoch.
	Attempt string
}

// topoStampScript reads a TopoStamp: {epoch, attempt} of the stamp
// KEYS[1], the record KEYS[2]'s attempt when the stamp has none.
var topoStampScript = redis.NewScript(`
local s = redis.call('HMGET', KEYS[1], 'epoch', 'attempt')
return {s[1] or '', s[2] or redis.call('HGET', KEYS[2], 'attempt') or ''}
`)

// Topology reads where the node's topology stands, on the probe
// connection (a refused node answers too).
func (n *Node) Topology(ctx context.Context) (TopoStamp, error) {
	v, err := topoStampScript.Run(ctx, n.probeClient(), []string{StampKey, TopologyKey}).StringSlice()
	if err != nil {
		return TopoStamp{}, err
	}
	if len(v) != 2 {
		return TopoStamp{}, fmt.Errorf("node %s: topology stamp: %d fields, want 2", n.opts.Name, len(v))
	}
	return TopoStamp{Token: v[0], Attempt: v[1]}, nil
}

// Accept makes the node's current data the truth: its stamp gets a new
// incarnation (a new redo-log generation: consumers key offsets by it) at
// generation gen (or one above the stamp's, acceptScript), keeping its
// write sequence, and it returns the new mark,
// which the caller writes to every peer ([Node.Witness]). gen must exceed
// every generation witnessed of the node. Accept works on a refused
// (DOWN) node: it runs on the probe connection. A non-empty fence is the
// node's topology token as the caller read it: when the node still holds
// it, it is fenced (FencePrefix), in the same script. A node it cannot
// reach or talk to fails it with an error wrapping [ErrUnreachable]
// (whether the script ran is then unknown; accepting again is safe).
func (n *Node) Accept(ctx context.Context, gen int64, fence string) (Mark, error) {
	inc := newIncarnation()
	v, err := acceptScript.Run(ctx, n.probeClient(), []string{StampKey},
		n.opts.Name, gen, inc, time.Now().UnixMilli(), fence).Int64Slice()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("unexpected reply %v", v)
	}
	if err != nil {
		return Mark{}, fmt.Errorf("node %s: accept: %w", n.opts.Name, unreachable(ctx, err))
	}
	seq, gen := v[0], v[1]
	n.log.Warn("node data accepted by an operator: new incarnation", "incarnation", inc, "generation", gen, "seq", seq)
	return Mark{Gen: gen, Incarnation: inc, Seq: seq}, nil
}
