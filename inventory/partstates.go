package inventory

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// A consumer's re-read of the parts it landed pending (redosync.go holds
// the rule: a record that cannot be read, or is gone while the node lists
// its part undecided, is never read as a part gone).

// PartSnapshot is a part's record on its node now, as [Inventory.PartStates]
// reads it. (It was called PartState before that name went to the state
// type, state.go.)
type PartSnapshot struct {
	// State is pending, confirmed or cancelled; PartMissing when the node
	// holds no record of the part (it outlived inventory.retention, or the
	// node lost it); [PartUnreadable] when it holds one that cannot be read,
	// or none while it lists the part undecided (pending or set aside:
	// [Inventory.PartStatesAt]; Problem says why): its state is unknown,
	// and it is not missing.
	State PartState
	// SettledAt is when it was confirmed or cancelled (node clock); zero
	// while pending, missing or unreadable.
	SettledAt time.Time
	// Problem is why the part's record cannot be read (a key of another
	// type, a packed record whose state code is none, or gone while the
	// node lists the part undecided), naming its key;
	// "" when State is read. The other parts of the read are read as
	// usual.
	Problem string
}

// partStatesScript reads parts' states. KEYS: 1 stamp, 2.. part keys.
// ARGV: 4.., one per part key, the place of the part's redo-log entry,
// "queue:offset", or "" when not known. Returns {incarnation, per part
// {state, settled_at, problem}}: a part whose record cannot be read
// (part_try), or is gone while the part is listed undecided (pending
// index, stuck index: pend_listed), has state "" and problem why; problem
// is "" for every other.
var partStatesScript = newScript("part-states", false, luaFile("part_states.lua"))

// PartStates returns the state of each part (like partIDs) on node, read
// in one atomic step, and the node's incarnation at that moment: it is
// [Inventory.PartStatesAt] with no places, so a stock part whose record
// is gone while the pending index lists it by its place reads
// PartMissing; a consumer that knows where each part's redo-log entry is
// uses PartStatesAt.
func (inv *Inventory) PartStates(ctx context.Context, nodeName string, partIDs []string) (string, []PartSnapshot, error) {
	parts := make([]RedoCursor, len(partIDs))
	for i, id := range partIDs {
		parts[i] = RedoCursor{PartID: id}
	}
	return inv.PartStatesAt(ctx, nodeName, parts)
}

// PartStatesAt returns the state of each part on node (parts[i].PartID;
// parts[i].Queue and After the place of its redo-log entry as the caller
// landed it, After 0 when not known), read in one atomic step, and the
// node's incarnation at that moment. At most 10000 parts per call.
//
// A part whose record is there but cannot be read is [PartUnreadable],
// with [PartSnapshot].Problem naming its key and why: it fails neither
// the call nor the other parts. So is a part whose record is gone (or is
// a tombstone, written over it by a cancel that did not know its place:
// lua/pending_index.lua, pend_lost) while the node lists it undecided:
// its id in the stuck index or the pending index, or its place there
// (used only when the entry at the place names the part: a place of
// another incarnation's log is no place of it). That
// part was pending when its record went (deleted, evicted, lost with the
// node's writes), its units are reserved still, and it may settle yet
// once its record is repaired: it is never PartMissing, which a consumer
// reads as settled long ago (redolog.go, "What a trim removes"). With
// durability replica or aof, what it read is on a replica when it
// returns, as for [Inventory.ReadRedoBatch].
func (inv *Inventory) PartStatesAt(ctx context.Context, nodeName string, parts []RedoCursor) (string, []PartSnapshot, error) {
	if len(parts) > 10000 {
		return "", nil, fmt.Errorf("%w: %d parts, at most 10000 per call", ErrInvalid, len(parts))
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return "", nil, err
	}
	keys := make([]string, len(parts))
	places := make([]any, len(parts))
	for i, p := range parts {
		keys[i] = partKey(p.PartID)
		places[i] = ""
		if p.After > 0 && p.Queue >= 0 {
			places[i] = strconv.Itoa(p.Queue) + ":" + strconv.FormatInt(p.After, 10)
		}
	}
	readOn := n.ServerRun() // before the read: the fence's check (durability.go)
	v, err := inv.run(ctx, n, partStatesScript, keys, places...)
	if err != nil {
		return "", nil, err
	}
	if err := inv.durableFence(ctx, n, readOn); err != nil { // durability.go
		return "", nil, err
	}
	return decodePartStates(n.Name(), v, len(parts))
}

// decodePartStates reads partStatesScript's reply for k parts:
// {incarnation, k × {state or "", settled_at ms or 0, problem or ""}}; a
// part with a problem has no state.
func decodePartStates(nodeName string, v any, k int) (string, []PartSnapshot, error) {
	r := newReplyReader(nodeName, partStatesScript.name)
	raw := r.list(v, 2)
	if r.err != nil {
		return "", nil, r.err
	}
	inc := r.str(raw, 0)
	list := r.listAt(raw, 1, k)
	if r.err != nil {
		return "", nil, r.err
	}
	r.enter(1)
	out := make([]PartSnapshot, len(list))
	for i := range list {
		t := r.listAt(list, i, 3)
		if r.err != nil {
			return "", nil, r.err
		}
		r.enter(i)
		out[i] = readPartSnapshot(r, t)
		r.leave()
	}
	r.leave()
	if r.err != nil {
		return "", nil, r.err
	}
	return inc, out, nil
}

// readPartSnapshot reads t, one part of partStatesScript's reply:
// {state or "", settled_at ms or 0, problem or ""}, a problem only with
// no state.
func readPartSnapshot(r *replyReader, t []any) PartSnapshot {
	s := PartSnapshot{State: PartState(r.str(t, 0)), Problem: r.str(t, 2)}
	if ms := r.int(t, 1); ms > 0 {
		s.SettledAt = time.UnixMilli(ms)
	}
	if s.Problem != "" {
		if r.err == nil && s.State != PartMissing {
			r.fail(0, "no state beside a problem", t[0])
		}
		s.State = PartUnreadable
	}
	return s
}
