package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// The topology scripts. They run without the prelude (lua.go) and the
// runner (script_run.go), and must: the prelude refuses every call whose caller's epoch
// token differs from the node's (SHARDIS_EPOCH), and these scripts are
// what reads and moves that token, on nodes at the previous epoch, at none
// yet (a joining node) or at one this process does not know; the runner
// also needs a topology view, which is built from what topoReadScript
// reads. They check the node's identity as the prelude does: KEYS[1] is
// the stamp hash, KEYS[2] the topology record, ARGV[1] the node's
// configured name. Their error replies go through nodeErr and their
// replies through a replyReader (reply.go), as every script's.

// identityLua starts the scripts that run without the prelude (these and
// apply.go's limitSetScript): it refuses with SHARDIS_IDENTITY, as the
// prelude does, unless the stamp hash KEYS[1] names the node ARGV[1].
var identityLua = luaFile("lib_identity.lua")

// keyTopology is the topology record hash on every inventory node.
const keyTopology = node.TopologyKey

// topoReadScript returns {stamp epoch token, record fields as a flat list,
// stamp incarnation}.
var topoReadScript = newBareScript("topo-read", identityLua+luaFile("topo_read.lua"))

// topoWriteScript moves a node to a token by compare-and-set.
// ARGV: 2 expected token ("" = the node has none), 3 new token, 4 epoch,
// 5 current topology JSON, 6 previous topology JSON (""), 7 phase, 8 the
// apply's attempt id (topology.Record.Attempt; "" writes none), 9 the
// stamp incarnation the write expects (topology.Record.Incarnation; ""
// any): otherwise refused (SHARDIS_EPOCH), unless the record is stable at
// token 3 already.
// Writing the token the node already has only moves its phase from
// migrating to stable (never back) and gives a record without an attempt
// ARGV 8's, or writes the record again when it was lost; it is refused
// (SHARDIS_EPOCH) when ARGV 8 names another attempt than the record's. Replies "ok", or SHARDIS_EPOCH when
// the node is at another token. It advances the node's write sequence
// (bareWriteLua: durability.go, "Bare writes").
var topoWriteScript = newBareScript("topo-write", identityLua+bareWriteLua(luaFile("topo_write.lua")))

// readRecord reads n's topology record (Epoch 0 when it has none).
func readRecord(ctx context.Context, n *node.Node) (topology.Record, error) {
	v, err := topoReadScript.Run(ctx, n.Client(), []string{stampKey, keyTopology}, n.Name()).Result()
	if err != nil {
		return topology.Record{}, nodeErr(n, err)
	}
	rec := topology.Record{Node: n.Name()}
	r := newReplyReader(n.Name(), "topology-read")
	raw := r.list(v, 3)
	if r.err != nil {
		return rec, r.err
	}
	rec.Token, rec.Incarnation = r.str(raw, 0), r.str(raw, 2)
	flat := r.pairsAt(raw, 1, "field, value pairs")
	r.enter(1)
	f := map[string]string{}
	for i := 0; i+1 < len(flat); i += 2 {
		f[r.str(flat, i)] = r.str(flat, i+1)
	}
	r.leave()
	if r.err != nil {
		return rec, r.err
	}
	if rec.Token == "" {
		return rec, nil
	}
	stampTok := rec.Token
	if t, ok := strings.CutPrefix(rec.Token, node.FencePrefix); ok {
		rec.Fenced, rec.Held, stampTok = true, t, t // Token keeps the fence: what the stamp holds, for compare-and-set
	}
	if len(f) == 0 {
		// The stamp names an epoch but the record is gone (deleted by
		// hand, or a flush that kept the stamp): readView repairs it
		// (not a fenced one's: Retire refuses it, for an operator).
		rec.Lost = true
		return rec, nil
	}
	bad := func(what string, err error) (topology.Record, error) {
		return rec, fmt.Errorf("%w: node %s: %s %s: %v", ErrCorrupt, n.Name(), keyTopology, what, err)
	}
	if f["token"] != stampTok {
		return bad("token", fmt.Errorf("record token %q differs from the stamp's %q", f["token"], rec.Token))
	}
	if rec.Epoch, err = strconv.ParseInt(f["epoch"], 10, 64); err != nil || rec.Epoch < 1 {
		return bad("epoch", fmt.Errorf("%q is not an epoch", f["epoch"]))
	}
	if err := json.Unmarshal([]byte(f["current"]), &rec.Current); err != nil {
		return bad("current", err)
	}
	if f["prev"] != "" {
		rec.Prev = new(topology.Topology)
		if err := json.Unmarshal([]byte(f["prev"]), rec.Prev); err != nil {
			return bad("prev", err)
		}
	}
	rec.Attempt = f["attempt"]
	rec.Phase = topology.Phase(f["phase"])
	if !rec.Phase.Valid() {
		return bad("phase", fmt.Errorf("%q is not a phase", f["phase"]))
	}
	return rec, nil
}

// writeRecord runs topoWriteScript on n: it writes rec (its Token, Epoch,
// Current, Prev, Phase and Attempt; not its Node) when n is at expect
// (and, when rec.Incarnation is set, at that incarnation: topoWriteScript),
// with inv's durability wait, its write sequence acknowledged
// (durability.go, "Bare writes").
func writeRecord(ctx context.Context, inv *Inventory, n *node.Node, expect string, rec topology.Record) error {
	cj, _ := json.Marshal(rec.Current)
	pj := ""
	if rec.Prev != nil {
		b, _ := json.Marshal(rec.Prev)
		pj = string(b)
	}
	v, err := inv.runBareWrite(ctx, n, topoWriteScript, "topo-write", []string{stampKey, keyTopology},
		n.Name(), expect, rec.Token, rec.Epoch, string(cj), pj, string(rec.Phase), rec.Attempt, rec.Incarnation)
	if err != nil {
		return nodeErr(n, err)
	}
	r := newReplyReader(n.Name(), "topology-write")
	r.word(v, "ok")
	return r.err
}
