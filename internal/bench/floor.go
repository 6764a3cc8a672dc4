package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
)

// The floor of a hot-SKU reservation: a yardstick, not shardis.
//
// The hot-SKU target asks shardis for twice the seed's orders/s on one
// node. When every order is one item on one node, the seed's shape writes
// nothing per order but one redo-log entry and the SKU's counter. A
// reservation that keeps shardis's promise must write at least one more
// thing per order: a record under the order id, so a retry of the same id
// is refused instead of deducting again and Confirm/Cancel find what was
// taken; and a deadline entry, so stock nobody confirms comes back. The
// floor variant writes exactly that and nothing else, with every cost
// shardis amortises amortised further: orders waiting on the node share
// one script call (floorBatch per call), the counter, the redo offset and
// both sorted sets are written once per call, the record is one string
// (SET NX with its retention, no hash, no JSON), integers go as strings.
// It has no identity stamp, no topology epoch, no write sequence, no part
// record, no token: it is the least a node must do per order, so its
// orders/s against the seed's, measured in the same rounds, bounds what
// any design that keeps a record per order can reach on this machine.

// floorBatch is the most orders one floor script call carries (shardis's
// inventory.group_commit default).
const floorBatch = 32

// floorSenders is how many floor script calls may be under way at once
// (shardis's groupInFlight).
const floorSenders = 2

// floorScript takes one unit of the SKU for every order of the call that
// has no record yet. KEYS: 1 stock hash, 2 redo queue, 3 pending index,
// 4 redo offsets hash, then one record key per order. ARGV: 1 pending
// TTL ms, 2 record retention s, then the order ids. Replies one integer
// per order: its redo offset, 0 when the stock is short, -1 when the order
// id has a record already (nothing taken).
const floorScript = `
local function I(n) return string.format('%d', n) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = redis.call('HMGET', KEYS[1], 'available', 'reserved')
local avail, resv = tonumber(s[1] or '0'), tonumber(s[2] or '0')
local off = tonumber(redis.call('HGET', KEYS[4], KEYS[2]) or '0')
local dl = I(now + tonumber(ARGV[1]))
local redo, pend, out = {}, {}, {}
for i = 5, #KEYS do
  local id = ARGV[i - 2]
  if avail < 1 then
    out[#out + 1] = 0
  elseif redis.call('SET', KEYS[i], 'r|1|' .. I(off + 1) .. '|' .. dl, 'NX', 'EX', ARGV[2]) then
    avail, resv, off = avail - 1, resv + 1, off + 1
    local o = I(off)
    redo[#redo + 1] = o
    redo[#redo + 1] = id
    pend[#pend + 1] = dl
    pend[#pend + 1] = id
    out[#out + 1] = off
  else
    out[#out + 1] = -1
  end
end
if #redo > 0 then
  redis.call('HSET', KEYS[1], 'available', I(avail), 'reserved', I(resv))
  redis.call('HSET', KEYS[4], KEYS[2], I(off))
  redis.call('ZADD', KEYS[2], unpack(redo))
  redis.call('ZADD', KEYS[3], unpack(pend))
end
return out
`

// Keys of the floor variant (its own, apart from shardis's and the seed's).
const (
	floorStock   = "floor:stock:hot"
	floorRedo    = "floor:redo:0"
	floorPending = "floor:pending"
	floorOffsets = "floor:redo-offsets"
)

var errFloorShort = errors.New("floor: insufficient stock")

// floorReq is one order waiting for a floor script call.
type floorReq struct {
	id   string
	done chan struct{}
	err  error // set before done is closed
}

// floorBatcher sends the orders queued for one node as floor script calls
// of up to floorBatch orders, from floorSenders goroutines that run until
// ctx ends (started by the first order).
type floorBatcher struct {
	ctx    context.Context
	n      *node.Node
	script *redis.Script
	queue  chan *floorReq
	start  sync.Once
}

func newFloorBatcher(ctx context.Context, n *node.Node) *floorBatcher {
	return &floorBatcher{ctx: ctx, n: n, script: redis.NewScript(floorScript), queue: make(chan *floorReq, 1024)}
}

// load gives the floor's SKU units on the node.
func (f *floorBatcher) load(ctx context.Context, units int64) error {
	return f.n.Client().HSet(ctx, floorStock, "available", strconv.FormatInt(units, 10), "reserved", "0").Err()
}

// reserve takes one unit for order id and waits for its script call.
func (f *floorBatcher) reserve(id string) error {
	f.start.Do(func() {
		for range floorSenders {
			go f.send()
		}
	})
	r := &floorReq{id: id, done: make(chan struct{})}
	select {
	case f.queue <- r:
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
	select {
	case <-r.done:
		return r.err
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}

// check verifies the floor script on the node, from an empty node: with 2
// units, orders a, a again, b and c get offsets 1 and 2, a refusal of the
// repeated id, and a short reply; the counter ends at 0 available and 2
// reserved, and the redo queue and the pending index hold a and b.
func (f *floorBatcher) check(ctx context.Context) error {
	if err := f.load(ctx, 2); err != nil {
		return err
	}
	c := f.n.Client()
	keys := []string{floorStock, floorRedo, floorPending, floorOffsets, "floor:order:a", "floor:order:a", "floor:order:b", "floor:order:c"}
	out, err := f.script.Run(ctx, c, keys, "600000", "604800", "a", "a", "b", "c").Int64Slice()
	if err != nil {
		return fmt.Errorf("floor check: %w", err)
	}
	if fmt.Sprint(out) != "[1 -1 2 0]" {
		return fmt.Errorf("floor check: replies %v, want [1 -1 2 0]", out)
	}
	st, err := c.HMGet(ctx, floorStock, "available", "reserved").Result()
	if err != nil || fmt.Sprint(st) != "[0 2]" {
		return fmt.Errorf("floor check: stock %v (%v), want [0 2]", st, err)
	}
	for _, k := range []string{floorRedo, floorPending} {
		m, err := c.ZRange(ctx, k, 0, -1).Result()
		if err != nil || fmt.Sprint(m) != "[a b]" {
			return fmt.Errorf("floor check: %s holds %v (%v), want [a b]", k, m, err)
		}
	}
	return nil
}

func (f *floorBatcher) send() {
	keys := make([]string, 0, 4+floorBatch)
	args := make([]any, 0, 2+floorBatch)
	batch := make([]*floorReq, 0, floorBatch)
	for {
		batch = batch[:0]
		select {
		case r := <-f.queue:
			batch = append(batch, r)
		case <-f.ctx.Done():
			return
		}
	fill:
		for len(batch) < floorBatch {
			select {
			case r := <-f.queue:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		keys = append(keys[:0], floorStock, floorRedo, floorPending, floorOffsets)
		args = append(args[:0], "600000", "604800")
		for _, r := range batch {
			keys = append(keys, "floor:order:"+r.id)
			args = append(args, r.id)
		}
		out, err := f.script.Run(f.ctx, f.n.Client(), keys, args...).Int64Slice()
		if err == nil && len(out) != len(batch) {
			err = fmt.Errorf("floor script: %d replies for %d orders", len(out), len(batch))
		}
		for i, r := range batch {
			switch {
			case err != nil:
				r.err = err
			case out[i] == 0:
				r.err = errFloorShort
			case out[i] < 0:
				r.err = fmt.Errorf("floor: order %q has a record already", r.id)
			}
			close(r.done)
		}
	}
}
