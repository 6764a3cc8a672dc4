package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Writes racing fills. A fill's loader may read the row before a writer
// changes it and calls Set or Invalidate; if the fill then stored what it
// read, the old value (or "not found") would be served for a whole TTL
// after the writer did everything asked of it. So every Set and
// Invalidate leaves, on each copy's node, a fresh random version under
// <prefix>ver:<key>, written in one script with its SET or DEL; a fill
// reads the versions (with the copies, after its gate)
// before its loader runs and stores a copy only if that copy's version is
// still the one it read (compared and set in one script), so a write that
// came in between wins. A version lives
// verLife; a fill that took longer than verLife-verMargin (when the
// version it read may have expired and come back as "none") does not
// store at all.

const verMargin = time.Minute

func (c *Cache) verKey(key string) string { return c.prefix + "ver:" + key }

// verLife is how long a write's version stays on a node.
func (c *Cache) verLife() time.Duration { return c.opts.FillLease + 2*verMargin }

// markScript records a write. KEYS: 1 copy, 2 version. ARGV: 1 version,
// 2 its life in ms, then for a Set 3 the encoded value, 4 its TTL in ms
// and 5 "XX" to store it only if the copy exists (for an Invalidate
// nothing: the copy is deleted).
//
// On a node at maxmemory under noeviction Redis refuses a script's
// commands that take memory (OOM) until the script's first write, and
// lets everything after that write through (a script that wrote runs to
// its end). So an Invalidate deletes first: DEL takes no memory, and the
// version write after it gets through, so a full node's stale copy is
// deleted rather than served on. The version must be written too: a fill
// racing the write read the version before its loader read the row, and
// without a new one it would store that older value as soon as the node
// has room again (which the DEL itself may give it), not be refused by
// the same OOM. A Set first writes the version with pcall: refused with
// OOM (nothing is written yet), it does what an Invalidate does instead
// of storing the value, which would take the memory the node refuses; the
// copy then holds nothing older than the Set, and a Get fills it once the
// node has room (its gate and store take memory too). What this costs a full node is one small version key per key
// written, living verLife. Any other refusal (NOPERM …) is the script's
// error reply, with nothing written.
var markScript = redis.NewScript(`
if #ARGV >= 4 then
  local v = redis.pcall('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  if type(v) == 'table' and v.err then
    if string.sub(v.err, 1, 4) ~= 'OOM ' then return v end
  elseif ARGV[5] == 'XX' then
    return redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4], 'XX')
  else
    return redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  end
end
local n = redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return n
`)

