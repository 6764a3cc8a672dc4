package inventory

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
)

// Group commit: concurrent calls of one script on one node share one
// script call.
//
// A grouped script (luaScript.group) is always sent in its grouped form:
// the prelude checks the node's stamp once, then the body runs once per
// call, each call reading its own keys and arguments as a lone call sees
// them (the stamp and the header first, then the call's own: read in
// place, luaflat.go), in the order the calls were queued. Every call's reply (or error reply) comes
// back in its own slot, and the stamp's write sequence advances once for
// the whole script call when any call succeeded. A write script's group
// also carries the one-round commits waiting for its node (carry.go,
// which holds their rule), applied before its calls.
//
// Why this keeps every guarantee: Redis runs a script atomically, so a
// group is the same as its calls run one after the other with nothing in
// between, which is an order they could have run in anyway. Each call
// still validates before its first write (an error reply means that call
// changed nothing; a command that raises inside a call is caught, with
// that call's earlier writes kept, exactly as Redis keeps them for a lone
// script that raises); later calls of the group see the node as a lone
// call after it would. A group that does not answer (timeout, connection
// lost) leaves every call's outcome unknown, as it would for each call
// alone, and each caller resolves it as before (a retry of the order id
// finds the record). A refused stamp (identity, topology epoch) refuses
// every call, which is what each would have met alone: a group's calls all
// carry the same epoch token. The calls of one script call also share
// work the prelude offers (lua.go): a sorted set's type is checked once, a
// stock hash and a redo offsets field are read once, the calls change
// copies of them, and each changed one is written once after the last
// call, together with the calls' ZADDs to the pending index and the redo
// queues (one per key). That is exact because nothing else runs while the
// script does, the calls read and write those keys only through the
// helpers, and none of them reads those sets but for their type.
//
// Batching: a call that finds fewer than groupInFlight groups under way on
// its node, and no call waiting there, is sent at once by its own
// goroutine (a lone caller waits for nobody), or, when its caller only
// began it (start, round.go: a round's calls to several nodes), by a
// goroutine of its own while the caller goes on. Calls that arrive while
// groupInFlight groups are under way queue, one queue per script; when a
// group returns, the goroutine that sent it takes the next script's queue
// that has calls, in turn (up to inventory.group_commit calls with one
// token), as the next group (batchq.go), or, when it is the caller's,
// hands that to a goroutine of its own. Those goroutines are the
// inventory's workers (workers.go), reused from one send to the next.
// The slots are the node's, shared by its scripts: an order's stage, take
// and commit on one node, and other orders' reserves, gather in fewer,
// larger script calls, each of whose
// fixed cost (the stamp check, the prelude, the shared writes, the call)
// its calls share. A caller
// whose context ends while its call is queued takes it off the queue
// (nothing was sent); one whose context ends while its group is under way
// stops waiting and reports an unknown outcome, as for a timed-out script.
// The group itself runs to its end without the caller's cancellation,
// bounded by the node client's read and write timeouts, so one caller
// giving up never cuts the connection under the others.

// Contexts: what the calls of a run share.
//
// A call's last keys and arguments may be its context (a script's
// context rule, luaScript.context, says how many for each layout): the
// ones the usual calls of a hot SKU share, such as its counter, its redo
// queue, the order's TTL and its quantity. A group sends a context once
// for a run of calls (consecutive calls of one shape whose contexts are
// equal, value by value), after the run's last call's own keys and
// arguments; the body reads it as CKEYS and CARGV (luaflat.go), the same
// values for every call of the run. (Last, so that a call's first key
// still names what it is about: the injected faults read it.) Every key
// or argument a group sends costs the node about 800 instructions
// (parsing it, a Lua string that hashes every byte, its garbage), so the
// usual take and the usual local reserve of a hot SKU send 3 of them per
// order where they sent 7 and 8. It changes nothing a call reads: a call
// reads its context's values whichever call of its run brought them.

// groupInFlight is how many groups may be under way on one node at once,
// whichever their scripts: while one runs, the next fills.
//
// One slot makes larger groups (0.19 script calls per 3-item order, against
// 0.26 with two) but no cheaper orders: in four alternating runs of the
// bench's inventory section (2026-12-06; -quick -rounds 3 -round 5s) the
// floor ratios moved with the machine, not with the setting (3-item 0.794
// and 0.894 with one slot, 0.838 and 0.757 with two), and a lone caller's
// 3-item reserve took longer with one (431 to 438 µs against 353 to 377).
// On nodes a network away from the caller a second slot would also keep
// the node busy during the round trip, where one leaves it idle.
const groupInFlight = 2

