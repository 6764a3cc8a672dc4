package inventory

import (
	"time"

	"github.com/shardis/shardis/node"
)

// The stage's call: stageTakeScript's typed wrapper (lua/stage_take.lua),
// the one-round path's write on the order's home (staged.go holds the
// protocol): its arguments, in the short layout or the general one, and
// its reply, read strictly.

// stageReply is stageTakeScript's reply.
type stageReply struct {
	status   stageStatus
	deadline time.Time
	offsets  []int64   // per home part: its redo offset (0 for quota parts)
	record   recStatus // "existing": the record's status
	token    string    // "existing": the record's token
	// the staging record's pieces the stage sent, around created
	// (stageTakeCall): what its carried commit compares
	rec [2]string
}

// stagedCall is the stage of a staged round: stageTakeScript's call on
// the home node with the home node's parts (reqs). mutation is "" but in
// the explorer's self-check (MutationStageTakeover, faults.go). A nil home
// sends no stage (a crash point: roundCrashes).
type stagedCall struct {
	home     *node.Node
	due      partDue
	mutation Mutation
	ttl      time.Duration
	digest   string
	userID   string
	promised string
	reqs     []partReq
}

// stageCall is the stage's script call: it stages the order's record on
// its home node with the home node's parts, all or nothing
// (stageTakeScript), sent in the round of the order's takes
// (stageAndTake). rec is the staging record's two pieces (stageTakeCall),
// which its reply keeps.
func (inv *Inventory) stageCall(orderID, token string, c stagedCall) (call scriptCall, rec [2]string) {
	keys, args, rec, err := inv.stageTakeCall(orderID, token, c.due, c.mutation, c.ttl, c.digest, c.userID, c.promised, c.reqs)
	return scriptCall{n: c.home, s: stageTakeScript, keys: keys, args: args, err: err}, rec
}

// reply is the stage's result from its script call's outcome r, rec being
// the staging record's two pieces (stageCall).
func (c stagedCall) reply(rec [2]string, r callReply) (stageReply, error) {
	if r.err != nil {
		return stageReply{}, r.err
	}
	st, err := decodeStageTake(c.home.Name(), r.v, len(c.reqs))
	st.rec = rec
	return st, err
}

// stageTakeCall is stageTakeScript's keys and arguments (see stageTakeScript),
// the record's pieces, the keys and the part templates cut from one
// string, and the staging record's two pieces (around its created hole:
// what a carried commit compares, stagedCommitValues). It fails with
// ErrInvalid when a record has no template (rectemplate.go).
func (inv *Inventory) stageTakeCall(orderID, token string, due partDue, mutation Mutation, ttl time.Duration, digest, userID, promised string, reqs []partReq) ([]string, []any, [2]string, error) {
	var endsArr [24]int // the cutter's ends, on this frame (more parts grow them)
	s, c, rec, err := inv.stagePieces(endsArr[:0], orderID, token, ttl, digest, userID, promised, reqs)
	if err != nil {
		return nil, nil, [2]string{}, err
	}
	retention := seconds(inv.cfg.Retention)
	one := len(reqs) == 1 && reqs[0].Kind == PartStock && userID == "" && mutation == "" && due.hold == ttl+partGrace
	if len(reqs) == 0 || one {
		// the short layout: no order id, part deadline or user, which
		// only the home's parts read, and no token, which the record's
		// first piece holds (lua/stage_take.lua); the home's one stock
		// part, if any: its deadline is the order's plus partGrace
		// (stageDeadline), which the script adds itself, and its
		// template's first piece a pending stock part's, which the
		// script knows. The order's own keys and arguments, then the
		// context (stageContext: what the stages of a hot SKU share).
		// (The pieces: the order key, the record's two, the part key,
		// the template's two.)
		var box argBox
		if one {
			box = newArgBox(5, 3, 4, 8)
		} else {
			box = newArgBox(3, 2, 1, 5) // the no-part stage's, in the smaller box
		}
		keys := append(box.keySlice(), c.next(s))
		head, mid := c.next(s), c.next(s)
		args := append(box.argSlice(), box.str(head))
		if one {
			r := reqs[0]
			keys = append(keys, c.next(s), r.ck, r.queue)
			c.next(s) // the template's first piece
			args = append(args, box.str(r.ID), box.str(c.next(s)))
		}
		args = append(args, box.int(ms(ttl)), box.int(retention), box.str(mid), box.str(string(mutation)))
		if one {
			args = append(args, box.int(reqs[0].Qty))
		}
		return keys, args, rec, nil
	}
	keys, args := stageGeneralArgs(orderID, token, due, mutation, ttl, retention, userID, reqs, s, c)
	return keys, args, rec, nil
}