// fillScript stores a filled copy unless a write came since the fill read
// the version. KEYS: 1 copy, 2 version. ARGV: 1 encoded value, 2 TTL in
// ms, 3 the version read ("" for none). Returns 1 stored, 0 refused.
var fillScript = redis.NewScript(`
if (redis.call('GET', KEYS[2]) or '') ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// mark runs a Set (enc != nil) or an Invalidate (enc nil) on every copy
// up to MaxReplicas, each with a new version: a Set stores enc in the
// copies Get reads now (replicas) and replaces the others where they
// exist (SET XX: a copy beyond the answer is not created, and one an
// earlier, larger answer filled stays warm for when it grows again), an
// Invalidate deletes them all. Every copy is reached whatever Replicas
// answers now, so none is read stale once the answer grows again. The
// copies' nodes are written concurrently. A copy not written is an error
// (failed) naming the key, the node and the copy, which may keep its
// older value until its TTL: one wrapping router.ErrUnavailable when its
// node was unusable or could not serve the write, the error reply a
// usable node gave on purpose (NOPERM …), or ctx's error when the caller
// gave up. A node at maxmemory (OOM) is no error: the copy is deleted
// there (markScript).
func (c *Cache) mark(ctx context.Context, key string, enc []byte) error {
	nodes, names := c.copiesUpTo(key, c.opts.MaxReplicas)
	keep := 0 // copies 0..keep-1 get the value
	if enc != nil {
		keep = c.replicas(key)
	}
	ver := strconv.FormatUint(rand.Uint64(), 36)
	life := c.verLife()
	errs := make([]error, len(nodes))
	write := func(i int) {
		n := nodes[i]
		if !n.Usable() {
			errs[i] = fmt.Errorf("cache: key %q: node %s: %w: copy %d not written", key, n.Name(), router.ErrUnavailable, i)
			return
		}
		args := []any{ver, ms(life)}
		switch {
		case enc != nil && i < keep:
			args = append(args, enc, ms(c.jittered(enc)))
		case enc != nil:
			args = append(args, enc, ms(c.jittered(enc)), "XX")
		}
		if err := markScript.Run(ctx, n.Client(), []string{names[i], c.verKey(key)}, args...).Err(); err != nil && err != redis.Nil {
			errs[i] = fmt.Errorf("cache: key %q: copy %d not written: %w", key, i, failed(ctx, n, err))
		}
	}
	each(len(nodes), write)
	return errors.Join(errs...)
}

// each runs f(0) .. f(n-1), concurrently when n > 1 (on the nodes of a
// key's copies: one round trip's wait for them all), and returns when all
// have.
func each(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}

// fillVersions is what a fill read of its copies' versions before the
// loader ran: the nodes and names of the copies, each copy's version (""
// none) and whether it could be read (a copy whose version is unknown is
// not stored), and when.
type fillVersions struct {
	nodes []*node.Node
	names []string
	vers  []string
	known []bool
	at    time.Time
}

// versions reads, on each usable node of key's copies (concurrently),
// the copy, its version and its remaining TTL in one round trip: found,
// with a copy's enc, when a copy is there (another instance filled the
// key between this one's miss and its gate, or the key's copies grew
// since it was filled: see refill), else the versions storeFill compares
// with, read before the loader reads the row.
func (c *Cache) versions(ctx context.Context, key string) (enc []byte, found bool, fv fillVersions) {
	nodes, names := c.copies(key)
	fv = fillVersions{nodes: nodes, names: names, vers: make([]string, len(nodes)), known: make([]bool, len(nodes)), at: time.Now()}
	reads := make([]copyRead, len(nodes))
	each(len(nodes), func(i int) {
		if nodes[i].Usable() {
			reads[i] = readVersion(ctx, nodes[i], names[i], c.verKey(key))
		}
	})
	src := -1
	for i, r := range reads {
		if !r.ok {
			continue // unknown: not stored there
		}
		fv.vers[i], fv.known[i] = r.ver, true
		if r.found && src < 0 {
			src = i
		}
	}
	if src < 0 {
		return nil, false, fv
	}
	c.stats.nodeReads(nodes[src].Name())
	c.refill(ctx, key, reads, src, fv)
	return reads[src].enc, true, fv
}

// copyRead is what readVersion read of one copy.
type copyRead struct {
	ok    bool          // read at all
	found bool          // the copy holds a value (or a not-found marker)
	enc   []byte        // the copy, when found
	ver   string        // the key's version on the copy's node ("" none)
	left  time.Duration // the copy's remaining TTL, when found (0: none or unknown)
}

// readVersionScript reads a copy, the key's version on its node and the
// copy's remaining TTL. KEYS: 1 copy, 2 version. A key of another type
// reads as none, as MGET reads it, and so does (readVersion) a string not
// in the cache's encoding: such a copy is a miss the fill overwrites. One
// script call rides the node's shared pipeline (an explicit pipeline
// takes a connection of its own: a third fewer Gets/s).
var readVersionScript = redis.NewScript(`
local v, ver = redis.pcall('GET', KEYS[1]), redis.pcall('GET', KEYS[2])
if type(v) == 'table' then v = false end
if type(ver) == 'table' then ver = false end
return {v, ver, redis.call('PTTL', KEYS[1])}
`)

// readVersion reads copy k on n with the version vk (readVersionScript).
func readVersion(ctx context.Context, n *node.Node, k, vk string) copyRead {
	v, err := readVersionScript.Run(ctx, n.Client(), []string{k, vk}).Slice()
	if err != nil || len(v) != 3 {
		return copyRead{}
	}
	r := copyRead{ok: true}
	r.ver, _ = v[1].(string) // nil: none
	if b, isStr := v[0].(string); isStr && valid([]byte(b)) {
		r.found, r.enc = true, []byte(b)
		if ms, _ := v[2].(int64); ms > 0 {
			r.left = time.Duration(ms) * time.Millisecond
		}
	}
	return r
}

// refill copies the value found in copy src into the key's other copies
// of its answer now that are missing (a key filled while Replicas
// answered fewer copies, or one whose copy on a node expired or was
// evicted first), so the Gets that read them stop missing: each would go
// through the gate, and the key is hot. A copy is refilled only with the
// found copy's remaining TTL (it never outlives the value it copies), and
// only when its version is the found copy's (compared and set on its node
// with fillScript): a write carries one version to all its copies, so
// equal versions mean no write reached one copy and not the other, and
// the found value is as new as any write the missing copy saw. A write
// that comes after the comparison finds the refilled copy and replaces or
// deletes it. Failures are ignored: the copy stays missing, as it was.
func (c *Cache) refill(ctx context.Context, key string, reads []copyRead, src int, fv fillVersions) {
	from := reads[src]
	if from.left <= 0 {
		return
	}
	each(len(reads), func(i int) {
		r := reads[i]
		if i == src || !r.ok || r.found || r.ver != from.ver || !fv.nodes[i].Usable() {
			return
		}
		_ = fillScript.Run(ctx, fv.nodes[i].Client(), []string{fv.names[i], c.verKey(key)}, from.enc, ms(from.left), r.ver).Err()
	})
}

// storeFill stores a filled value in every copy whose version is still
// the one fv read, each with its own jittered TTL. It returns the
// shortest TTL it drew (what an L1 copy of the value may live at most)
// and whether every copy it could try was stored: false when a write came
// in between (the value is then not kept anywhere: not in L1 either), a
// store failed (its error is returned too), or the fill took too long to
// tell. A copy on an unusable node is not tried. Each store the version
// check accepted confirms the value to run for the Gets that joined the
// fill before it was sent (flightGroup's doc): a write that returned
// before they joined changed that copy's version first. A store refused,
// failed or not tried confirms nothing, so those Gets run the fill again
// unless an earlier step confirmed it for them.
func (c *Cache) storeFill(ctx context.Context, key string, enc []byte, fv fillVersions, run flightRun) (_ time.Duration, stored bool, _ error) {
	if time.Since(fv.at) > c.verLife()-verMargin {
		return 0, false, nil
	}
	var errs []error
	shortest := time.Duration(math.MaxInt64)
	stored = true
	for i, n := range fv.nodes {
		ttl := c.jittered(enc)
		shortest = min(shortest, ttl)
		if !n.Usable() { // skipped, as a copy whose node is down always was
			continue
		}
		if !fv.known[i] { // its version could not be read: not stored
			stored = false
			continue
		}
		mark := run.mark()
		ok, err := fillScript.Run(ctx, n.Client(), []string{fv.names[i], c.verKey(key)}, enc, ms(ttl), fv.vers[i]).Int()
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.Name(), err))
			stored = false
			continue
		}
		if ok == 1 {
			run.confirm(mark)
		}
		stored = stored && ok == 1
	}
	return shortest, stored, errors.Join(errs...)
}

// ms is d in whole milliseconds for PX, at least 1.
func ms(d time.Duration) int64 { return max(1, d.Milliseconds()) }