// A grouped script's source ends with bodyEnd (closing the body's
// function, lualib.go), then, in a write script, groupCarry, then
// groupEpilogue and groupEpilogueRead or groupEpilogueWrite.
const bodyEnd = "\nend\n"

// groupEpilogue runs the body once per call of the group (see the file
// comment) and replies {seq, replies}, the calls' replies flat in one list
// (the file says how; replyReader.replies reads them back one per call,
// each as Redis answers a lone call). ARGV[4] holds the calls' key and
// argument counts, in runs of calls of one shape (appendGroupCounts),
// then come the calls' keys (after KEYS[1]) and arguments, call after
// call.
var groupEpilogue = luaFile("epilogue_group.lua")

// groupCarry applies a write group's carried commits (carry.go) before
// its calls: their order keys follow the calls' keys, their tokens and
// parts lists the calls' arguments, and their count is the last argument
// (0 when none).
var groupCarry = luaFile("epilogue_group_carry.lua")

// groupEpilogueRead and groupEpilogueWrite end groupEpilogue: a write
// script's group advances the stamp's seq once if any of its calls did not
// fail or any carried commit changed its record (lua.go), and replies
// {seq, replies, carried}, carried a string of one byte per carried
// commit, '1' or '0' ("" for none); a read script's replies the seq it
// read.
var (
	groupEpilogueRead  = luaFile("epilogue_group_read.lua")
	groupEpilogueWrite = luaFile("epilogue_group_write.lua")
)

// stampKeyArg and partKeyPrefixArg are stampKey and partKeyPrefix as
// script arguments, boxed once.
var stampKeyArg, partKeyPrefixArg any = stampKey, partKeyPrefix

// groupCall is one call of a grouped script, queued or under way.
type groupCall struct {
	keys []string // the call's own keys (after the stamp); not changed once queued
	args []any    // the call's own arguments (after the header)
	// the last ck keys and ca arguments are its context (see Contexts
	// above)
	ck, ca int
	// joined: sendGroup put the call in the run of the call before it
	// (set by the goroutine that sends the group)
	joined bool
	done   chan struct{}
	// Set before done is closed.
	reply any
	seq   int64
	err   error
}

// groups holds the queues, one per node (a line per grouped script in
// it), made on first use (a bounded set: the inventory's nodes). The zero
// value is ready.
type groups struct {
	m sync.Map // *node.Node → *groupQueue
}

// groupQueue is the grouped calls of one node, a line per script.
type groupQueue = batchQueue[*luaScript, *groupCall]

func (g *groups) queue(n *node.Node) *groupQueue {
	if q, ok := g.m.Load(n); ok {
		return q.(*groupQueue)
	}
	q, _ := g.m.LoadOrStore(n, &groupQueue{})
	return q.(*groupQueue)
}

// sameContext reports whether calls a and b have equal contexts, value by
// value (argEqual).
func sameContext(a, b *groupCall) bool {
	if a.ck != b.ck || a.ca != b.ca {
		return false
	}
	ak, bk := a.keys[len(a.keys)-a.ck:], b.keys[len(b.keys)-b.ck:]
	for i := range ak {
		if ak[i] != bk[i] {
			return false
		}
	}
	aa, ba := a.args[len(a.args)-a.ca:], b.args[len(b.args)-b.ca:]
	for i := range aa {
		if !argEqual(aa[i], ba[i]) {
			return false
		}
	}
	return true
}

// argEqual reports whether arguments a and b are sure to be written as
// the same bytes: both strings (or pointers to strings, as argBox boxes
// them) or both integers (or pointers to them), of one value. Any other
// pair is not sure, and is reported unequal: the two are sent each.
func argEqual(a, b any) bool {
	if x, ok := argAs[string](a); ok {
		y, ok := argAs[string](b)
		return ok && x == y
	}
	if x, ok := argAs[int64](a); ok {
		y, ok := argAs[int64](b)
		return ok && x == y
	}
	return false
}

// argAs is v's value when v is a T or a pointer to one (argBox boxes its
// strings and integers as pointers).
func argAs[T string | int64](v any) (T, bool) {
	switch x := v.(type) {
	case T:
		return x, true
	case *T:
		return *x, true
	}
	var zero T
	return zero, false
}

