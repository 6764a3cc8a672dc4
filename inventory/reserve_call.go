package inventory

import (
	"context"
	"strconv"

	"github.com/shardis/shardis/node"
)

// The reserve script's call: reserveScript's typed wrapper
// (lua/reserve.lua), the take of an order's parts on a node other than
// its home (take.go's rounds, the one-round path's takes): its arguments,
// in the short layout or the general one, run one call per node at once,
// and its replies, read strictly.

// reply is what the reserve script answered for one part: its state,
// the units taken, its redo offset and its SKU's per-user limit.
type reply struct {
	state  takeWord
	qty    int64
	offset int64
	limit  int64
}

// batchResult is one node's reserve script call of a take round: its
// parts and their replies, or the call's error.
type batchResult struct {
	reqs    []partReq
	replies []reply
	err     error
	unknown bool // the call may have run: its parts need tombstones
}

// unknownParts returns the batch's parts when the call's outcome is
// unknown (they need tombstones), else nil.
func (b batchResult) unknownParts() []part {
	if !b.unknown {
		return nil
	}
	out := make([]part, len(b.reqs))
	for i, r := range b.reqs {
		out[i] = r.part
	}
	return out
}

// nodeBatch is the parts of a round that one node's reserve script call
// takes.
type nodeBatch struct {
	n    *node.Node
	reqs []partReq
}

// nodeBatches are a round's batches, at most one per node, in the order
// their nodes were first added. An order has few nodes: a slice searched
// in order costs less than a map, which it allocated twice.
type nodeBatches []nodeBatch

// find is the index of n's batch in b, or -1.
func (b nodeBatches) find(n *node.Node) int {
	for i := range b {
		if b[i].n == n {
			return i
		}
	}
	return -1
}

// add appends r to n's batch, which it starts when b has none.
func (b nodeBatches) add(n *node.Node, r partReq) nodeBatches {
	if i := b.find(n); i >= 0 {
		b[i].reqs = append(b[i].reqs, r)
		return b
	}
	return append(b, nodeBatch{n: n, reqs: []partReq{r}})
}

// cut removes n's batch from b and returns its parts (nil if b has none).
func (b nodeBatches) cut(n *node.Node) ([]partReq, nodeBatches) {
	i := b.find(n)
	if i < 0 {
		return nil, b
	}
	reqs := b[i].reqs
	return reqs, append(b[:i], b[i+1:]...)
}

// runBatches runs one reserve script per node, all at once (sendRound),
// and returns each batch's result, in the batches' order.
func (inv *Inventory) runBatches(ctx context.Context, orderID, token string, deadline partDue, batches nodeBatches) []batchResult {
	var callArr [5]scriptCall // an order of up to 5 nodes: no allocation
	var replyArr [5]callReply
	calls := appendTakeCalls(callArr[:0], orderID, token, deadline, batches)
	return inv.takeResults(batches, inv.sendRound(ctx, calls, replyArr[:0]))
}

// appendTakeCalls appends to calls the reserve script's call for each of
// batches: the take of the batch's parts on its node (reserveCall).
func appendTakeCalls(calls []scriptCall, orderID, token string, deadline partDue, batches nodeBatches) []scriptCall {
	for _, b := range batches {
		keys, args, err := reserveCall(orderID, token, deadline, b.reqs)
		calls = append(calls, scriptCall{n: b.n, s: reserveScript, keys: keys, args: args, err: err})
	}
	return calls
}

// takeResults is each batch's result from its call's outcome (replies[i]
// is batches[i]'s), nil for no batch.
func (inv *Inventory) takeResults(batches nodeBatches, replies []callReply) []batchResult {
	if len(batches) == 0 {
		return nil
	}
	out := make([]batchResult, len(batches))
	for i, b := range batches {
		out[i] = inv.batchResult(b.n, b.reqs, replies[i].v, replies[i].err)
	}
	return out
}

// batchResult is the result of the reserve script of reqs on n, from its
// reply v or its error.
func (inv *Inventory) batchResult(n *node.Node, reqs []partReq, v any, err error) batchResult {
	res := batchResult{reqs: reqs, err: err}
	if err == nil {
		res.replies, res.err = inv.reserveReplies(n, reqs, v)
	}
	if res.err != nil {
		res.unknown = outcomeUnknown(res.err)
	}
	return res
}

