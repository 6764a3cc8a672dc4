package inventory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/topology"
)

// testScript is newScript for a script of the tests alone: not registered
// (the checks over every script are about the package's own).
func testScript(name string, write bool, body string) *luaScript {
	mem := memOf(write)
	epilogue := epilogueRead
	if write {
		epilogue = epilogueWrite
	}
	src := mustScript(name, body, epilogue, false)
	return newLuaScript(&luaScript{name: name, write: write, mem: mem, src: src})
}

// inlineWriteScript runs inline_write on the order record at KEYS[2], as a
// decision or a move does first.
var inlineWriteScript = testScript("test-inline-write", true, "inline_write(KEYS[2], order_get(KEYS[2]) or {})\nreturn 1\n")

// partGetScript replies part_get(KEYS[2]) as "field=value" strings, sorted
// ({} for nil).
var partGetScript = testScript("test-part-get", false, `local t = part_get(KEYS[2])
local out = {}
for k, v in pairs(t or {}) do out[#out + 1] = k .. '=' .. v end
table.sort(out)
return out
`)

// partRecordFields is p under the record's field names, as a part's
// record holding it decodes (DecodePart), times as ms.
func partRecordFields(p PartRecord) map[string]string {
	f := map[string]string{"state": string(p.State), "kind": string(p.Kind), "qty": strconv.FormatInt(p.Qty, 10),
		"redo": p.Redo, "counter": p.Counter, "sku": p.SKU, "item": strconv.Itoa(p.Item), "order": p.Order,
		"token": p.Token, "deadline": strconv.FormatInt(p.Deadline.UnixMilli(), 10),
		"at": strconv.FormatInt(p.At.UnixMilli(), 10)}
	if p.Offset != 0 {
		f["offset"] = strconv.FormatInt(p.Offset, 10)
	}
	return f
}

// inlineFieldsOn is the inline part id on c (its order's record there,
// InlineParts for c's node), under the record's field names; an empty map
// when it is none.
func inlineFieldsOn(t testing.TB, ctx context.Context, c redis.Cmdable, id string) map[string]string {
	t.Helper()
	order, ok := inlineOrderOf(id)
	if !ok {
		return map[string]string{}
	}
	name, err := c.HGet(ctx, "shardis:node", "name").Result()
	if err != nil && err != redis.Nil {
		t.Fatalf("reading the stamp: %v", err)
	}
	in, err := InlineParts(name, order, orderFieldsOn(t, ctx, c, order))
	if err != nil {
		t.Fatalf("inline parts of %s: %v", order, err)
	}
	for _, p := range in {
		if p.ID == id {
			return partRecordFields(p)
		}
	}
	return map[string]string{}
}

// inlineOrderOf is the order id of stock part id ORDER|TOKEN|ITEM.
func inlineOrderOf(id string) (string, bool) {
	i := strings.LastIndexByte(id, '|')
	if i < 0 {
		return "", false
	}
	j := strings.LastIndexByte(id[:i], '|')
	if j < 0 {
		return "", false
	}
	return id[:j], true
}

