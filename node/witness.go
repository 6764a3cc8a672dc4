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
// router.Options). A probe of X on first contact and on every reconnect
// reads the highest mark its peers hold and refuses X when X's stamp is
// behind it (Probe). The rule that makes it safe: a mark is only ever
// raised (same generation and incarnation: a higher sequence; a higher
// generation: replaced), and only [Node.Accept] raises the generation.
//
// Accept is two steps: stamp the node (new incarnation, generation G+1),
// then raise its mark on every peer. A crash between them is safe: a probe
// then finds peers at generation G and the stamp at G+1, which is ahead of
// every witness ("accepted since"), so the node is used; the next mark
// written of it raises the peers to G+1. Accepting twice only raises the
// generation again.
//
// What it cannot see: writes acknowledged after the last mark that
// reached a peer, when every process that saw them died with the node
// (marks are written when the node goes DOWN, and every heartbeat); a node
// without peers; peers that lost their own data.

// WitnessKey is the hash on every node holding the marks of its peers
// (field: node name; value: "gen:incarnation:seq").
const WitnessKey = "shardis:witness"

// Mark is what is known of a node's writes: its acceptance generation, its
// stamp's incarnation and its write sequence.
type Mark struct {
	Gen         int64
	Incarnation string
	Seq         int64
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

// Witnesses gives a probe the highest mark other nodes witnessed of a
// node. Package router implements it over the peers; node stays free of
// upward imports.
type Witnesses interface {
	// Witnessed returns the highest mark any reachable peer holds of the
	// named node, and whether any peer holds one. Unreachable peers are
	// skipped.
	Witnessed(ctx context.Context, name string) (Mark, bool)
}

// raiseScript raises the mark of node ARGV[1] in KEYS[1] to ARGV[2..4]
// (gen, incarnation, seq) when it supersedes the stored one.
var raiseScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local gen, inc, seq = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
if cur then
  local g, i, s = string.match(cur, '^(%-?%d+):([^:]+):(%-?%d+)$')
  if g then
    g, s = tonumber(g), tonumber(s)
    if gen < g or (gen == g and (inc ~= i or seq <= s)) then return 0 end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3] .. ':' .. ARGV[4])
return 1
`)

// Witness records on this node (a peer) that node name reached mark m,
// raising the stored mark only (see [Mark.After]). It runs on the probe
// connection, so a peer's open breaker does not stop it.
func (n *Node) Witness(ctx context.Context, name string, m Mark) error {
	return raiseScript.Run(ctx, n.probeClient(), []string{WitnessKey}, name, m.Gen, m.Incarnation, m.Seq).Err()
}

// WitnessOf returns the mark this node (a peer) holds of node name.
func (n *Node) WitnessOf(ctx context.Context, name string) (Mark, bool, error) {
	v, err := n.probeClient().HGet(ctx, WitnessKey, name).Result()
	if err == redis.Nil {
		return Mark{}, false, nil
	}
	if err != nil {
		return Mark{}, false, err
	}
	m, err := ParseMark(v)
	return m, err == nil, err
}

// acceptScript gives a node a new incarnation at generation ARGV[2],
// keeping its write sequence; it stamps a node without a stamp.
var acceptScript = redis.NewScript(`
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'incarnation', ARGV[3], 'gen', ARGV[2], 'stamped_at', ARGV[4])
return tonumber(redis.call('HGET', KEYS[1], 'seq')) or 0
`)

// Accept makes the node's current data the truth: its stamp gets a new
// incarnation (a new redo-log generation: consumers key offsets by it) at
// generation gen, keeping its write sequence, and it returns the new mark,
// which the caller writes to every peer ([Node.Witness]). gen must exceed
// every generation witnessed of the node. Accept works on a refused
// (DOWN) node: it runs on the probe connection.
func (n *Node) Accept(ctx context.Context, gen int64) (Mark, error) {
	inc := newIncarnation()
	seq, err := acceptScript.Run(ctx, n.probeClient(), []string{StampKey},
		n.opts.Name, gen, inc, time.Now().UnixMilli()).Int64()
	if err != nil {
		return Mark{}, fmt.Errorf("node %s: accept: %w", n.opts.Name, err)
	}
	n.log.Warn("node data accepted by an operator: new incarnation", "incarnation", inc, "generation", gen, "seq", seq)
	return Mark{Gen: gen, Incarnation: inc, Seq: seq}, nil
}
