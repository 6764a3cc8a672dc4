package node

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Drains are stored on the node they drain, in the hash DrainKey (field
// "server/route", value "1"), so they are shared by every process over the
// node and survive restarts of those processes. [Node.PersistRouteEnabled]
// writes the hash, then the local flag; every probe reads the hash and
// applies it to the local flags, so other processes see a drain within
// one heartbeat. A node that lost its data forgets its drains with it.
//
// A probe's read may predate a write of this process: applied after it,
// it would undo the local flag until the next heartbeat. So a write bumps
// the node's drain generation once the hash holds it, and a probe applies
// what it read only when the generation it took before reading is still
// the current one (a read that began after the bump saw the write). The
// check and the probe's apply are one step under drainMu, as are the bump
// and the write's flag: checked, then bumped and flagged by a write, then
// applied, a probe's older read undid the write's flag (ci474: an enable
// answered enabled, and the next ListNodes showed the route drained).

// DrainKey is the hash on every node that lists its drained routes.
const DrainKey = "shardis:drain"

// drainScript records the drain of route ARGV[1] in KEYS[1]. The HDEL
// first takes no memory, so Redis lets the HSET after it through on a
// node over its maxmemory (stampSrc says why): an operator can drain a
// node that filled up, the moment it is most likely to be drained.
var drainScript = redis.NewScript(`
redis.call('HDEL', KEYS[1], ARGV[1])
return redis.call('HSET', KEYS[1], ARGV[1], '1')
`)

// PersistRouteEnabled drains (enabled=false) or re-enables one route on
// this node for every process over it: it records the decision on the node
// itself, then flips the local flag. It fails, leaving the local flag as
// it was, when the route is not one the node serves ([ErrUnknownRoute]) or
// the node cannot be written: DOWN or its breaker open (an [*Error]
// wrapping [ErrDown] or [ErrBreakerOpen]: nothing was sent), or unreachable
// before a probe noticed ([ErrUnreachable]: a write cut off mid-reply may
// have reached the node; repeating the call is safe). A drain nobody else
// would see is not applied.
func (n *Node) PersistRouteEnabled(ctx context.Context, rk RouteKey, enabled bool) error {
	if _, ok := n.routes[rk]; !ok {
		return fmt.Errorf("%w: node %s does not serve %q", ErrUnknownRoute, n.opts.Name, rk.String())
	}
	var err error
	if enabled {
		err = n.Client().HDel(ctx, DrainKey, rk.String()).Err()
	} else {
		err = drainScript.Run(ctx, n.Client(), []string{DrainKey}, rk.String()).Err()
	}
	if err != nil {
		return fmt.Errorf("node %s: recording the drain of %q on the node: %w", n.opts.Name, rk.String(), unreachable(ctx, err))
	}
	n.drainMu.Lock()
	defer n.drainMu.Unlock()
	n.drainGen.Add(1)
	return n.SetRouteEnabled(rk, enabled)
}

// applyDrains applies the node's drain hash, as read by a probe whose
// read began at drain generation gen, to the local route flags; a read
// older than this process's last drain write is dropped.
func (n *Node) applyDrains(drained map[string]string, gen uint64) {
	n.drainMu.Lock()
	defer n.drainMu.Unlock()
	if n.drainGen.Load() != gen {
		return
	}
	for rk := range n.routes {
		_ = n.SetRouteEnabled(rk, drained[rk.String()] == "")
	}
}
