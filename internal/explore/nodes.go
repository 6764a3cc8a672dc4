package explore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
)

// What the checks read: every key of the inventory's on each node,
// straight from the node (not through the inventory).

type nodeState struct {
	name    string
	stock   map[string]map[string]string // stock key → fields
	parts   map[string]*inventory.PartRecord
	orders  map[string]*inventory.OrderRecord
	quota   map[string]int64
	pending []redis.Z
	// stuck is the node's index of parts set aside (inv:stuck), and
	// stuckWhy why each was (inv:stuck:why)
	stuck    []redis.Z
	stuckWhy map[string]string
	// redo is the node's redo log, from every place that holds entries
	// (a queue's own key and both kinds of segment): queue key → offset
	// → the part ids there; heads the last offset handed out per queue
	// key (inv:redo:offsets)
	redo   map[string]map[int64][]string
	heads  map[string]int64
	xfers  []string
	topo   map[string]string // shardis:topology
	bad    []string
	frozen int // order records marked moved that have no TTL (Result.Frozen)
	// placeless are the settled stock parts whose record names no redo
	// place: written by SettleStuckLost (inventory.DecodePart reads them)
	placeless map[string]bool
	// movedLive: of orders marked moved here, those live on another node
	// when this state was read before a roll back (liveElsewhere); nil
	// otherwise
	movedLive map[string]bool
}

type worldState struct {
	nodes map[string]*nodeState
}

// read reads every inventory key of every node.
func (w *World) read(ctx context.Context) (*worldState, error) {
	st := &worldState{nodes: map[string]*nodeState{}}
	for _, name := range allNodes {
		ns, err := readNode(ctx, w.direct[name], name)
		if err != nil {
			return nil, fmt.Errorf("explore: reading node %s: %w", name, err)
		}
		st.nodes[name] = ns
	}
	return st, nil
}

func readNode(ctx context.Context, c *redis.Client, name string) (*nodeState, error) {
	ns := &nodeState{name: name, stock: map[string]map[string]string{}, parts: map[string]*inventory.PartRecord{},
		orders: map[string]*inventory.OrderRecord{}, quota: map[string]int64{}, redo: map[string]map[int64][]string{},
		placeless: map[string]bool{}}
	keys, err := c.Keys(ctx, "inv:*").Result()
	if err != nil {
		return nil, err
	}
	if ns.topo, err = c.HGetAll(ctx, "shardis:topology").Result(); err != nil {
		return nil, err
	}
	var inline []inventory.PartRecord // the orders' inline parts (inventory/inline.go)
	for _, k := range keys {
		kind, rest := inventory.ParseKey(k)
		switch kind {
		case inventory.KeyPending:
			if ns.pending, err = c.ZRangeWithScores(ctx, k, 0, -1).Result(); err != nil {
				return nil, err
			}
		case inventory.KeyRedoLog, inventory.KeyRedoSegment:
			zs, err := c.ZRangeWithScores(ctx, k, 0, -1).Result()
			if err != nil {
				return nil, err
			}
			queue, _, _ := strings.Cut(rest, ":")
			xk := inventory.RedoLogKey(int(atoi(queue)))
			if ns.redo[xk] == nil {
				ns.redo[xk] = map[int64][]string{}
			}
			for _, z := range zs {
				id, _ := z.Member.(string)
				ns.redo[xk][int64(z.Score)] = append(ns.redo[xk][int64(z.Score)], id)
			}
		case inventory.KeyRedoOffsets:
			f, err := c.HGetAll(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			if ns.heads, err = inventory.RedoHeads(name, f); err != nil {
				ns.bad = append(ns.bad, err.Error())
			}
		case inventory.KeyStuck:
			if ns.stuck, err = c.ZRangeWithScores(ctx, k, 0, -1).Result(); err != nil {
				return nil, err
			}
		case inventory.KeyStuckWhy:
			if ns.stuckWhy, err = c.HGetAll(ctx, k).Result(); err != nil {
				return nil, err
			}
		case inventory.KeyStock:
			if ns.stock[k], err = c.HGetAll(ctx, k).Result(); err != nil {
				return nil, err
			}
		case inventory.KeyPart, inventory.KeyOrder:
			var f map[string]string
			if kind == inventory.KeyPart {
				f, err = inventory.ReadPart(ctx, c, rest).Fields()
			} else {
				f, err = inventory.ReadOrder(ctx, c, rest).Fields()
			}
			if errors.Is(err, inventory.ErrCorrupt) {
				ns.bad = append(ns.bad, err.Error())
				continue
			}
			if err != nil {
				return nil, err
			}
			if kind == inventory.KeyPart {
				p, err := inventory.DecodePart(rest, f)
				if err == nil && p.Kind == inventory.PartStock && p.Redo == "" {
					ns.placeless[rest] = true // settled by SettleStuckLost
				}
				if err != nil {
					ns.bad = append(ns.bad, err.Error())
					continue
				}
				ns.parts[rest] = &p
			} else {
				o, err := inventory.DecodeOrder(rest, f)
				if err != nil {
					ns.bad = append(ns.bad, err.Error())
					continue
				}
				ns.orders[rest] = &o
				if o.Moved != "" {
					if ttl, err := c.PTTL(ctx, k).Result(); err == nil && ttl == -1 {
						ns.frozen++
					}
				}
				in, err := inventory.InlineParts(name, rest, f)
				if err != nil {
					ns.bad = append(ns.bad, err.Error())
					continue
				}
				inline = append(inline, in...)
			}
		case inventory.KeyQuota:
			v, err := c.Get(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			ns.quota[k] = atoi(v)
		case inventory.KeyTransfer:
			ns.xfers = append(ns.xfers, k)
		}
	}
	for i, p := range inline {
		if ns.parts[p.ID] == nil { // a part with a key of its own is that record
			ns.parts[p.ID] = &inline[i]
		}
	}
	return ns, nil
}

// atoi reads a counter: missing is 0; unreadable fails every check.
func atoi(s string) int64 {
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1 << 62
	}
	return n
}
