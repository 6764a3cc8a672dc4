package inventory

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The staged commit's splice (order_commit_staged, lua/order_codec.lua)
// writes and answers exactly what decoding the record and writing it back
// whole (order_get, order_put) does: every record is committed by the
// script as it is and by a copy of it without the splice, from the same
// stored value, and the two values (reserved_at apart, the node's clock),
// TTLs and replies must agree. The records it must decline (another
// token, moved, a field it does not expect, a time field not written as
// an offset, the hash layout) go the decoding way in both.
func TestCommitStagedAsDecoded(t *testing.T) {
	e := newGroupEnv(t, 32)
	e.warm(t)
	ctx, c := e.ctx, e.admin
	full := cutScript(t, orderDecideScript, [2]string{"  local created, dlS, leaseS = order_commit_staged(key, token, order_pack(ARGV[6], token))\n",
		"  local created, dlS, leaseS = nil, nil, nil\n"})
	// splice is the script that refuses what its splice declines: the
	// cases that must be spliced commit through it, the others fail it
	splice := cutScript(t, orderDecideScript, [2]string{"  local created, dlS, leaseS = order_commit_staged(key, token, order_pack(ARGV[6], token))\n",
		"  local created, dlS, leaseS = order_commit_staged(key, token, order_pack(ARGV[6], token))\n  if not created then return redis.error_reply('DECLINED') end\n"})

	const created = "1700000000000"
	token := "tok1"
	parts := func(id string, n int, tok string) string {
		var ps []OrderPart
		for i := range n {
			ps = append(ps, OrderPart{ID: stockPartID(id, tok, i), Node: "n1", Kind: PartStock, Item: i, Route: "a",
				SKU: "s" + strconv.Itoa(i), Qty: int64(i + 1), Redo: RedoLogKey(i), Offset: int64(10 + i)})
		}
		return encodeOrderParts(id, tok, ps)
	}
	staging := func(id, tok, user string, n int) string {
		p, err := stagingOrderPieces(tok, "dg", user, 600000, 30000, parts(id, n, tok))
		if err != nil {
			t.Fatal(err)
		}
		return p[0] + created + p[1]
	}
	cases := []struct {
		name, stored string
		hash         bool // stored in the hash layout of the releases before
		spliced      bool // the splice commits it (else it declines)
	}{
		{"one part, no user", staging("o1", token, "", 1), false, true},
		{"three parts, a user", staging("o3", token, "u-9", 3), false, true},
		{"another token", staging("o4", "tok2", "", 1), false, false},
		{"moved", "S" + strings.TrimPrefix(staging("o5", token, "", 1), "s"), false, false},
		{"a reason after lease", staging("o6", token, "", 1) + "\x1d\x1dwhy", false, false},
		{"lease written absolute", strings.Replace(staging("o7", token, "", 1), "\x1d30000", "\x1d="+created, 1), false, false},
		{"reserving, not staging", "b" + strings.TrimPrefix(staging("o8", token, "", 1), "s"), false, false},
		{"hash layout", "", true, false},
	}
	// commit runs s's commit of the stored record and returns the record
	// it left (its fields, reserved_at apart: the node's clock), that
	// reserved_at, the key's TTL and the reply
	commit := func(s *luaScript, key, stored string, hash bool, blob string) (map[string]string, string, time.Duration, any) {
		t.Helper()
		c.Del(ctx, key)
		if hash {
			c.HSet(ctx, key, "status", "staging", "token", token, "created", created, "deadline", "1700000600000", "lease", "1700000030000")
		} else {
			c.Set(ctx, key, stored, time.Hour)
		}
		v, err := e.inv.run(ctx, e.n, s, []string{key}, string(opCommit), token, blob)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		var f map[string]string
		raw, err := c.Get(ctx, key).Result() // a committed hash is written back packed
		if err == nil {
			if f, err = unpackOrderValue(raw); err == nil {
				if again, perr := packOrder(f); perr != nil || again != raw {
					t.Errorf("%s: record %q is not what the codec writes for its fields (%q, %v)", key, raw, again, perr)
				}
			}
		}
		if err != nil && err != redis.Nil {
			t.Fatalf("%s: %v", key, err)
		}
		at := f["reserved_at"]
		delete(f, "reserved_at")
		ttl, _ := c.PTTL(ctx, key).Result()
		return f, at, ttl, v
	}
	for _, tc := range cases {
		id := "c-" + strings.ReplaceAll(tc.name, " ", "-")
		blob := parts(id, 2, token)
		key := orderKey(id)
		f1, at1, ttl1, r1 := commit(orderDecideScript, key, tc.stored, tc.hash, blob)
		f2, at2, ttl2, r2 := commit(full, key, tc.stored, tc.hash, blob)
		sameTTL := ttl1 == ttl2 || (ttl1 > 0 && ttl2 > 0 && (ttl1-ttl2).Abs() < time.Second)
		if fmt.Sprint(f1) != fmt.Sprint(f2) || !sameTTL || fmt.Sprint(r1) != fmt.Sprint(r2) {
			t.Errorf("%s: the splice left %v (TTL %v) and answered %v; decoding left %v (TTL %v) and answered %v",
				tc.name, f1, ttl1, r1, f2, ttl2, r2)
			continue
		}
		a1, err1 := strconv.ParseInt(at1, 10, 64)
		a2, err2 := strconv.ParseInt(at2, 10, 64)
		if (at1 != "" || at2 != "") && (err1 != nil || err2 != nil || a2 < a1 || a2-a1 > 5000) {
			t.Errorf("%s: reserved_at %q and %q, want two close times", tc.name, at1, at2)
		}
		if tc.hash {
			c.Del(ctx, key)
			c.HSet(ctx, key, "status", "staging", "token", token, "created", created, "deadline", "1700000600000", "lease", "1700000030000")
		} else {
			c.Set(ctx, key, tc.stored, time.Hour)
		}
		if _, err := e.inv.run(ctx, e.n, splice, []string{key}, string(opCommit), token, blob); (err == nil) != tc.spliced {
			t.Errorf("%s: the splice alone answered %v, want it to commit: %v", tc.name, err, tc.spliced)
		}
		if tc.spliced && (f1["status"] != "reserved" || at1 == "" || ttl1 != -1) {
			t.Errorf("%s: committed record %v (reserved_at %q, TTL %v), want reserved, reserved_at set, no TTL", tc.name, f1, at1, ttl1)
		}
	}
}

