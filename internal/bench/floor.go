package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
)

// The floor of a reservation: a yardstick, not shardis.
//
// The inventory targets ask shardis for twice the seed's orders/s. The
// seed writes nothing per order but a redo-log entry per item and the
// SKU's counter. A reservation that keeps shardis's promise must write at
// least this more per order: a record under the order id, set only if the
// id has none, so a retry cannot deduct twice and Confirm/Cancel find what
// was taken; for every node that gives units to an order whose record is
// elsewhere, a fence under the part's id, set only once, so the part is
// settled once; a deadline entry per taken part, so stock nobody confirms
// comes back. The floor variants write exactly that and nothing else
// (and send each entry's keys only where it writes them: floorEntryKeys),
// in the order that needs the fewest writes (the fences first, then the
// record, final at once, so no separate decision: floorOrder), with
// everything shardis amortises amortised as far: orders waiting
// on a node share one script call (up to floorBatch), each counter and
// redo offset is read and written once per call, the sorted sets get one
// ZADD per key per call, a record or fence is one string (SET with its
// retention), integers go as strings. There is no identity stamp, no
// topology epoch, no write sequence, no recovery: it is the least a node
// must do per order, so its orders/s against the seed's, measured in the
// same rounds, bounds what a design that keeps a record per order, each
// record and fence a key of its own, can reach on this machine. (A record
// that is a field of a shared hash costs a node less: floorbucket.go
// measures that structure beside it.)

// floorBatch is the most entries one floor script call carries (shardis's
// inventory.group_commit default).
const floorBatch = 32

// floorSenders is how many floor script calls may be under way on one node
// at once (shardis's groupInFlight).
const floorSenders = 2

// floorScript writes a batch of entries on one node. KEYS: 1 pending
// index, 2 redo offsets hash, then per entry: its key (record or fence)
// and, for a take ("t") only, its stock hash and its redo queue
// (floorEntryKeys). ARGV: 1 pending TTL ms, 2 retention s, then per
// entry: mode, member, value. Mode "t" takes one unit: when the
// stock has one and the key is absent, it sets the key to value and adds
// member to the redo queue (at the queue's next offset) and to the pending
// index. Mode "r" sets an absent key to value and takes nothing (the
// record of an order with no item on its home). Replies one integer per
// entry: "t": the redo offset, 0 when the stock is short, -1 when the key
// exists (nothing taken); "r": 1, or -1 when the key exists.
const floorScript = `
local function I(n) return string.format('%d', n) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dl = I(now + tonumber(ARGV[1]))
local stock, offs, zs, zkeys, out = {}, {}, {}, {}, {}
local function zadd(key, score, member)
  local q = zs[key]
  if not q then
    q = {}
    zs[key] = q
    zkeys[#zkeys + 1] = key
  end
  q[#q + 1] = score
  q[#q + 1] = member
end
local k = 3
for a = 3, #ARGV, 3 do
  local mode, member, value = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local key, sk, rk = KEYS[k]
  if mode == 'r' or mode == 'd' then k = k + 1 else sk, rk, k = KEYS[k + 1], KEYS[k + 2], k + 3 end
  if mode == 'r' then
    out[#out + 1] = redis.call('SET', key, value, 'NX', 'EX', ARGV[2]) and 1 or -1
  elseif mode == 'd' then
    out[#out + 1] = redis.call('SET', key, value, 'XX', 'KEEPTTL') and 1 or -1
  else
    local s = stock[sk]
    if not s then
      local v = redis.call('HMGET', sk, 'available', 'reserved')
      s = {tonumber(v[1] or '0'), tonumber(v[2] or '0')}
      stock[sk] = s
    end
    local o = offs[rk]
    if not o then
      o = {tonumber(redis.call('HGET', KEYS[2], rk) or '0')}
      offs[rk] = o
    end
    if s[1] < 1 then
      out[#out + 1] = 0
    elseif redis.call('SET', key, value, 'NX', 'EX', ARGV[2]) then
      s[1], s[2], o[1] = s[1] - 1, s[2] + 1, o[1] + 1
      s.dirty, o.dirty = true, true
      zadd(rk, I(o[1]), member)
      zadd(KEYS[1], dl, member)
      out[#out + 1] = o[1]
    else
      out[#out + 1] = -1
    end
  end
end
for sk, s in pairs(stock) do
  if s.dirty then redis.call('HSET', sk, 'available', I(s[1]), 'reserved', I(s[2])) end
end
for rk, o in pairs(offs) do
  if o.dirty then redis.call('HSET', KEYS[2], rk, I(o[1])) end
end
for _, k in ipairs(zkeys) do redis.call('ZADD', k, unpack(zs[k])) end
return out
`

