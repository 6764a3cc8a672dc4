package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// StampKey is the hash on every node that records which node it is:
// fields name (configured node name), incarnation (random id, new each time
// the node is found without a stamp) and stamped_at (unix ms).
const StampKey = "shardis:node"

// stampScript reads the stamp, writing a fresh one when it is missing.
// Returns {name, incarnation, created(0|1)}.
var stampScript = redis.NewScript(`
local name = redis.call('HGET', KEYS[1], 'name')
if not name then
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'incarnation', ARGV[2], 'stamped_at', ARGV[3])
  return {ARGV[1], ARGV[2], 1}
end
return {name, redis.call('HGET', KEYS[1], 'incarnation') or '', 0}
`)

// identity remembers the incarnation this process last saw on the node.
type identity struct {
	mu          sync.Mutex
	incarnation string // guarded by mu; "" until the first successful probe
}

// Incarnation returns the node's stamp incarnation as last seen by a probe,
// or "" before the first successful probe.
func (n *Node) Incarnation() string {
	n.ident.mu.Lock()
	defer n.ident.mu.Unlock()
	return n.ident.incarnation
}

// Probe checks that the node answers and is the node it is configured to
// be, bounded by the probe timeout. It runs on a dedicated connection that
// bypasses the state gate and the breaker, and changes no state itself:
// the caller (the health scheduler) calls [Node.SetUp] or [Node.SetDown].
//
// On first contact it stamps the node with its name and a random
// incarnation. A stamp naming another node is an [ErrIdentity] error. A
// node found without a stamp after one was seen has lost its data: Probe
// logs that loudly and re-stamps it with a new incarnation (the node is
// usable, but what it held is gone). Probe is safe to call concurrently
// (probes serialize on the single probe connection).
func (n *Node) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, n.opts.ProbeTimeout)
	defer cancel()
	probe := n.probeClient()
	res, err := stampScript.Run(ctx, probe, []string{StampKey},
		n.opts.Name, newIncarnation(), strconv.FormatInt(time.Now().UnixMilli(), 10)).Slice()
	if err != nil {
		var reply redis.Error
		if !errors.As(err, &reply) {
			n.resetProbe(probe) // the connection failed, not the node's script
		}
		return &Error{Node: n.opts.Name, Addr: n.opts.Addr, Err: fmt.Errorf("probe: %w", err)}
	}
	if len(res) != 3 {
		return n.refusal(fmt.Errorf("%w: unexpected stamp reply %v", ErrIdentity, res))
	}
	name, _ := res[0].(string)
	inc, _ := res[1].(string)
	created, _ := res[2].(int64)
	if name != n.opts.Name {
		return n.refusal(fmt.Errorf("%w: %s is stamped as node %q, configured as %q (ports swapped?)",
			ErrIdentity, StampKey, name, n.opts.Name))
	}

	if n.State() != StateUp || n.settings.Load() == nil {
		n.readSettings(ctx, probe) // first contact and every reconnect
	}
	if err := n.syncDrains(ctx, probe); err != nil {
		var reply redis.Error
		if !errors.As(err, &reply) {
			n.resetProbe(probe)
		}
		return &Error{Node: n.opts.Name, Addr: n.opts.Addr, Err: fmt.Errorf("probe: reading %s: %w", DrainKey, err)}
	}

	n.ident.mu.Lock()
	prev := n.ident.incarnation
	n.ident.incarnation = inc
	n.ident.mu.Unlock()
	switch {
	case prev == "" && created == 1:
		n.log.Info("node stamped", "incarnation", inc)
	case prev != "" && prev != inc:
		// Missing stamp (created by us) or a stamp another instance wrote
		// after finding it missing: either way the data set was lost.
		n.log.Error("NODE LOST ITS DATA: stamp was missing, node re-stamped with a new incarnation",
			"previous_incarnation", prev, "incarnation", inc)
	}
	return nil
}

func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