// packTestScript answers order_pack of its first argument under the token
// of its second.
var packTestScript = newGroupedScript("pack-test", false, `
return order_pack(ARGV[4], ARGV[5])
`)

// TestPackOrderPartsAsLua: a carried commit sends its parts list packed
// by the client (packOrderParts), where the commit op packs it on the
// node (order_pack): the two must store the same value, for lists of the
// attempt's token and for the forms stored literally.
func TestPackOrderPartsAsLua(t *testing.T) {
	e := newGroupEnv(t, 32)
	one := []OrderPart{{ID: stockPartID("o1", "tok1", 0), Node: "n1", Kind: PartStock, Item: 0, Route: "a", SKU: "s", Qty: 1,
		Redo: RedoLogKey(3), Offset: 7}}
	lists := []string{
		encodeOrderParts("o1", "tok1", one),
		encodeOrderParts("o1", "tok2", one), // another token's
		encodeOrderParts("o1", "tok1", nil),
		"", "~", "~tok1", "=x", "\x1ex", "plain", "~tok1x",
	}
	for _, l := range lists {
		v, err := e.inv.run(e.ctx, e.n, packTestScript, []string{"x"}, l, "tok1")
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if got, want := fmt.Sprint(v), packOrderParts(l, "tok1"); got != want {
			t.Errorf("order_pack(%q) = %q, packOrderParts %q", l, got, want)
		}
	}
}

// commitExactScript runs order_commit_exact on KEYS[2] with its three
// arguments and answers 1 when it committed, 0 when it left the record.
var commitExactScript = newGroupedScript("commit-exact-test", true, `
if order_commit_exact(KEYS[2], ARGV[4], ARGV[5], ARGV[6]) then return 1 end
return 0
`)