// writeInlineRecords writes, on c, the record of every inline part of
// order id that has none, as the release before inline parts wrote at the
// reserve (the same bytes as inline_write: TestTakeOneAsPlan).
func writeInlineRecords(t testing.TB, ctx context.Context, c redis.Cmdable, node, id string) {
	t.Helper()
	in, err := InlineParts(node, id, orderFieldsOn(t, ctx, c, id))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range in {
		if err := c.SetNX(ctx, partKey(p.ID), packPart(p.ID, partRecordFields(p)), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// An order of one item on its home is reserved with an inline part
// (inline.go): no record of its own, read by every script
// (part_get) and by InlineParts as the pending record take_one wrote
// before, field for field; only while its order record is reserved, not
// moved, of its token and written by the local path; and its decision
// writes its record before anything else (then settled as any part).
func TestInlinePartAsRecord(t *testing.T) {
	e := newGroupEnv(t, 32)
	ctx, c, inv := e.ctx, e.admin, e.inv
	if _, err := inv.LoadStock(ctx, "a", "s", 100, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "a", SKU: "s", Quantity: 2}}
	partGet := func(id string) map[string]string {
		t.Helper()
		v, err := inv.run(ctx, e.n, partGetScript, []string{partKey(id)})
		if err != nil {
			t.Fatalf("part_get %s: %v", id, err)
		}
		out := map[string]string{}
		for _, s := range v.([]any) {
			k, val, _ := strings.Cut(s.(string), "=")
			out[k] = val
		}
		return out
	}
	reserve := func(id string) (string, Reservation) {
		t.Helper()
		res, err := inv.Reserve(ctx, id, items, "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		f := orderFieldsOn(t, ctx, c, id)
		pid := stockPartID(id, f["token"], 0)
		if n := c.Exists(ctx, partKey(pid)).Val(); n != 0 {
			t.Fatalf("order %s: part %s has a record: want it inline", id, pid)
		}
		return pid, res
	}

	pid, res := reserve("in-1")
	lua := partGet(pid)
	in, err := InlineParts("n1", "in-1", orderFieldsOn(t, ctx, c, "in-1"))
	if err != nil || len(in) != 1 {
		t.Fatalf("InlineParts: %v, %v", in, err)
	}
	if want := partRecordFields(in[0]); !maps.Equal(lua, want) {
		t.Fatalf("part_get of inline part %s: %v\nInlineParts: %v", pid, lua, want)
	}
	p, err := DecodePart(pid, lua)
	if err != nil || p.State != PartPending || p.Qty != 2 || p.Offset != res.Receipts[0].Offset || p.Redo != res.Receipts[0].RedoLog ||
		p.Counter != stockKey("a", "s") || p.Order != "in-1" || !p.Deadline.After(res.Deadline) {
		t.Fatalf("inline part %s reads %+v, %v; reservation %+v", pid, p, err, res)
	}

	// Read as inline only from a reserved, unmoved record of its token
	// written by the local path.
	for _, ch := range []map[string]string{
		{"status": "confirmed"}, {"moved": "e2"}, {"token": "other"}, {"reserved_at": "1"},
	} {
		before := orderFieldsOn(t, ctx, c, "in-1")
		setOrderFields(t, ctx, c, "in-1", ch)
		if got := partGet(pid); len(got) != 0 {
			t.Errorf("record changed by %v: part_get reads %v, want nothing", ch, got)
		}
		if got := inlineFieldsOn(t, ctx, c, pid); len(got) != 0 {
			t.Errorf("record changed by %v: InlineParts reads %v, want nothing", ch, got)
		}
		back := map[string]string{}
		for k := range ch {
			back[k] = before[k] // "" removes the field
		}
		setOrderFields(t, ctx, c, "in-1", back)
	}
	if got := partGet(pid); !maps.Equal(got, lua) {
		t.Fatalf("part_get after the record is back: %v", got)
	}

	// A decision writes the record first: then a part like any other.
	out, err := inv.Confirm(ctx, "in-1")
	if err != nil || out.Status != StatusConfirmed || out.PendingParts != 0 {
		t.Fatalf("Confirm: %+v, %v", out, err)
	}
	rec, err := ReadPart(ctx, c, pid).Fields()
	if err != nil || rec["state"] != string(PartConfirmed) || rec["qty"] != "2" || rec["at"] != lua["at"] ||
		rec["deadline"] != lua["deadline"] {
		t.Fatalf("part %s after Confirm: %v, %v; inline it read %v", pid, rec, err, lua)
	}
	for _, id := range []string{"in-2", "in-3"} {
		pid, _ := reserve(id)
		if out, err := inv.Cancel(ctx, id); err != nil || out.Status != StatusCancelled || out.PendingParts != 0 {
			t.Fatalf("Cancel %s: %+v, %v", id, out, err)
		}
		if rec := partFieldsOn(t, ctx, c, pid); rec["state"] != string(PartCancelled) {
			t.Fatalf("part %s after Cancel: %v", pid, rec)
		}
	}
	lv, err := inv.GetStock(ctx, "a", "s")
	if err != nil || lv.Available != 98 || lv.Reserved != 0 || lv.Confirmed != 2 {
		t.Fatalf("levels %+v, %v; want 98 available, 2 confirmed", lv, err)
	}
}

// Orders with inline parts whose home a topology change moves: the move
// writes each inline part's record on the node that holds it, before the
// order record leaves (order_move_out.lua); then they are confirmed and
// cancelled on their new home and the stock adds up. Also with the apply
// stopped at its move-out crash point and run again.
func TestInlinePartsMoveWithTopology(t *testing.T) {
	t.Parallel() // its own nodes
	t.Run("apply", func(t *testing.T) { inlinePartsMove(t, false) })
	t.Run("crash at move-out, then apply again", func(t *testing.T) { inlinePartsMove(t, true) })
}

func inlinePartsMove(t *testing.T, crash bool) {
	e := newMigrateEnv(t)
	ids := e.reserveMoving(e.open(e.old), "im", 2)
	oh, _ := NewHomes(e.old)
	var parts []string
	for _, id := range ids {
		c := e.clients[oh.Home(id)]
		pid := stockPartID(id, orderFieldsOn(t, e.ctx, c, id)["token"], 0)
		if n := c.Exists(e.ctx, partKey(pid)).Val(); n != 0 || len(inlineFieldsOn(t, e.ctx, c, pid)) == 0 {
			t.Fatalf("order %s: part %s has a record, or is not inline", id, pid)
		}
		parts = append(parts, pid)
	}
	if crash {
		if _, err := e.applyWith(crashAtPoint("move-out")); !errors.Is(err, errCrashed) {
			t.Fatalf("apply with a crash at move-out = %v, want the injected crash", err)
		}
	}
	// (after a crash, the first apply may have moved some already)
	if rep, err := e.apply(); err != nil || rep.Phase != topology.PhaseStable || (!crash && rep.OrdersMoved < len(ids)) {
		t.Fatalf("apply = %+v, %v; want %d orders moved or more", rep, err, len(ids))
	}
	for i, id := range ids {
		c := e.clients[oh.Home(id)]
		if f, err := ReadPart(e.ctx, c, parts[i]).Fields(); err != nil || f["state"] != string(PartPending) {
			t.Fatalf("part %s of moved order %s on %s: %v, %v; want its record, pending", parts[i], id, oh.Home(id), f, err)
		}
	}
	e.settleMoved(ids)
}

// itemHomeFirst (the local path's check, no ring walk) agrees with
// itemCandidates' first node for every order, SKU, home and user, over a
// route of three nodes, and with one of them drained.
func TestItemHomeFirstAsCandidates(t *testing.T) {
	e := newMigrateEnv(t)
	inv := e.open(e.old)
	ctx := e.ctx
	set, err := inv.set(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		for _, home := range set.Nodes() {
			for i := range 30 {
				order, sku, user := fmt.Sprintf("o-%d", i), fmt.Sprintf("s-%d", i%7), ""
				if i%3 > 0 {
					user = fmt.Sprintf("u-%d", i)
				}
				c := inv.itemCandidates(set, home, order, sku, user)
				if want := len(c) > 0 && c[0] == home; inv.itemHomeFirst(set, home, user) != want {
					t.Fatalf("%s: itemHomeFirst(home %s, user %q) = %v, itemCandidates(%s, %s) = %v", what, home.Name(), user, !want, order, sku, c)
				}
			}
		}
	}
	check("all enabled")
	if err := inv.r.SetRouteEnabled(ctx, "n2", "inventory", "r", false); err != nil {
		t.Fatal(err)
	}
	check("n2 drained")
}

// An inline part is read from its order record only on the node the local
// reserve wrote the record on, and only until the record first moves: the
// move writes the part's record there first (order_move_out.lua), and the
// record installed elsewhere carries a reserved_at (order_install.lua), so
// no copy of it is read for inline parts again. Here the record moves
// away, the node then comes back from an older snapshot taken before the
// reserve (the part's record, its take and its redo entry gone; the loss
// accepted), another order reserves 5 of the SKU's units there, and a
// topology change moves the record back. The part is lost, not pending:
// a Cancel gives nothing back, a Confirm confirms nothing and answers
// ErrDataLoss naming it, and the other order keeps its 5 units. (Read as
// pending from the record moved back, the part took its 3 units out of
// the other order's: a Cancel made them available again, a Confirm
// confirmed them. Chaos seed 268 ended with a part in the state the move
// back leaves before the decision: pending on its node, which had come
// back from an older snapshot, its units in no counter and its redo
// offset another part's.)
func TestInlinePartLostAfterMoveBack(t *testing.T) {
	for _, decision := range []string{"cancel", "confirm"} {
		t.Run(decision, func(t *testing.T) { inlinePartLostAfterMoveBack(t, decision) })
	}
}

func inlinePartLostAfterMoveBack(t *testing.T, decision string) {
	e := newGroupEnv(t, 32)
	ctx, c, inv := e.ctx, e.admin, e.inv
	if _, err := inv.LoadStock(ctx, "a", "s", 100, 0); err != nil {
		t.Fatal(err)
	}
	// the older snapshot: every inventory key before the reserve
	snap := map[string]string{}
	for _, k := range c.Keys(ctx, "inv:*").Val() {
		snap[k] = c.Dump(ctx, k).Val()
	}
	if _, err := inv.Reserve(ctx, "lost-1", []Item{{Route: "a", SKU: "s", Quantity: 3}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	pid := stockPartID("lost-1", orderFieldsOn(t, ctx, c, "lost-1")["token"], 0)
	// moved away (moveOrder's first step; the install elsewhere is not
	// needed here): the part's record is written here first
	out, err := inv.run(ctx, e.n, orderMoveOutScript, []string{orderKey("lost-1")}, inv.topology(ctx).token)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMoveOut("n1", out)
	if err != nil {
		t.Fatal(err)
	}
	if f := partFieldsOn(t, ctx, c, pid); f["state"] != string(PartPending) {
		t.Fatalf("part %s after the move-out: %v, want its record, pending", pid, f)
	}
	// the node comes back from the snapshot (its stamp, which an accept
	// renews, is left alone)
	for _, k := range c.Keys(ctx, "inv:*").Val() {
		if err := c.Del(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range snap {
		if err := c.Restore(ctx, k, 0, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := inv.Reserve(ctx, "kept-1", []Item{{Route: "a", SKU: "s", Quantity: 5}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	// moved back: the install of what the move-out returned (straight
	// back here; through another node, that node's install writes the
	// same reserved_at, which its own move-out then carries)
	if _, err := inv.run(ctx, e.n, orderInstallScript, []string{orderKey("lost-1")}, m.pttl, m.rec); err != nil {
		t.Fatal(err)
	}
	if f := orderFieldsOn(t, ctx, c, "lost-1"); f["status"] != string(OrderReserved) || f["reserved_at"] != f["created"] {
		t.Errorf("record installed: %v, want reserved with reserved_at its created", f)
	}
	if got := inlineFieldsOn(t, ctx, c, pid); len(got) != 0 {
		t.Errorf("part %s reads %v from the record moved back, want nothing", pid, got)
	}
	switch decision {
	case "cancel":
		if out, err := inv.Cancel(ctx, "lost-1"); err != nil || out.Status != StatusCancelled {
			t.Fatalf("Cancel: %+v, %v", out, err)
		}
	case "confirm":
		out, err := inv.Confirm(ctx, "lost-1")
		if !errors.Is(err, ErrDataLoss) || !strings.Contains(err.Error(), pid) || out.Status != StatusConfirmed {
			t.Fatalf("Confirm: %+v, %v; want confirmed and ErrDataLoss naming %s", out, err, pid)
		}
	}
	if f := partFieldsOn(t, ctx, c, pid); f["state"] == string(PartPending) || f["qty"] == "3" {
		t.Fatalf("part %s after the %s: %v, want no pending part of 3", pid, decision, f)
	}
	lv, err := inv.GetStock(ctx, "a", "s")
	if err != nil || lv.Available != 95 || lv.Reserved != 5 || lv.Confirmed != 0 {
		t.Fatalf("levels after the %s: %+v, %v; want 95 available, 5 reserved (kept-1's), 0 confirmed", decision, lv, err)
	}
}