// stageContext is stageTakeScript's context rule (group.go, "Contexts"):
// the short layout of no part (1 key and 5 arguments) has the last 4
// arguments, the one of one part (4 keys and 8 arguments) the last 2
// keys and 5 arguments; the general layout (1 + 3 keys per part, 9 + 5
// arguments per part) has none.
func stageContext(nk, na int) (int, int) {
	switch {
	case nk == 1 && na == 5:
		return 0, 4
	case nk == 4 && na == 8:
		return 2, 5
	}
	return 0, 0
}

// stagePieces are the pieces stageTakeCall cuts a call from (s, its
// cutter c at its start: the order key, the staging record's two pieces,
// then each part's key and template pieces), and the record's two. The
// cutter's ends are appended to ends (the caller's, so that they need no
// allocation of their own).
func (inv *Inventory) stagePieces(ends []int, orderID, token string, ttl time.Duration, digest, userID, promised string, reqs []partReq) (s string, c pieceCutter, rec [2]string, err error) {
	buf := make([]byte, 0, 96+len(token)+len(digest)+len(userID)+len(promised)+(len(partKeyPrefix)+160+3*len(orderID))*len(reqs))
	buf = append(append(buf, orderKeyPrefix...), orderID...)
	ends = append(ends, len(buf))
	buf, cut, err := appendStagingOrderPieces(buf, token, digest, userID, ms(ttl), ms(inv.opts.AttemptLease), promised)
	if err != nil {
		return "", pieceCutter{}, rec, err
	}
	ends = append(ends, cut, len(buf))
	if buf, ends, err = appendPartPieces(buf, ends, orderID, token, reqs, false); err != nil {
		return "", pieceCutter{}, rec, err
	}
	s = frozen(buf)
	return s, pieceCutter{ends: ends}, [2]string{s[ends[0]:ends[1]], s[ends[1]:ends[2]]}, nil
}

// stageGeneralArgs is stageTakeCall's keys and arguments in the script's
// general layout, which every stage may take, cut from s (c at its start).
func stageGeneralArgs(orderID, token string, due partDue, mutation Mutation, ttl time.Duration, retention int64, userID string, reqs []partReq, s string, c pieceCutter) ([]string, []any) {
	box := newArgBox(6+3*len(reqs), 2+len(reqs), 1+3*len(reqs), 9+5*len(reqs))
	keys := append(box.keySlice(), c.next(s))
	args := box.argSlice()
	args = append(args, box.str(orderID), box.str(token), box.str(due.arg()), box.str(userID), box.int(ms(ttl)), box.int(retention),
		box.str(c.next(s)), box.str(c.next(s)), box.str(string(mutation)))
	for _, r := range reqs {
		keys = append(keys, c.next(s), r.ck, r.queue)
		args = append(args, box.str(r.ID), kindArg(r.Kind), box.int(r.Qty), box.str(c.next(s)), box.str(c.next(s)))
	}
	return keys, args
}

// decodeStageTake reads stageTakeScript's reply for k home parts:
// "staged:<deadline ms>:<offset>…" with k offsets (replyReader.headInts),
// {"existing", record status, record token} or {"short"}. Its outcome is unknown when it is
// malformed (the caller's outcomeUnknown, as after a timeout).
func decodeStageTake(nodeName string, v any, k int) (stageReply, error) {
	r := newReplyReader(nodeName, stageTakeScript.name)
	if s, ok := v.(string); ok {
		ints := r.headInts(make([]int64, 0, 1+k), s, string(stageStaged), 1+k)
		if r.err != nil {
			return stageReply{}, r.err
		}
		return stageReply{status: stageStaged, deadline: time.UnixMilli(ints[0]), offsets: ints[1:]}, nil
	}
	raw := r.list(v, -1)
	if r.err == nil && len(raw) == 0 {
		r.fail(-1, "a list starting with a status word", v)
	}
	if r.err != nil {
		return stageReply{}, r.err
	}
	var out stageReply
	out.status = stageStatus(r.str(raw, 0))
	switch out.status {
	case stageExisting:
		raw = r.list(v, 3)
		if r.err != nil {
			break
		}
		out.record = recStatus(r.oneOf(raw, 1, recStatuses))
		out.token = r.str(raw, 2)
	case stageShort:
		r.list(v, 1)
	default:
		r.fail(0, "existing or short (staged is a string)", raw[0])
	}
	if r.err != nil {
		return stageReply{}, r.err
	}
	return out, nil
}
