package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// What the checks read: the inventory's keys on each node, straight from
// the node.

// nodeState is everything of the inventory on one node, read directly.
type nodeState struct {
	name        string
	incarnation string
	stock       map[string]map[string]string      // stock key → fields
	parts       map[string]*inventory.PartRecord  // part id → its record
	orders      map[string]*inventory.OrderRecord // order id → its record
	bad         []badRecord                       // records the inventory's decoders reject
	quota       map[string]string                 // quota key → value
	redo        map[string][]redis.Z              // redo queue key → entries by score
	redoOffsets map[string]string                 // inv:redo:offsets
	redoAcked   map[string]string                 // inv:redo:acked (a sync acknowledges and trims)
	pending     []redis.Z                         // inv:pending
	other       []string                          // keys nobody expects
	xfers       []string                          // unfinished topology transfer records
	inline      []inventory.PartRecord            // the orders' inline parts (inventory/inline.go)
}

// badRecord is a part or order record that could not be decoded: the
// checker reports it and leaves it out of every other check.
type badRecord struct {
	kind string // violation kind: "part-record" or "order-record"
	err  error  // names the key and field
}

// addPart and addOrder decode a part or order record read from the node.
func (ns *nodeState) addPart(id string, f map[string]string) {
	decodeInto(ns, ns.parts, "part-record", id, f, inventory.DecodePart)
}

func (ns *nodeState) addOrder(id string, f map[string]string) {
	decodeInto(ns, ns.orders, "order-record", id, f, inventory.DecodeOrder)
	in, err := inventory.InlineParts(ns.name, id, f)
	if err != nil {
		ns.bad = append(ns.bad, badRecord{"order-record", err})
		return
	}
	ns.inline = append(ns.inline, in...)
}

// addInline adds the inline parts that have no record of their own to
// the node's parts (a part with a key of its own is that record).
func (ns *nodeState) addInline() {
	for i, p := range ns.inline {
		if ns.parts[p.ID] == nil {
			ns.parts[p.ID] = &ns.inline[i]
		}
	}
}

// decodeInto decodes record id into m, or keeps it as a bad record of kind.
func decodeInto[T any](ns *nodeState, m map[string]*T, kind, id string, f map[string]string,
	decode func(string, map[string]string) (T, error)) {
	r, err := decode(id, f)
	if err != nil {
		ns.bad = append(ns.bad, badRecord{kind, err})
		return
	}
	m[id] = &r
}

func newNodeState(name string) *nodeState {
	return &nodeState{name: name, stock: map[string]map[string]string{}, parts: map[string]*inventory.PartRecord{},
		orders: map[string]*inventory.OrderRecord{}, quota: map[string]string{}, redo: map[string][]redis.Z{}}
}

type state struct {
	names []string
	nodes map[string]*nodeState
	// svcRedo is every redo-log queue as ReadRedoLog returned it: node →
	// queue key → entries; nil if it could not be read.
	svcRedo map[string]map[string][]*v1.RedoEntry
}

// readState reads every inventory key of every node.
func (c *cluster) readState() (*state, error) {
	st := &state{names: c.names, nodes: map[string]*nodeState{}}
	for _, name := range c.names {
		ns, err := readNode(c.directClient(name), name)
		if err != nil {
			return nil, fmt.Errorf("chaos: reading node %s: %w", name, err)
		}
		st.nodes[name] = ns
	}
	return st, nil
}