// sendOwn sends c, which took a free slot of q (enterGroup), as a group of
// one, then sends what queued meanwhile (drain): on this goroutine when
// background (a goroutine of its own, which nobody waits for), else on
// one of the workers (workers.go), so that c's caller has its reply at
// once.
func (inv *Inventory) sendOwn(ctx context.Context, n *node.Node, q *groupQueue, s *luaScript, token string, c *groupCall, background bool) {
	send := func(ctx context.Context, s *luaScript, token string, calls []*groupCall) {
		inv.sendGroup(ctx, n, s, token, calls)
	}
	send(ctx, s, token, []*groupCall{c})
	spawn := inv.workers.run
	if background {
		ctx, spawn = context.WithoutCancel(ctx), nil
	}
	q.drain(ctx, inv.opts.GroupCommit, spawn, send)
}

// awaitGroup waits for c's group to answer it. A caller whose context ends
// first takes c off the queue if it is still there (nothing was sent);
// once c's group is under way the outcome is unknown.
func awaitGroup(ctx context.Context, q *groupQueue, s *luaScript, c *groupCall) (any, int64, error) {
	select {
	case <-c.done:
		return c.reply, c.seq, c.err
	case <-ctx.Done():
	}
	if q.leave(s, c) { // not sent
		return nil, 0, ctx.Err()
	}
	select {
	case <-c.done: // answered meanwhile
		return c.reply, c.seq, c.err
	default:
		return nil, 0, fmt.Errorf("%w (its group of %s scripts was under way: outcome unknown)", ctx.Err(), s.name)
	}
}

// sendGroup runs calls as one script call of s on n and answers each. A
// write script's group also carries up to group_commit of n's buffered
// commits made under token (carry.go), after the calls' keys and
// arguments, their count last.
func (inv *Inventory) sendGroup(ctx context.Context, n *node.Node, s *luaScript, token string, calls []*groupCall) {
	var carried []carriedCommit
	if s.write {
		carried = inv.takeCarried(n, token, max(inv.opts.GroupCommit, 1))
	}
	nk, na := 1+len(carried), 4+3*len(carried)+1
	h := &groupHead{name: n.Name(), token: token}
	counts := h.arr[:0]
	for i, c := range calls {
		same := i > 0 && sameContext(calls[i-1], c)
		counts, c.joined = appendGroupCounts(counts, len(c.keys)-c.ck, len(c.args)-c.ca, c.ck, c.ca, same)
		nk += len(c.keys)
		na += len(c.args)
		if c.joined {
			nk, na = nk-c.ck, na-c.ca
		}
	}
	h.counts = frozen(counts) // counts is not written again
	// the command line: the keys (the stamp, the calls' — a run's
	// context once, after its last call's own —, the carried commits'
	// order keys), then the arguments (the header, the calls' counts, the
	// calls' as their keys, the carried commits' and their count)
	a := s.evalArgs(nk, na)
	a = append(a, stampKeyArg)
	for i, c := range calls {
		keys, _ := c.sent(runEnds(calls, i))
		a = a.keys(keys)
	}
	for _, c := range carried {
		a = append(a, orderKey(c.orderID))
	}
	a = append(a, &h.name, &h.token, partKeyPrefixArg, &h.counts)
	for i, c := range calls {
		_, args := c.sent(runEnds(calls, i))
		a = append(a, args...)
	}
	if s.write {
		for j := range carried { // pointers, as evalArgs.keys sends keys
			a = append(a, &carried[j].staged, &carried[j].prefix, &carried[j].created)
		}
		a = append(a, len(carried))
	}
	inv.stats.groupScripts.Add(1)
	inv.stats.groupCalls.Add(int64(len(calls)))
	seq, replies, applied, err := inv.runScript(ctx, n, s, a, len(calls), len(carried))
	if err == nil && len(replies) != len(calls) {
		err = &ReplyError{Node: n.Name(), Script: s.name, At: "reply[1]", Want: fmt.Sprintf("a list of %d replies (one per call of the group)", len(calls)), Got: replies}
	}
	if s.write {
		inv.carriedDone(carried, applied, err)
	}
	for i, c := range calls {
		c.seq, c.err = seq, err
		if err == nil {
			if rerr, ok := replies[i].(redis.Error); ok {
				c.err = rerr
			} else {
				c.reply = replies[i]
			}
		}
		close(c.done)
	}
}