// reserveCall is the reserve script's keys and arguments for reqs. The
// parts' keys and record templates are cut from one string. A call of one
// stock part, the usual one, goes in the script's short layout: the
// part's key, then its context's keys (its counter and redo queue); its
// id and its record template's second piece, then its context's
// arguments (the deadline and its want). The context is what the takes
// of a hot SKU share, which a group sends once for a run of them
// (group.go). The general layout's order id (which the script never
// reads), kind and redo queue (which the keys have), and the template's
// first piece (a pending stock part's, which the script knows) are left
// out: four arguments fewer, each of which costs the node about 800
// instructions in a group call.
func reserveCall(orderID, token string, deadline partDue, reqs []partReq) ([]string, []any, error) {
	var endsArr [24]int
	ends := endsArr[:0]
	buf := make([]byte, 0, (len(partKeyPrefix)+160+3*len(orderID))*len(reqs))
	buf, ends, err := appendPartPieces(buf, ends, orderID, token, reqs, false)
	if err != nil {
		return nil, nil, err
	}
	s, c := frozen(buf), pieceCutter{ends: ends}
	if len(reqs) == 1 && reqs[0].Kind == PartStock {
		r := reqs[0]
		box := newArgBox(4, 1, 3, 4)
		keys := append(box.keySlice(), c.next(s), r.ck, r.queue)
		c.next(s) // the template's first piece: a pending stock part's, which the script knows (PNEW_STOCK)
		args := append(box.argSlice(), box.str(r.ID), box.str(c.next(s)), box.str(deadline.arg()), box.int(r.Qty))
		return keys, args, nil
	}
	keys, args := reserveGeneralArgs(orderID, deadline, reqs, s, c)
	return keys, args, nil
}

// reserveContext is reserveScript's context rule (group.go, "Contexts"):
// the short layout's (reserveCall: the only one with 4 arguments, the
// general layout's being 2 + 6 per part) is its last 2 keys and 2
// arguments; the general layout has none.
func reserveContext(nk, na int) (int, int) {
	if na == 4 {
		return 2, 2
	}
	return 0, 0
}

// reserveGeneralArgs is reserveCall's keys and arguments in the reserve
// script's general layout, which every call may take, cut from s (c the
// pieces' cutter, at its start).
func reserveGeneralArgs(orderID string, deadline partDue, reqs []partReq, s string, c pieceCutter) ([]string, []any) {
	box := newArgBox(2+4*len(reqs), len(reqs), 3*len(reqs), 2+6*len(reqs))
	keys := box.keySlice()
	args := box.argSlice()
	args = append(args, box.str(orderID), box.str(deadline.arg()))
	for _, r := range reqs {
		last := box.str(r.queue)
		if r.Kind == PartQuota {
			last = box.int(r.elsewhere)
		}
		keys = append(keys, c.next(s), r.ck, r.queue)
		args = append(args, box.str(r.ID), kindArg(r.Kind), box.int(r.Qty), last, box.str(c.next(s)), box.str(c.next(s)))
	}
	return keys, args
}

// reserveReplies reads the reserve script's reply v to reqs on n, and
// marks each SKU the replies show limited.
func (inv *Inventory) reserveReplies(n *node.Node, reqs []partReq, v any) ([]reply, error) {
	replies, err := decodeReserveReplies(n.Name(), v, len(reqs), reqs[0].Qty)
	for i := range replies {
		if replies[i].limit > 0 {
			inv.limited.mark(stockRef{reqs[i].Route, reqs[i].SKU})
		}
	}
	return replies, err
}

// decodeReserveReplies reads the reserve script's reply to k part
// requests, the first of which wants want units: one flat list, four
// values per request (state word, qty, offset, limit), or, for one part
// taken now, one string: its offset alone when it was taken in full (want
// units) and its SKU has no limit, else "pending:<qty>:<offset>:<limit>"
// (replyReader.headInts).
func decodeReserveReplies(nodeName string, v any, k int, want int64) ([]reply, error) {
	r := newReplyReader(nodeName, reserveScript.name)
	if s, ok := v.(string); ok && k == 1 && s != "" && s[0] >= '0' && s[0] <= '9' {
		off, _ := strconv.ParseInt(s, 10, 64) // canonicalInt below: it parses
		if !canonicalInt(s) || off <= 0 {
			r.fail(-1, "an offset (an integer above 0)", s)
			return nil, r.err
		}
		return []reply{{state: takePending, qty: want, offset: off}}, nil
	}
	if s, ok := v.(string); ok && k == 1 {
		var buf [3]int64
		ints := r.headInts(buf[:0], s, string(takePending), 3)
		if r.err != nil {
			return nil, r.err
		}
		return []reply{{state: takePending, qty: ints[0], offset: ints[1], limit: ints[2]}}, nil
	}
	raw := r.list(v, 4*k)
	if r.err != nil {
		return nil, r.err
	}
	out := make([]reply, k)
	for i := range out {
		out[i] = reply{state: takeWord(r.oneOf(raw, 4*i, takeWords)), qty: r.int(raw, 4*i+1), offset: r.int(raw, 4*i+2), limit: r.int(raw, 4*i+3)}
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}
