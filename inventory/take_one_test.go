package inventory

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// take_one (lua/take_whole.lua) does what plan_parts then write_parts do
// for an order of one stock part: the stage-take script, as it is (one
// stock part: take_one) and with that branch cut (the general path), and
// the local script, sent the order in its short layout (take_one) and in
// its general one (localGeneralCall), run the same order from the same
// node state, and the
// replies and every key they leave (the node's clock masked) must agree,
// the local script's inline part once inline_write has written its
// record (inline.go). The reserve script's own branch for one stock part
// (an attempt's only part on a node) is held against its general path
// the same way, by its two layouts (reserveCall, reserveGeneralArgs).
// The cases are the script's outcomes for one part: taken (within a redo
// segment and at the start of a new one), short, a limited SKU without a
// user, the part's key already there, a corrupt counter or offset, a redo
// segment of the wrong type; and a record of the order already there,
// which the local script keeps (reserved, also with the part short, or of
// the hash layout: existing, nothing taken) or replaces (failed, moved).
func TestTakeOneAsPlan(t *testing.T) {
	e := newGroupEnv(t, 32)
	e.warm(t)
	ctx, c, inv := e.ctx, e.admin, e.inv
	stageGeneral := cutScript(t, stageTakeScript, [2]string{"elseif np == 1 and ARGV[14] == 's' then\n", "elseif false then\n"})

	const route, sku, id, token = "a", "s", "o-1", "tok-1"
	items := []Item{{Route: route, SKU: sku, Quantity: 3}}
	ck, queue := stockKey(route, sku), inv.redoQueue(route, sku)
	// setPending writes a pending record of the order's part at offset 7
	setPending := func() {
		pid := stockPartID(id, token, 0)
		rec := PartRecord{State: PartPending, Kind: PartStock, Qty: 3, Offset: 7, Redo: queue, Counter: ck, SKU: sku, Order: id, Token: token,
			Deadline: time.UnixMilli(1900000000000), At: time.UnixMilli(1800000000000)}
		c.Set(ctx, partKey(pid), packPart(pid, partRecordFields(rec)), 0)
	}
	cases := []struct {
		name  string
		setup func()
	}{
		{"taken", func() {}},
		{"taken, first offset of a new redo segment", func() { c.HSet(ctx, RedoOffsetsKey, queue, strconv.Itoa(3*redoSegmentSize-1)) }},
		{"taken, first offset of this release's segments", func() {
			c.HSet(ctx, RedoOffsetsKey, queue, "150")
			c.HDel(ctx, RedoOffsetsKey, queue+RedoFirstSuffix)
		}},
		{"corrupt first offset of this release's segments", func() { c.HSet(ctx, RedoOffsetsKey, queue+RedoFirstSuffix, "x") }},
		{"short", func() { c.HSet(ctx, ck, "available", "2") }},
		{"limited SKU, no user", func() { c.HSet(ctx, ck, "limit", "5") }},
		{"the part's key is there", func() { c.Set(ctx, partKey(stockPartID(id, token, 0)), "x", 0) }},
		// a part key that is there outranks a corrupt value: the plan reads
		// it first, the stage's one part only when a check fails
		{"the part's key is there, a corrupt counter", func() {
			c.Set(ctx, partKey(stockPartID(id, token, 0)), "x", 0)
			c.HSet(ctx, ck, "reserved", "1.5")
		}},
		{"the part's key is there, a corrupt offset", func() {
			c.Set(ctx, partKey(stockPartID(id, token, 0)), "x", 0)
			c.HSet(ctx, RedoOffsetsKey, queue, "x")
		}},
		{"the part's key is there, a redo segment that is not a sorted set", func() {
			c.Set(ctx, partKey(stockPartID(id, token, 0)), "x", 0)
			c.Set(ctx, redoSegmentKey(queue, 1), "x", 0)
		}},
		{"the part's key is there, the stock short", func() {
			c.Set(ctx, partKey(stockPartID(id, token, 0)), "x", 0)
			c.HSet(ctx, ck, "available", "2")
		}},
		// the part pending (its record there: a retry of a take that ran):
		// answered from the record, whatever else is wrong
		{"the part pending", func() { setPending() }},
		{"the part pending, the stock short", func() { setPending(); c.HSet(ctx, ck, "available", "0") }},
		{"the part pending, a corrupt counter", func() { setPending(); c.HSet(ctx, ck, "reserved", "1.5") }},
		{"the part pending, a corrupt stock", func() { setPending(); c.HSet(ctx, ck, "available", "x") }},
		{"the part pending, a corrupt limit", func() { setPending(); c.HSet(ctx, ck, "limit", "-") }},
		{"the part pending, a corrupt offset", func() { setPending(); c.HSet(ctx, RedoOffsetsKey, queue, "x") }},
		{"the part pending, a redo segment that is not a sorted set", func() {
			setPending()
			c.Set(ctx, redoSegmentKey(queue, 1), "x", 0)
		}},
		{"corrupt counter", func() { c.HSet(ctx, ck, "reserved", "1.5") }},
		{"corrupt offset", func() { c.HSet(ctx, RedoOffsetsKey, queue, "x") }},
		{"a redo segment that is not a sorted set", func() { c.Set(ctx, redoSegmentKey(queue, 1), "x", 0) }},
		// the order's record (the local script's, the stage-take's key 4):
		// packed, its first byte the status code, upper case when moved
		// (lua/order_head.lua); one to keep answers existing, a failed or
		// a moved one is replaced
		{"a reserved record of the order", func() { c.Set(ctx, orderKey(id), "rtok-0\x1d", 0) }},
		{"a reserved record of the order, the part short", func() {
			c.Set(ctx, orderKey(id), "rtok-0\x1d", 0)
			c.HSet(ctx, ck, "available", "2")
		}},
		{"a failed record of the order", func() { c.Set(ctx, orderKey(id), "ftok-0\x1d", time.Hour) }},
		{"a moved record of the order", func() { c.Set(ctx, orderKey(id), "Rtok-0\x1d", 0) }},
		{"a record of the hash layout", func() { c.HSet(ctx, orderKey(id), "status", "reserved", "token", "tok-0") }},
	}
	// reset leaves the node with the stock loaded and nothing else of the
	// inventory's (the stamp and topology keys stay)
	reset := func(setup func()) {
		t.Helper()
		keys, err := c.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, "shardis:") {
				c.Del(ctx, k)
			}
		}
		if _, err := inv.LoadStock(ctx, route, sku, 10, 0); err != nil {
			t.Fatal(err)
		}
		setup()
	}
	clock := regexp.MustCompile(`1\d{12}`) // ms since the epoch: the node's clock
	// state is every key but the stamp's and topology's, values by type
	state := func() string {
		t.Helper()
		keys, _ := c.Keys(ctx, "*").Result()
		slices.Sort(keys)
		var b strings.Builder
		for _, k := range keys {
			if strings.HasPrefix(k, "shardis:") {
				continue
			}
			typ := c.Type(ctx, k).Val()
			var v any
			switch typ {
			case "string":
				v = c.Get(ctx, k).Val()
			case "hash":
				h := c.HGetAll(ctx, k).Val()
				fs := make([]string, 0, len(h))
				for f, x := range h {
					fs = append(fs, f+"="+x)
				}
				slices.Sort(fs)
				v = fs
			case "zset":
				var zs []string
				for _, z := range c.ZRangeWithScores(ctx, k, 0, -1).Val() {
					zs = append(zs, fmt.Sprintf("%v@%.0f", z.Member, z.Score))
				}
				v = zs
			default:
				v = "?"
			}
			fmt.Fprintf(&b, "%s %s %v TTL %v\n", k, typ, v, c.TTL(ctx, k).Val() > 0)
		}
		return clock.ReplaceAllString(b.String(), "T")
	}
	run := func(s *luaScript, keys []string, args []any) string {
		v, err := inv.run(ctx, e.n, s, keys, args...)
		if s.name == reserveScript.name && err == nil {
			// the reply as its caller reads it: the one-part path answers
			// a take with one string, the plan with a list
			var rs []reply
			rs, err = decodeReserveReplies(e.n.Name(), v, 1, items[0].Quantity)
			v = rs
		}
		return clock.ReplaceAllString(fmt.Sprintf("%v %v", v, err), "T")
	}
	// localOrder is the order's part requests, its one item on the node
	localOrder := func() []partReq {
		reqs, ok := inv.localReqs(ctx, nil, e.n, id, token, items, "")
		if !ok {
			t.Fatal("the order is not local")
		}
		return reqs
	}
	scripts := []struct {
		name        string
		now, before *luaScript
		call        func() ([]string, []any, error)
		// general is the call as the general path reads it, when the
		// script tells the paths apart by the call's layout (nil: call)
		general func() ([]string, []any, error)
	}{
		{"local", localScript, localScript, func() ([]string, []any, error) {
			reqs := localOrder()
			keys, args, _, err := inv.localCall(nil, id, token, digestOf(items, ""), "", time.Hour, reqs)
			return keys, args, err
		}, func() ([]string, []any, error) {
			reqs := localOrder()
			keys, args, _, err := localGeneralCall(nil, id, token, digestOf(items, ""), "", time.Hour, reqs)
			return keys, args, err
		}},
		{"local, a part's tail sent", localScript, localScript, func() ([]string, []any, error) {
			// a part whose entry has an incarnation: its tail is not
			// localTail, so the short layout sends it
			reqs := localOrder()
			reqs[0].Incarnation = "g1"
			keys, args, _, err := localOneCall(nil, id, token, digestOf(items, ""), time.Hour, reqs[0])
			return keys, args, err
		}, func() ([]string, []any, error) {
			reqs := localOrder()
			reqs[0].Incarnation = "g1"
			keys, args, _, err := localGeneralCall(nil, id, token, digestOf(items, ""), "", time.Hour, reqs)
			return keys, args, err
		}},
		{"stage-take", stageTakeScript, stageGeneral, func() ([]string, []any, error) {
			// the hold stageDeadline gives: the short layout with the
			// home's one part
			reqs := localOrder()
			keys, args, _, err := inv.stageTakeCall(id, token, partDue{hold: time.Hour + partGrace}, "", time.Hour, digestOf(items, ""), "", "", reqs)
			return keys, args, err
		}, func() ([]string, []any, error) {
			reqs := localOrder()
			s, c, _, err := inv.stagePieces(nil, id, token, time.Hour, digestOf(items, ""), "", "", reqs)
			if err != nil {
				return nil, nil, err
			}
			keys, args := stageGeneralArgs(id, token, partDue{hold: time.Hour + partGrace}, "", time.Hour, seconds(inv.cfg.Retention), "", reqs, s, c)
			return keys, args, nil
		}},
		{"reserve", reserveScript, reserveScript, func() ([]string, []any, error) {
			reqs := localOrder()
			return reserveCall(id, token, partDue{hold: time.Minute}, reqs)
		}, func() ([]string, []any, error) {
			reqs := localOrder()
			// the general layout, which reserveCall keeps for calls the
			// short one cannot carry
			buf, ends, err := appendPartPieces(nil, nil, id, token, reqs, false)
			if err != nil {
				return nil, nil, err
			}
			keys, args := reserveGeneralArgs(id, partDue{hold: time.Minute}, reqs, frozen(buf), pieceCutter{ends: ends})
			return keys, args, nil
		}},
	}
	for _, sc := range scripts {
		keys, args, err := sc.call()
		if err != nil {
			t.Fatal(err)
		}
		keysBefore, argsBefore := keys, args
		if sc.general != nil {
			if keysBefore, argsBefore, err = sc.general(); err != nil {
				t.Fatal(err)
			}
		}
		if sc.now == stageTakeScript && (len(keys) != 4 || len(args) != 8 || len(keysBefore) != 4 || len(argsBefore) != 14) {
			// the stage's short layout with one part: no order id, token
			// (the record's first piece holds it), part deadline, user,
			// kind or template's first piece
			t.Fatalf("stage calls %v %v and %v %v: want 4 keys and 8 arguments, and 4 and 14 in the general layout",
				keys, plainArgs(args), keysBefore, plainArgs(argsBefore))
		}
		if want := 5 + strings.Count(sc.name, "tail"); sc.now == localScript && (len(keys) != 3 || len(args) != want || len(keysBefore) != 4 || len(argsBefore) != 8) {
			// the local script's short layout: the order key, the
			// counter and the redo queue; ttl, the record's first two
			// pieces, the part's id and quantity, and its tail only when
			// it is not localTail. Its general one adds the part's key,
			// the user and the part's kind, and sends an inline part no
			// template (it writes no record) either. Both paths must
			// write the same bytes once inline_write has run
			t.Fatalf("local calls %v %v and %v %v: want 3 keys and %d arguments, and 4 and 8 in the general layout",
				keys, plainArgs(args), keysBefore, plainArgs(argsBefore), want)
		}
		for _, tc := range cases {
			reset(tc.setup)
			r1 := run(sc.now, keys, args)
			if sc.now == localScript {
				// its part is inline: the record a decision writes
				// first is, byte for byte, what the general path wrote
				run(inlineWriteScript, []string{orderKey(id)}, nil)
			}
			s1 := state()
			if tc.name == "taken" && sc.now == stageTakeScript {
				// the state masks the clock: the part's deadline must be
				// the hold after its at, in the short layout too
				pid := stockPartID(id, token, 0)
				f, err := unpackPartValue(pid, c.Get(ctx, partKey(pid)).Val())
				var p PartRecord
				if err == nil {
					p, err = DecodePart(pid, f)
				}
				if err != nil || p.Deadline.Sub(p.At) != time.Hour+partGrace {
					t.Errorf("%s, %s: the part's deadline is %v after its at (%v), want %v", sc.name, tc.name, p.Deadline.Sub(p.At), err, time.Hour+partGrace)
				}
			}
			reset(tc.setup)
			r2 := run(sc.before, keysBefore, argsBefore)
			if sc.now == localScript {
				run(inlineWriteScript, []string{orderKey(id)}, nil) // inline there too
			}
			s2 := state()
			if r1 != r2 || s1 != s2 {
				t.Errorf("%s, %s: take_one answered %s and left\n%s\nthe general path answered %s and left\n%s", sc.name, tc.name, r1, s1, r2, s2)
			}
			taken := strings.Contains(r1, "reserved") || strings.Contains(r1, "staged") || strings.Contains(r1, "pending")
			if strings.HasPrefix(tc.name, "corrupt") && (!strings.Contains(s1, "available=10") || !strings.Contains(r1, "SHARDIS_CORRUPT")) {
				t.Errorf("%s, %s: answered %s, want a SHARDIS_CORRUPT error and nothing taken", sc.name, tc.name, r1)
			}
			if strings.Contains(tc.name, "first offset of this release's") && taken && !strings.Contains(s1, queue+RedoFirstSuffix+"=151") {
				t.Errorf("%s, %s: left\n%s\nwant %s=151 (the first offset it handed out)", sc.name, tc.name, s1, queue+RedoFirstSuffix)
			}
			if tc.name == "taken" && (!taken || !strings.Contains(s1, "available=7")) {
				t.Errorf("%s, %s: answered %s and left\n%s\nwant the part taken (7 units left)", sc.name, tc.name, r1, s1)
			}
			if sc.now != localScript || !strings.Contains(tc.name, "record") {
				continue // the local script's rule (a stage keeps a failed record of another token: staged.go)
			}
			kept := strings.Contains(tc.name, "reserved record") || strings.Contains(tc.name, "hash layout")
			if kept && (!strings.Contains(r1, "existing") || strings.Contains(s1, "available=7")) {
				t.Errorf("%s, %s: answered %s and left\n%s\nwant existing, nothing taken", sc.name, tc.name, r1, s1)
			}
			if !kept && (!taken || !strings.Contains(s1, "available=7")) {
				t.Errorf("%s, %s: answered %s and left\n%s\nwant the record replaced and the part taken", sc.name, tc.name, r1, s1)
			}
		}
	}
}

// partDue.arg is the part deadline argument lib_part_due.lua reads: "+"
// and a hold in ms, or a time in ms.
func TestPartDueArg(t *testing.T) {
	for _, c := range []struct {
		d    partDue
		want string
	}{
		{partDue{hold: 1500 * time.Millisecond}, "+1500"},
		{partDue{hold: 7 * 24 * time.Hour}, "+604800000"},
		{partDue{at: time.UnixMilli(1764412800123)}, "1764412800123"},
	} {
		if got := c.d.arg(); got != c.want {
			t.Errorf("%+v.arg() = %q, want %q", c.d, got, c.want)
		}
	}
}