// sent is the keys and arguments c puts on its group's command line: all
// of them when it ends its run (ends: it sends the run's context), else
// its own, without the context.
func (c *groupCall) sent(ends bool) ([]string, []any) {
	if ends {
		return c.keys, c.args
	}
	return c.keys[:len(c.keys)-c.ck], c.args[:len(c.args)-c.ca]
}

// runEnds reports whether calls[i] is the last call of its run (the next
// one did not join it: sendGroup), which sends the run's context.
func runEnds(calls []*groupCall, i int) bool {
	return i+1 == len(calls) || !calls[i+1].joined
}

// groupHead holds the header arguments of one group's script call, so
// that they are one allocation rather than one each (go-redis writes a
// *string as its value): the node's name, the epoch token, and the calls'
// counts (in arr when they fit: up to 8 runs).
type groupHead struct {
	name, token, counts string
	arr                 [8 * groupRunSize]byte
}

// groupRunSize is the bytes a group's counts argument holds per run of
// calls of one shape and one context: the calls' own key count (after
// their context's), their own argument count, and how many calls in a
// row have them, three bytes each, high byte first, then the context's
// key count and argument count, a byte each (epilogue_group.lua reads
// them with string.byte once per run: no number to parse, where a count
// per argument cost the node a strtod and an argument's own cost).
const groupRunSize = 11

// maxGroupCount is the most keys, or arguments, one call of a group may
// have, and the most calls one run counts: what three bytes hold.
// maxContext is the most keys, or arguments, a context may have: what a
// byte holds.
const (
	maxGroupCount = 1<<24 - 1
	maxContext    = 1<<8 - 1
)

// appendGroupCounts adds to b (the counts of the calls before it) a call
// of nk keys and na arguments of its own and a context of ck keys and ca
// arguments; same says that its context equals the call's before it. It
// joins the last run when it has the same counts, same holds and the run
// has room, else starts a new run of one, which sends its context again;
// joined reports which. Counts over maxGroupCount (more than Redis takes
// in one command) or maxContext panic: the callers build calls of at most
// MaxItems items, contexts of a few.
func appendGroupCounts(b []byte, nk, na, ck, ca int, same bool) (_ []byte, joined bool) {
	if nk > maxGroupCount || na > maxGroupCount || nk < 0 || na < 0 || ck > maxContext || ca > maxContext || ck < 0 || ca < 0 {
		panic(fmt.Sprintf("inventory: a grouped call of %d keys and %d arguments, and a context of %d and %d", nk, na, ck, ca))
	}
	run := [groupRunSize]byte{byte(nk >> 16), byte(nk >> 8), byte(nk), byte(na >> 16), byte(na >> 8), byte(na), 0, 0, 1, byte(ck), byte(ca)}
	if l := len(b) - groupRunSize; same && l >= 0 && [6]byte(b[l:l+6]) == [6]byte(run[:6]) && [2]byte(b[l+9:l+11]) == [2]byte(run[9:]) {
		if c := int(b[l+6])<<16 | int(b[l+7])<<8 | int(b[l+8]); c < maxGroupCount {
			c++
			b[l+6], b[l+7], b[l+8] = byte(c>>16), byte(c>>8), byte(c)
			return b, true
		}
	}
	return append(b, run[:]...), false
}

// runScript sends s (its command line a, header included) and returns the
// write sequence and the group's replies (one per call, each as Redis
// would have answered a lone call: flat in the envelope, see
// epilogue_group.lua and replyReader.replies) from the {seq, replies} envelope
// of a read script, or from the {seq, replies, carried} envelope of a
// write script, whose carried string (one byte '1' or '0' per carried
// commit, ncarry of them) it returns as applied.
func (inv *Inventory) runScript(ctx context.Context, n *node.Node, s *luaScript, a evalArgs, ncalls, ncarry int) (int64, []any, []bool, error) {
	raw, err := inv.call(ctx, n, s, a)
	if err != nil {
		return 0, nil, nil, err
	}
	r := newReplyReader(n.Name(), s.name)
	size := 2
	if s.write {
		size = 3
	}
	env := r.list(raw, size)
	seq := r.int(env, 0)
	if r.err != nil {
		return 0, nil, nil, r.err
	}
	replies := r.replies(env, 1, ncalls)
	var applied []bool
	if s.write {
		applied = r.flagString(env, 2, ncarry)
	}
	if r.err != nil {
		return 0, nil, nil, r.err
	}
	return seq, replies, applied, nil
}