// TestCommitExactAsSpliced: a carried commit (order_commit_exact, with
// the values stagedCommitValues builds on the client) leaves exactly the
// record the commit op's splice (order_commit_staged) leaves, reserved_at
// apart (the node's clock), for staging records with and without a user
// and with several parts; and it leaves any other record as it was, its
// TTL too: one of another token, another created, moved, or with a field
// changed, a missing key (still missing), and a key of another type.
func TestCommitExactAsSpliced(t *testing.T) {
	e := newGroupEnv(t, 32)
	e.warm(t)
	ctx, c := e.ctx, e.admin
	const created, ttl, lease = int64(1700000000000), int64(600000), int64(30000)
	for _, tc := range []struct {
		name, user string
		n          int
	}{{"one part", "", 1}, {"three parts, a user", "u-9", 3}} {
		id, token := "x-"+strconv.Itoa(tc.n), "tok1"
		var promised, taken []OrderPart
		for i := range tc.n {
			p := OrderPart{ID: stockPartID(id, token, i), Node: "n1", Kind: PartStock, Item: i, Route: "a",
				SKU: "s" + strconv.Itoa(i), Qty: int64(i + 1), Redo: RedoLogKey(i)}
			promised = append(promised, p)
			p.Offset = int64(10 + i)
			taken = append(taken, p)
		}
		pblob, tblob := encodeOrderParts(id, token, promised), encodeOrderParts(id, token, taken)
		pieces, err := stagingOrderPieces(token, "dg", tc.user, ttl, lease, pblob)
		if err != nil {
			t.Fatal(err)
		}
		staged, prefix, crS, err := stagedCommitValues(token, [2]string{pieces[0], pieces[1]}, created, packOrderParts(tblob, token))
		if err != nil {
			t.Fatal(err)
		}
		if want := pieces[0] + strconv.FormatInt(created, 10) + pieces[1]; staged != want {
			t.Fatalf("%s: staged value %q, the stage writes %q", tc.name, staged, want)
		}
		key := orderKey(id)
		if crS != strconv.FormatInt(created, 10) {
			t.Fatalf("%s: created %q, want %d", tc.name, crS, created)
		}
		// the exact commit, then the splice, from the same stored value
		c.Set(ctx, key, staged, time.Hour)
		v, err := e.inv.run(ctx, e.n, commitExactScript, []string{key}, staged, prefix, crS)
		if err != nil || fmt.Sprint(v) != "1" {
			t.Fatalf("%s: the exact commit answered %v, %v, want 1", tc.name, v, err)
		}
		exact := c.Get(ctx, key).Val()
		c.Set(ctx, key, staged, time.Hour)
		if _, err := e.inv.run(ctx, e.n, orderDecideScript, []string{key}, string(opCommit), token, tblob); err != nil {
			t.Fatal(err)
		}
		spliced := c.Get(ctx, key).Val()
		cut := func(s string) string { return s[:strings.LastIndex(s, orderGS)+1] }
		if cut(exact) != cut(spliced) || cut(exact) != prefix {
			t.Errorf("%s: the exact commit wrote %q, the splice %q (prefix %q)", tc.name, exact, spliced, prefix)
		}
		if ttl := c.PTTL(ctx, key).Val(); ttl != -1 {
			t.Errorf("%s: committed record has TTL %v, want none", tc.name, ttl)
		}
		// anything but that exact value stays as it was
		for _, other := range []string{
			strings.Replace(staged, "tok1", "tok2", 1),
			strings.Replace(staged, crS, strconv.FormatInt(created+1, 10), 1),
			"S" + staged[1:],
			staged + orderGS + "why",
			strings.Replace(staged, "dg", "dh", 1),
		} {
			c.Set(ctx, key, other, time.Hour)
			v, err := e.inv.run(ctx, e.n, commitExactScript, []string{key}, staged, prefix, crS)
			if err != nil || fmt.Sprint(v) != "0" || c.Get(ctx, key).Val() != other {
				t.Errorf("%s: the exact commit of %q answered %v, %v and left %q, want 0 and the record as it was", tc.name, other, v, err, c.Get(ctx, key).Val())
			}
			if ttl := c.TTL(ctx, key).Val(); ttl <= 59*time.Minute {
				t.Errorf("%s: the exact commit of %q left its TTL at %v, want the hour it had", tc.name, other, ttl)
			}
		}
		c.Del(ctx, key)
		v, err = e.inv.run(ctx, e.n, commitExactScript, []string{key}, staged, prefix, crS)
		if n := c.Exists(ctx, key).Val(); err != nil || fmt.Sprint(v) != "0" || n != 0 {
			t.Errorf("%s: the exact commit of a missing record answered %v, %v and left %d keys, want 0 and none", tc.name, v, err, n)
		}
		c.HSet(ctx, key, "status", "staging")
		v, err = e.inv.run(ctx, e.n, commitExactScript, []string{key}, staged, prefix, crS)
		if h := c.HGetAll(ctx, key).Val(); err != nil || fmt.Sprint(v) != "0" || len(h) != 1 || h["status"] != "staging" {
			t.Errorf("%s: the exact commit of a hash answered %v, %v and left %v, want 0 and the hash as it was", tc.name, v, err, h)
		}
		c.Del(ctx, key)
	}
}
