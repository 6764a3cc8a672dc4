package inventory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/shardis/shardis/node"
)

// refuseShort's reads in batches, one script call per batch on a node:
// the rule is soldout.go's ("Reads in batches").

// peekInFlight is how many batches of one node may be under way at once:
// while one runs, the next fills.
const peekInFlight = 1

// peekName names peekScript in errors and to the injected faults.
const peekName = "peek"

// peekScript reads, writing nothing, what refuseShort needs on one node.
// It runs without the prelude, outside run (sendPeeks sends it; the rule
// is soldout.go's "Reads in batches"): lua/lib_identity.lua's check of the
// node's name, then lua/peek.lua's of the caller's epoch token, both
// replying as the prelude does (SHARDIS_IDENTITY, SHARDIS_EPOCH) before
// anything else is read; between them lua/order_head.lua defines
// order_head, with which it reads each order record's status from its
// first bytes (either layout, orderrec.go).
//
// KEYS: 1 the stamp, 2 … 1+ARGV[3] order keys, then distinct stock hashes,
// then the last ARGV[4] keys: distinct per-user quota counters. ARGV: 1
// the node's configured name, 2 the caller's epoch token, 3 the number of
// order keys, 4 the number of quota counters. Replies a flat list: per
// order key its status ("" when there is none, or when it is marked moved,
// as orderScript treats it), then per stock hash its available, reserved
// and limit fields (the field's string, or the integer 0 when the field is
// absent) and 1 or 0 for whether its loaded field exists, then per quota
// counter its value (the string, "WRONGTYPE" for a key of another type, or
// the integer 0 when absent).
var peekScript = newBareScript(peekName, memRead.shebang()+identityLua+orderHeadLua+luaFile("peek.lua"))

// peekReq is one order's reads on one node, queued or under way.
type peekReq struct {
	record string   // the order key, or "" (no record read on this node)
	stocks []string // stock hashes
	quotas []string // per-user quota counters
	done   chan struct{}
	// Set before done is closed.
	status string      // the record's status ("" none)
	vals   []stockVals // per stocks
	held   []int64     // per quotas: the units the user holds
	err    error       // the batch's: nothing above is set
}

// stockVals is one stock hash as a batch read it.
type stockVals struct {
	avail, held, limit int64
	known              bool  // its loaded field exists
	err                error // a counter that is not an integer
}

// peekQueue is the batches of one node (one line: peekLine).
type peekQueue = batchQueue[struct{}, *peekReq]

// peekLine is the one line of a peekQueue.
var peekLine = struct{}{}

// peekQueues holds a queue per node, made on first use. The zero value is
// ready.
type peekQueues struct{ m sync.Map } // *node.Node → *peekQueue

func (p *peekQueues) on(n *node.Node) *peekQueue {
	if q, ok := p.m.Load(n); ok {
		return q.(*peekQueue)
	}
	q, _ := p.m.LoadOrStore(n, &peekQueue{})
	return q.(*peekQueue)
}

// peekOn runs r's reads on n at the epoch token (through the injected
// faults, if any) and fills r in, or returns why not (peekErr: mapped by
// nodeErr; the context's error when it ended first).
func (inv *Inventory) peekOn(ctx context.Context, n *node.Node, token string, r *peekReq) error {
	send := func() (any, error) { return nil, inv.queuePeek(ctx, n, token, r) }
	var err error
	if inv.opts.Faults == nil {
		_, err = send()
	} else {
		keys := make([]string, 0, 1+len(r.stocks)+len(r.quotas))
		if r.record != "" {
			keys = append(keys, r.record)
		}
		keys = append(keys, r.stocks...)
		keys = append(keys, r.quotas...)
		_, err = inv.opts.Faults.Call(ctx, ScriptCall{Node: n.Name(), Script: peekName, Keys: keys}, send)
	}
	return inv.peekErr(n, err)
}