// Keys of the floor variants (their own, apart from shardis's and the
// seed's). floorStock(sku) is a SKU's stock hash, floorRedo(sku) its redo
// queue (the seed's sku % 50).
const (
	floorPending = "floor:pending"
	floorOffsets = "floor:redo-offsets"
	floorHotSKU  = "hot"
)

func floorStock(sku string) string { return "floor:stock:" + sku }

// floorRedo is the seed's sku % 50 for a numeric SKU and queue 0 for any
// other (the hot SKU's), from a table, so that an entry costs no parse
// error and no string.
func floorRedo(sku string) string {
	n := 0
	for i := 0; i < len(sku); i++ {
		c := sku[i]
		if c < '0' || c > '9' {
			n = 0
			break
		}
		n = (n*10 + int(c-'0')) % 50
	}
	return floorRedoKeys[n]
}

// floorRedoKeys are the floor's 50 redo queues (floorRedo).
var floorRedoKeys = func() (keys [50]string) {
	for i := range keys {
		keys[i] = "floor:redo:" + strconv.Itoa(i)
	}
	return keys
}()

var errFloorShort = errors.New("floor: insufficient stock")

// floorReq is one entry waiting for a floor script call.
type floorReq struct {
	mode, key, sku, member, value string
	unwaited                      bool   // nobody waits: a failure goes to the batcher's failed
	gen                           uint64 // the batcher's generation when submitted (floorBatcher.reset)
	done                          chan struct{}
	err                           error // set before done is closed
}

// floorFailure is the failure of an unwaited entry and the generation of
// its batcher it was submitted in.
type floorFailure struct {
	gen uint64
	err error
}

// floorBatcher sends the entries queued for one node as floor script calls
// of up to floorBatch entries, from floorSenders goroutines that run until
// ctx ends (started by the first entry).
type floorBatcher struct {
	ctx    context.Context
	n      *node.Node
	script *redis.Script
	queue  chan *floorReq
	start  sync.Once
	// headKeys and headArgs open every call's keys and arguments: the
	// pending index and offsets hash, the TTL and retention (and, for the
	// guarded floor, its stamp, the node's name and epoch: floorguard.go)
	headKeys []string
	headArgs []any
	// failed is the first failure of an entry nobody waits for (unwaited)
	// of the newest generation that had one: every later submit of that
	// generation returns it, so the run counts it.
	failed atomic.Pointer[floorFailure]
	// gen is the generation: reset starts a new one, whose submits no
	// failure of an entry submitted before it fails.
	gen atomic.Uint64
}

func newFloorBatcher(ctx context.Context, n *node.Node) *floorBatcher {
	return &floorBatcher{ctx: ctx, n: n, script: redis.NewScript(floorScript), queue: make(chan *floorReq, 1024),
		headKeys: []string{floorPending, floorOffsets}, headArgs: []any{"600000", "604800"}}
}

// floorTakeSet is floorScript's write of a taken entry's key: set only if
// absent, with the retention.
const floorTakeSet = "elseif redis.call('SET', key, value, 'NX', 'EX', ARGV[2]) then"

// floorNoTTLScript is floorScript with a taken entry's key set only if
// absent and without a TTL (SET NX), as shardis writes a reserved order's
// record (no TTL until the order is decided: inventory/orderrec.go). It
// is everything else the floor's; the no-TTL floor row
// (VarHotFloorLocalNoTTL) runs it next to the stock, the yardstick for
// what the bucketed-record row saves beside a per-key TTL.
var floorNoTTLScript = func() string {
	if strings.Count(floorScript, floorTakeSet) != 1 {
		panic("bench: floorScript has not one " + floorTakeSet)
	}
	return strings.Replace(floorScript, floorTakeSet, "elseif redis.call('SET', key, value, 'NX') then", 1)
}()

// newFloorNoTTLBatcher is newFloorBatcher running floorNoTTLScript.
func newFloorNoTTLBatcher(ctx context.Context, n *node.Node) *floorBatcher {
	f := newFloorBatcher(ctx, n)
	f.script = redis.NewScript(floorNoTTLScript)
	return f
}

// load gives the floor's SKU units on the node.
func (f *floorBatcher) load(ctx context.Context, sku string, units int64) error {
	return f.n.Client().HSet(ctx, floorStock(sku), "available", strconv.FormatInt(units, 10), "reserved", "0").Err()
}

// reset starts a new generation: the failure of an unwaited entry
// submitted before it fails no later submit. Every floor row's setup
// calls it (invWorkloads), on nodes just emptied: a one-round row's
// decision still queued when its run ended finds its record flushed by the
// next row's Reset and fails, which is no failure of that row, nor of any
// later one on the node (they all failed for the rest of the section).
func (f *floorBatcher) reset() { f.gen.Add(1) }