func readNode(cl *redis.Client, name string) (*nodeState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNodeState(name)
	var err error
	if ns.incarnation, err = cl.HGet(ctx, "shardis:node", "incarnation").Result(); err != nil {
		return nil, fmt.Errorf("stamp: %w", err)
	}
	var keys []string
	iter := cl.Scan(ctx, 0, "inv:*", 2000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("SCAN: %w", err)
	}
	const batch = 1000
	for lo := 0; lo < len(keys); lo += batch {
		chunk := keys[lo:min(lo+batch, len(keys))]
		pipe := cl.Pipeline()
		cmds := make([]redis.Cmder, len(chunk))
		kinds := make([]inventory.KeyKind, len(chunk))
		rests := make([]string, len(chunk))
		partReads := make([]*inventory.PartRead, len(chunk))
		orderReads := make([]*inventory.OrderRead, len(chunk))
		for i, k := range chunk {
			kinds[i], rests[i] = inventory.ParseKey(k)
			switch kinds[i] {
			case inventory.KeyPending, inventory.KeyRedoLog, inventory.KeyRedoSegment:
				cmds[i] = pipe.ZRangeWithScores(ctx, k, 0, -1)
			case inventory.KeyPart:
				partReads[i] = inventory.ReadPart(ctx, pipe, rests[i])
			case inventory.KeyOrder:
				orderReads[i] = inventory.ReadOrder(ctx, pipe, rests[i])
			case inventory.KeyRedoOffsets, inventory.KeyRedoAcked, inventory.KeyStock:
				cmds[i] = pipe.HGetAll(ctx, k)
			case inventory.KeyQuota:
				cmds[i] = pipe.Get(ctx, k)
			case inventory.KeyTransferMarker, inventory.KeyRouteRemoved:
				// a destination's memory of an applied transfer, a route's removal (topology)
			case inventory.KeySettledLog:
				// a hint for the sync (inventory/settledlog.go), not a record
			case inventory.KeyTransfer:
				ns.xfers = append(ns.xfers, k)
			default:
				ns.other = append(ns.other, k)
			}
		}
		_, _ = pipe.Exec(ctx) // each read's own error is checked below (a part's, an order's two layouts)
		for i, k := range chunk {
			if r := partReads[i]; r != nil {
				f, err := r.Fields()
				if err != nil {
					return nil, fmt.Errorf("reading keys: %w", err)
				}
				ns.addPart(rests[i], f)
				continue
			}
			if r := orderReads[i]; r != nil {
				f, err := r.Fields()
				switch {
				case errors.Is(err, inventory.ErrCorrupt):
					ns.bad = append(ns.bad, badRecord{"order-record", err})
				case err != nil:
					return nil, fmt.Errorf("reading keys: %w", err)
				default:
					ns.addOrder(rests[i], f)
				}
				continue
			}
			if cmds[i] != nil {
				if err := cmds[i].Err(); err != nil && err != redis.Nil {
					return nil, fmt.Errorf("reading keys: %w", err)
				}
			}
			switch cmd := cmds[i].(type) {
			case *redis.ZSliceCmd:
				if kinds[i] == inventory.KeyPending {
					ns.pending = cmd.Val()
				} else {
					q := k // a queue's own key, or one of its segments
					if kinds[i] == inventory.KeyRedoSegment {
						queue, _, _ := strings.Cut(rests[i], ":")
						q = inventory.RedoLogKey(int(atoi(queue)))
					}
					ns.redo[q] = append(ns.redo[q], cmd.Val()...)
				}
			case *redis.MapStringStringCmd:
				switch v := cmd.Val(); kinds[i] {
				case inventory.KeyRedoOffsets:
					ns.redoOffsets = v
				case inventory.KeyRedoAcked:
					ns.redoAcked = v
				case inventory.KeyStock:
					ns.stock[k] = v
				}
			case *redis.StringCmd:
				ns.quota[k] = cmd.Val()
			}
		}
	}
	for _, z := range ns.redo { // segments in SCAN order: by offset
		sort.Slice(z, func(i, j int) bool { return z[i].Score < z[j].Score })
	}
	ns.addInline()
	return ns, nil
}

// atoi reads a counter or field: missing ("") is 0, as for the scripts;
// an unreadable value fails every check that uses it.
func atoi(s string) int64 {
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1 << 62 // unreadable: fails every check that uses it
	}
	return n
}