// peekErr maps the error of reads on n by nodeErr (nil stays nil); a stamp
// refused with SHARDIS_EPOCH marks the view stale.
func (inv *Inventory) peekErr(n *node.Node, err error) error {
	if err != nil {
		err = nodeErr(n, err)
		if errors.Is(err, ErrTopology) {
			inv.staleTopology()
		}
	}
	return err
}

// queuePeek sends r alone when fewer than peekInFlight batches of n are
// under way and none waits, else queues it for the next batch, and waits
// for its reply.
func (inv *Inventory) queuePeek(ctx context.Context, n *node.Node, token string, r *peekReq) error {
	if inv.enqueuePeek(n, token, r) {
		return inv.waitPeek(ctx, n, r)
	}
	return inv.sendOwnPeek(ctx, n, token, r)
}

// enqueuePeek queues r for n's next batch and reports true when a batch
// of n must come first (peekInFlight under way, or reads waiting; with
// group commit off, never), and otherwise takes a batch's slot for r and
// reports false: the caller then calls sendOwnPeek.
func (inv *Inventory) enqueuePeek(n *node.Node, token string, r *peekReq) bool {
	r.done = make(chan struct{})
	limit := peekInFlight
	if inv.opts.GroupCommit <= 1 {
		limit = math.MaxInt
	}
	return !inv.peeks.on(n).enter(peekLine, r, token, limit)
}

// sendOwnPeek sends r alone after enqueuePeek gave it a batch's slot, then
// sends what queued meanwhile (batchQueue.drain).
func (inv *Inventory) sendOwnPeek(ctx context.Context, n *node.Node, token string, r *peekReq) error {
	send := func(ctx context.Context, _ struct{}, token string, batch []*peekReq) {
		inv.sendPeeks(ctx, n, token, batch)
	}
	send(ctx, peekLine, token, []*peekReq{r})
	inv.peeks.on(n).drain(ctx, inv.opts.GroupCommit, inv.workers.run, send)
	return r.err
}

// waitPeek waits for queued r's reply. A read whose context ends while it
// is queued is taken off the queue (nothing was sent); one whose batch is
// under way is left to it (a read: unanswered, it decides nothing).
func (inv *Inventory) waitPeek(ctx context.Context, n *node.Node, r *peekReq) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
	}
	inv.peeks.on(n).leave(peekLine, r)
	return ctx.Err()
}

// sendPeeks reads the batch's records and distinct stock hashes in one
// call of peekScript on n and answers every read of it.
func (inv *Inventory) sendPeeks(ctx context.Context, n *node.Node, token string, batch []*peekReq) {
	keys := make([]string, 1, 1+2*len(batch))
	keys[0] = stampKey
	for _, r := range batch {
		if r.record != "" {
			keys = append(keys, r.record)
		}
	}
	nr := len(keys) - 1
	var at, qt stockIndex
	for _, r := range batch {
		for _, k := range r.stocks {
			at.add(k)
		}
		for _, k := range r.quotas {
			qt.add(k)
		}
	}
	keys = append(keys, at.keys...)
	keys = append(keys, qt.keys...)
	inv.stats.peekScripts.Add(1)
	inv.stats.peekReads.Add(int64(len(batch)))
	raw, err := peekScript.Run(ctx, n.Client(), keys, n.Name(), token, nr, len(qt.keys)).Result()
	var statuses []any
	var stocks []stockVals
	var quotas []quotaVal
	if err == nil {
		statuses, stocks, quotas, err = readPeeks(n.Name(), raw, nr, at.keys, qt.keys)
	}
	ri := 0
	for _, r := range batch {
		if r.err = err; err == nil {
			if r.record != "" {
				r.status = statuses[ri].(string) // readPeeks checked it
				ri++
			}
			if len(r.quotas) > 0 {
				r.held = make([]int64, len(r.quotas))
				for j, k := range r.quotas {
					q := quotas[qt.find(k)]
					if q.err != nil {
						r.err = q.err
						break
					}
					r.held[j] = q.held
				}
			}
			if len(r.stocks) == 1 { // shared, read only
				i := at.find(r.stocks[0])
				r.vals = stocks[i : i+1 : i+1]
			} else {
				r.vals = make([]stockVals, len(r.stocks))
				for j, k := range r.stocks {
					r.vals[j] = stocks[at.find(k)]
				}
			}
		}
		close(r.done)
	}
}