// fail keeps the failure of unwaited entry r unless one of r's generation
// or a newer one is kept.
func (f *floorBatcher) fail(r *floorReq) {
	fl := &floorFailure{gen: r.gen, err: r.err}
	for {
		old := f.failed.Load()
		if old != nil && old.gen >= r.gen || f.failed.CompareAndSwap(old, fl) {
			return
		}
	}
}

// submit queues r (done is made here); wait waits for it. It fails
// without queueing once an unwaited entry of the current generation
// failed.
func (f *floorBatcher) submit(r *floorReq) error {
	gen := f.gen.Load()
	if e := f.failed.Load(); e != nil && e.gen == gen {
		return e.err
	}
	r.gen = gen
	f.start.Do(func() {
		for range floorSenders {
			go f.send()
		}
	})
	r.done = make(chan struct{})
	select {
	case f.queue <- r:
		return nil
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}

func (f *floorBatcher) wait(r *floorReq) error {
	select {
	case <-r.done:
		return r.err
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}

func (f *floorBatcher) send() {
	keys := make([]string, 0, len(f.headKeys)+3*floorBatch)
	args := make([]any, 0, len(f.headArgs)+3*floorBatch)
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
		keys = append(keys[:0], f.headKeys...)
		args = append(args[:0], f.headArgs...)
		for _, r := range batch {
			keys = floorEntryKeys(keys, r.mode, r.key, r.sku)
			args = append(args, r.mode, r.member, r.value)
		}
		out, err := f.script.Run(f.ctx, f.n.Client(), keys, args...).Int64Slice()
		if err == nil && len(out) != len(batch) {
			err = fmt.Errorf("floor script: %d replies for %d entries", len(out), len(batch))
		}
		for i, r := range batch {
			switch {
			case err != nil:
				r.err = err
			case out[i] == 0:
				r.err = errFloorShort
			case out[i] == -2:
				r.err = fmt.Errorf("floor: %s: a guard refused the entry (floorguard.go)", r.member)
			case out[i] < 0 && r.mode == "d":
				r.err = fmt.Errorf("floor: %s: key %q does not exist", r.member, r.key)
			case out[i] < 0:
				r.err = fmt.Errorf("floor: %s: key %q exists", r.member, r.key)
			}
			if r.unwaited && r.err != nil {
				f.fail(r)
			}
			close(r.done)
		}
	}
}

// floorEntryKeys appends an entry's keys to keys: its key (record or
// fence) and, for a take, its stock hash and redo queue. A record ("r")
// or decision ("d") entry writes its key alone and sends no other: the
// floor sends what it writes and nothing else.
func floorEntryKeys(keys []string, mode, key, sku string) []string {
	if mode == "r" || mode == "d" {
		return append(keys, key)
	}
	return append(keys, key, floorStock(sku), floorRedo(sku))
}

// floorHome is the node of an order id's record: hashed over n nodes.
func floorHome(id string, n int) int { return int(xxhash.Sum64String(id) % uint64(n)) }

// floorItem is one item of a floor order: one unit of sku on node
// (an index into the batchers).
type floorItem struct {
	node int
	sku  string
}

// floorOrder places a floor order whose record lives on batchers[home],
// with the fewest writes: first a fence on every other node with an item
// (at once), then, once all are taken, the record, set only if absent and
// final at once, with the home's own item taken in the same entry. An
// order whose items are all on its home is that one entry. Items are on
// distinct nodes. (A design that writes this way decides an order by its
// record's SET NX: fences of an attempt that lost, crashed or was
// cancelled before its record are released, or come back at their
// deadline. The floor measures the success path only.) An order with
// fences takes two sequential round trips.
func floorOrder(batchers []*floorBatcher, home int, id string, items []floorItem) error {
	rec, list, fences, at := floorEntries(batchers, home, id, items)
	rec.value = "reserved" + list
	if err := floorRound(fences, at); err != nil {
		return err
	}
	return floorRound([]floorReq{rec}, []*floorBatcher{batchers[home]})
}

// floorOrderOneRound places the same order in one round trip, as a
// reserve that must answer after one round (shardis's one-round staged
// path) has to: the record, set only if absent, goes to the home at the
// same time as the fences to the other nodes, so it cannot say yet whether
// they were taken: it is written staged, and once every fence is taken a
// second write (mode "d", batched with the home's other entries) makes it
// final, so that a later confirm needs no round of its own to learn what
// the order holds. The order is answered when the round is back, the
// decision queued but not waited for (as shardis's carried commit): its
// CPU is spent all the same, its latency is not the caller's, and its
// failure fails the node's later orders until the next row's setup
// (floorBatcher.failed, reset). An order whose items are all on its
// home is one final entry, as in floorOrder.
// It is the least a one-round reservation writes on top of floorOrder:
// one more SET per order with fences, on its home.
func floorOrderOneRound(batchers []*floorBatcher, home int, id string, items []floorItem) error {
	rec, list, fences, at := floorEntries(batchers, home, id, items)
	if len(fences) == 0 {
		rec.value = "reserved" + list
		return floorRound([]floorReq{rec}, []*floorBatcher{batchers[home]})
	}
	rec.value = "staged" + list
	if err := floorRound(append(fences, rec), append(at, batchers[home])); err != nil {
		return err
	}
	return batchers[home].submit(&floorReq{mode: "d", key: rec.key, member: id, value: "reserved" + list, unwaited: true})
}

// floorEntries are a floor order's entries: its record on batchers[home]
// (taking the home's item, if any; its value is left to the caller: a
// status, then list, the items' list) and a fence on each other node with
// an item (fences[i] on at[i]).
func floorEntries(batchers []*floorBatcher, home int, id string, items []floorItem) (rec floorReq, list string, fences []floorReq, at []*floorBatcher) {
	for _, it := range items {
		list += "|" + batchers[it.node].n.Name() + ":" + it.sku + ":1"
	}
	rec = floorReq{mode: "r", key: "floor:order:" + id, member: id}
	fences = make([]floorReq, 0, len(items)+1)
	for i, it := range items {
		member := id + "." + strconv.Itoa(i)
		if it.node == home {
			rec.mode, rec.sku, rec.member = "t", it.sku, member
			continue
		}
		fences = append(fences, floorReq{mode: "t", key: "floor:part:" + member, sku: it.sku, member: member, value: "pending|" + id + "|" + it.sku + "|1"})
		at = append(at, batchers[it.node])
	}
	return rec, list, fences, at
}

// floorRound submits reqs[i] to at[i], all at once, and waits for every
// one: one round trip.
func floorRound(reqs []floorReq, at []*floorBatcher) error {
	for i := range reqs {
		if err := at[i].submit(&reqs[i]); err != nil {
			return err
		}
	}
	var err error
	for i := range reqs {
		err = errors.Join(err, at[i].wait(&reqs[i]))
	}
	return err
}

// check verifies the floor script (or the guarded floor's, its node
// stamped first: floorguard.go) on the node, from an empty node: with 2
// units, entries a, a again, b and c get offsets 1 and 2, a refusal of the
// repeated key, and a short reply; a record without stock is set once;
// the counter ends at 0 available and 2 reserved, and the redo queue and
// the pending index hold a and b.
func (f *floorBatcher) check(ctx context.Context) error {
	if err := f.load(ctx, floorHotSKU, 2); err != nil {
		return err
	}
	c := f.n.Client()
	var keys []string
	var args []any
	for _, e := range [][3]string{{"t", "a", "x"}, {"t", "a", "x"}, {"t", "b", "x"}, {"t", "c", "x"}, {"r", "e", "z"}, {"r", "e", "z"}, {"d", "e", "w"}, {"d", "f", "w"}} {
		keys = floorEntryKeys(keys, e[0], "floor:order:"+e[1], floorHotSKU)
		args = append(args, e[0], e[1], e[2])
	}
	if err := f.stamp(ctx); err != nil {
		return err
	}
	out, err := f.script.Run(ctx, c, append(slices.Clone(f.headKeys), keys...), append(slices.Clone(f.headArgs), args...)...).Int64Slice()
	if err != nil {
		return fmt.Errorf("floor check: %w", err)
	}
	if fmt.Sprint(out) != "[1 -1 2 0 1 -1 1 -1]" {
		return fmt.Errorf("floor check: replies %v, want [1 -1 2 0 1 -1 1 -1]", out)
	}
	if v, err := c.Get(ctx, "floor:order:e").Result(); err != nil || v != "w" {
		return fmt.Errorf("floor check: record e holds %q (%v), want w", v, err)
	}
	if ttl, err := c.TTL(ctx, "floor:order:e").Result(); err != nil || ttl <= 0 {
		return fmt.Errorf("floor check: record e's TTL is %v (%v), want the retention kept", ttl, err)
	}
	if n, err := c.Exists(ctx, "floor:order:f").Result(); err != nil || n != 0 {
		return fmt.Errorf("floor check: a decision made record f (%d, %v)", n, err)
	}
	st, err := c.HMGet(ctx, floorStock(floorHotSKU), "available", "reserved").Result()
	if err != nil || fmt.Sprint(st) != "[0 2]" {
		return fmt.Errorf("floor check: stock %v (%v), want [0 2]", st, err)
	}
	for _, k := range []string{floorRedo(floorHotSKU), floorPending} {
		m, err := c.ZRange(ctx, k, 0, -1).Result()
		if err != nil || fmt.Sprint(m) != "[a b]" {
			return fmt.Errorf("floor check: %s holds %v (%v), want [a b]", k, m, err)
		}
	}
	return nil
}