// stockIndex is a batch's distinct stock hashes in the order added: found
// by a scan while they are few (a storm's batches read one or two), by a
// map past stockIndexScan.
type stockIndex struct {
	keys []string
	m    map[string]int
}

const stockIndexScan = 16

// add appends k unless it is there.
func (x *stockIndex) add(k string) {
	if x.find(k) >= 0 {
		return
	}
	x.keys = append(x.keys, k)
	switch {
	case x.m != nil:
		x.m[k] = len(x.keys) - 1
	case len(x.keys) > stockIndexScan:
		x.m = make(map[string]int, 2*len(x.keys))
		for i, y := range x.keys {
			x.m[y] = i
		}
	}
}

// find returns the index of k, or -1.
func (x *stockIndex) find(k string) int {
	if x.m != nil {
		if i, ok := x.m[k]; ok {
			return i
		}
		return -1
	}
	for i, y := range x.keys {
		if y == k {
			return i
		}
	}
	return -1
}

// quotaVal is one quota counter as a batch read it.
type quotaVal struct {
	held int64
	err  error // a counter that is not an integer
}

// readPeeks reads peekScript's reply strictly: nr statuses, then the stock
// hashes named by keys, four fields each, then the quota counters named by
// qkeys, one value each.
func readPeeks(nodeName string, raw any, nr int, keys, qkeys []string) ([]any, []stockVals, []quotaVal, error) {
	ns := len(keys)
	rd := newReplyReader(nodeName, peekName)
	t := rd.list(raw, nr+4*ns+len(qkeys))
	for i := range nr {
		rd.str(t, i)
	}
	if rd.err != nil {
		return nil, nil, nil, rd.err
	}
	qs := make([]quotaVal, len(qkeys))
	for j, k := range qkeys {
		qs[j].held, qs[j].err = peekCounter(nodeName, k, "value", t[nr+4*ns+j])
	}
	out := make([]stockVals, ns)
	for j := range ns {
		f := t[nr+4*j : nr+4*j+4]
		v := &out[j]
		v.avail, v.err = peekCounter(nodeName, keys[j], "available", f[0])
		if v.err == nil {
			v.held, v.err = peekCounter(nodeName, keys[j], "reserved", f[1])
		}
		if v.err == nil {
			v.limit, v.err = peekCounter(nodeName, keys[j], "limit", f[2])
		}
		switch f[3] {
		case int64(1):
			v.known = true
		case int64(0):
		default:
			return nil, nil, nil, &ReplyError{Node: nodeName, Script: peekName, At: fmt.Sprintf("reply[%d]", nr+4*j+3), Want: "0 or 1", Got: f[3]}
		}
	}
	return t[:nr], out, qs, nil
}

// peekCounter reads one counter field as peekScript replied it: the
// integer 0 for an absent field, else the field's string, which must be an
// integer as the prelude's int reads one ("0", or digits without a
// leading zero or a plus sign); another string is corrupt data.
func peekCounter(nodeName, key, field string, v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		if x == 0 {
			return 0, nil
		}
	case string:
		if strictInt(x) {
			if n, err := strconv.ParseInt(x, 10, 64); err == nil {
				return n, nil
			}
		}
		return 0, fmt.Errorf("%w: node %s: %s %s holds %q, not an integer", ErrCorrupt, nodeName, key, field, x)
	}
	return 0, &ReplyError{Node: nodeName, Script: peekName, At: key + " " + field, Want: "a string or the integer 0", Got: v}
}

// strictInt reports whether s is "0" or an optional minus sign and digits
// without a leading zero.
func strictInt(s string) bool {
	if s == "0" {
		return true
	}
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 || s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
