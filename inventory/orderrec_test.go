package inventory

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
)

// orderCodecCases are order records of every shape the scripts write, and
// odd ones whose references do not hold (stored literally).
func orderCodecCases() []map[string]string {
	tok := "ab12cd34ef56"
	out := []map[string]string{
		// local.lua: reserved when created
		{"status": "reserved", "token": tok, "digest": "9f3e2a1b4c5d6e7f", "deadline": "1795003600000",
			"created": "1795000000000", "parts": "~" + tok + "\x1es\x1f0\x1fn1\x1fa\x1fs\x1f1\x1f3\x1f17\x1f\x1f"},
		// stage_take.lua, then committed, decided, moved
		{"status": "confirmed", "token": tok, "lease": "1795000005000", "digest": "1", "deadline": "1795000600000",
			"created": "1795000000000", "parts": "~" + tok, "user": "u:1", "reserved_at": "1795000000100",
			"reason": "confirmed", "decided_at": "1795000000200", "moved": "3:fp"},
		// a tombstone, a failed record without created
		{"status": "cancelled", "reason": "tombstone", "decided_at": "1795000000000"},
		{"status": "failed", "token": "t", "reason": "no record", "decided_at": "17"},
		// the hash layout's JSON part list, a list of another token
		{"status": "reserved", "token": "t", "created": "5", "deadline": "4", "parts": `[{"p":"o|t|0"}]`},
		{"status": "staging", "token": "t", "parts": "~u\x1ex"},
		// references that do not hold, statuses of no code
		{"status": "odd", "token": "=", "created": "0123", "deadline": "1795000000000", "parts": "=x", "moved": "m"},
		{"status": "", "created": "-5", "lease": "9999999999999999", "parts": "~"},
		{"parts": "\x1eq", "reserved_at": "-0", "moved": "1"},
	}
	frag := []string{"", "=", "~", "+", "\x1e", "\x1f", "0", "12", "-3", "1795000000000", "t", "reserved", "r", "R", "x"}
	rng := rand.New(rand.NewPCG(25, 2))
	piece := func() string {
		var b strings.Builder
		for range rng.IntN(4) {
			b.WriteString(frag[rng.IntN(len(frag))])
		}
		return b.String()
	}
	statuses := []string{"reserving", "staging", "reserved", "confirmed", "cancelled", "failed", "", "x", "Reserved"}
	for range 400 {
		f := map[string]string{"status": statuses[rng.IntN(len(statuses))]}
		for _, name := range orderFields {
			if rng.IntN(3) > 0 {
				f[name] = piece()
			}
		}
		switch rng.IntN(3) {
		case 0:
			f["parts"] = "~" + f["token"] + piece()
		case 1:
			f["created"] = "1795000000000"
		}
		out = append(out, f)
	}
	return out
}

// orderCodecScript runs the Lua codec alone: "put" writes ARGV's field,
// value pairs with order_put (TTL ARGV[2], "" for none) and returns the
// value; "get" returns order_get's fields flat; "head" order_head's
// status, moved mark (1 or 0) and token.
var orderCodecScript = redis.NewScript(`
` + preludeFor(orderCodecLua) + orderCodecLua + `
if ARGV[1] == 'put' then
  local t = {}
  for i = 3, #ARGV, 2 do t[ARGV[i]] = ARGV[i + 1] end
  return order_put(KEYS[1], t, tonumber(ARGV[2]))
elseif ARGV[1] == 'head' then
  local st, moved, tok = order_head(KEYS[1], true)
  return {st or false, moved and 1 or 0, tok or false}
end
local t = order_get(KEYS[1])
if not t then return false end
local out = {}
for k, v in pairs(t) do out[#out + 1] = k out[#out + 1] = v end
return out
`)

// order_put, order_get and order_head (Lua) and packOrder and
// unpackOrderValue (Go) are one codec: each reads what the other writes,
// field for field, both write the same bytes, and the head agrees with
// the whole; a record in the hash layout of the releases before reads the
// same through order_get, order_head and ReadOrder; order_put keeps a
// key's TTL, or sets the one it is given.
func TestOrderCodecLuaMatchesGo(t *testing.T) {
	srv := redistest.StartN(t, 1, redistest.Options{})[0]
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	luaGet := func(id string) map[string]string {
		t.Helper()
		v, err := orderCodecScript.Run(ctx, c, []string{orderKey(id)}, "get").StringSlice()
		if err != nil {
			t.Fatalf("order_get %s: %v", id, err)
		}
		out := map[string]string{}
		for i := 0; i+1 < len(v); i += 2 {
			out[v[i]] = v[i+1]
		}
		return out
	}
	luaHead := func(id string, want map[string]string) {
		t.Helper()
		v, err := orderCodecScript.Run(ctx, c, []string{orderKey(id)}, "head").Slice()
		st, _ := v[0].(string)
		tok, _ := v[2].(string)
		if err != nil || st != want["status"] || v[1] != map[bool]int64{false: 0, true: 1}[want["moved"] != ""] || tok != want["token"] {
			t.Errorf("order_head of %v: %v, %v", want, v, err)
		}
	}
	for i, f := range orderCodecCases() {
		want := maps.Clone(f)
		maps.DeleteFunc(want, func(_, v string) bool { return v == "" })
		args := []any{"put", ""}
		for k, v := range f {
			args = append(args, k, v)
		}
		got, err := orderCodecScript.Run(ctx, c, []string{orderKey("o")}, args...).Text()
		if err != nil {
			t.Fatalf("order_put %q: %v", f, err)
		}
		if g, err := packOrder(f); err != nil || g != got {
			t.Errorf("packOrder(%q) = %q, %v; order_put wrote %q", f, g, err, got)
		}
		if back, err := unpackOrderValue(got); err != nil || !maps.Equal(back, want) {
			t.Errorf("unpackOrderValue(%q) = %q, %v; want %q", got, back, err, want)
		}
		if back := luaGet("o"); !maps.Equal(back, want) {
			t.Errorf("order_get of %q = %q; want %q", got, back, want)
		}
		luaHead("o", want)
		if rd, err := ReadOrder(ctx, c, "o").Fields(); err != nil || !maps.Equal(rd, want) {
			t.Errorf("ReadOrder of %q: %q, %v; want %q", got, rd, err, want)
		}
		if i%8 != 0 {
			continue
		}
		// the hash layout of the releases before
		hid := "h"
		c.Del(ctx, orderKey(hid))
		if len(want) > 0 {
			if err := c.HSet(ctx, orderKey(hid), want).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if len(want) > 0 {
			if back := luaGet(hid); !maps.Equal(back, want) {
				t.Errorf("order_get of the hash %q = %q", want, back)
			}
			if rd, err := ReadOrder(ctx, c, hid).Fields(); err != nil || !maps.Equal(rd, want) {
				t.Errorf("ReadOrder of the hash %q: %q, %v", want, rd, err)
			}
			luaHead(hid, want)
		}
	}
	if f, err := ReadOrder(ctx, c, "none").Fields(); err != nil || len(f) != 0 {
		t.Errorf("ReadOrder of no key: %v, %v; want no fields", f, err)
	}
	if v, err := orderCodecScript.Run(ctx, c, []string{orderKey("none")}, "get").Result(); err != redis.Nil {
		t.Errorf("order_get of no key: %v, %v; want nil", v, err)
	}
	// the TTL: kept when none is given, set when one is
	rec := []any{"status", "reserved", "token", "t"}
	c.Set(ctx, orderKey("ttl"), "x", time.Hour)
	orderCodecScript.Run(ctx, c, []string{orderKey("ttl")}, append([]any{"put", ""}, rec...)...)
	if d := c.TTL(ctx, orderKey("ttl")).Val(); d < 59*time.Minute {
		t.Errorf("order_put without a TTL: TTL %v, want the hour kept", d)
	}
	orderCodecScript.Run(ctx, c, []string{orderKey("ttl")}, append([]any{"put", "60"}, rec...)...)
	if d := c.TTL(ctx, orderKey("ttl")).Val(); d <= 0 || d > time.Minute {
		t.Errorf("order_put with TTL 60: TTL %v", d)
	}
}

// A malformed packed record is ErrCorrupt in Go, naming what is wrong, and
// a SHARDIS_CORRUPT error in Lua (before the script writes anything).
func TestOrderCodecRejectsMalformed(t *testing.T) {
	for _, v := range []string{"", "z", "?t", "rt\x1dabc\x1d5", "rt\x1d\x1d5", "Rt", "rt" + strings.Repeat("\x1d", 10) + "m",
		"rt" + strings.Repeat("\x1d", 11) + "x"} {
		if f, err := unpackOrderValue(v); err == nil {
			t.Errorf("unpackOrderValue(%q) = %q, want ErrCorrupt", v, f)
		}
	}
	srv := redistest.StartN(t, 1, redistest.Options{})[0]
	c := srv.Client(t)
	ctx := context.Background()
	for _, v := range []string{"z", "rt\x1dabc\x1d5"} {
		c.Set(ctx, orderKey("bad"), v, 0)
		if _, err := orderCodecScript.Run(ctx, c, []string{orderKey("bad")}, "get").Result(); err == nil ||
			!strings.Contains(err.Error(), "SHARDIS_CORRUPT") {
			t.Errorf("order_get of %q: %v, want SHARDIS_CORRUPT", v, err)
		}
	}
}

// orderFieldsOn reads order id's record on c in either layout
// (ReadOrder); no fields when it has none.
func orderFieldsOn(t testing.TB, ctx context.Context, c redis.Cmdable, id string) map[string]string {
	t.Helper()
	f, err := ReadOrder(ctx, c, id).Fields()
	if err != nil {
		t.Fatalf("order %s: %v", id, err)
	}
	return f
}

// setOrderFields changes fields of order id's packed record on c (its TTL
// kept): "" removes one.
func setOrderFields(t testing.TB, ctx context.Context, c redis.Cmdable, id string, ch map[string]string) {
	t.Helper()
	f := orderFieldsOn(t, ctx, c, id)
	maps.Copy(f, ch)
	v, err := packOrder(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetArgs(ctx, orderKey(id), v, redis.SetArgs{KeepTTL: true}).Err(); err != nil {
		t.Fatal(err)
	}
}

// lua/order_codec.lua and lua/order_head.lua spell the status codes and
// the separator as the Go codec does (orderStatusCodes, orderGS).
func TestOrderCodecLuaSpellsGoConstants(t *testing.T) {
	for st, c := range orderStatusCodes {
		for _, w := range []string{"st == '" + string(st) + "' then head = '" + string(c) + "'",
			"b == " + strconv.Itoa(int(c-'a'+'A')) + " then return '" + string(st) + "'"} {
			if !strings.Contains(orderCodecLua, w) {
				t.Errorf("the order codec's Lua does not spell %q as the Go constants do", w)
			}
		}
	}
	if orderGS != "\x1d" || strings.Count(orderCodecLua, "'\\029'") < 4 {
		t.Errorf("the packed order record's separator changed in Go (%q): the Lua writes \\029", orderGS)
	}
}

// TestReservedRecordHasNoTTL: a reserved order record has no TTL, whether
// the one-script reserve wrote it or an attempt's commit did (orderrec.go,
// "TTL"); the decisions give it the retention, and an attempt that failed
// keeps the retention its stage gave it.
func TestReservedRecordHasNoTTL(t *testing.T) {
	e := newStagedEnv(t)
	retention := e.inv.cfg.Retention
	ttlOf := func(id string) time.Duration {
		t.Helper()
		home, err := e.inv.homeFor(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return e.clients[home.Name()].TTL(e.ctx, orderKey(id)).Val()
	}
	local := e.homedOn("ttl-local", "n1") // route a is n1 alone: the one-script path
	staged := e.awayOrder("ttl-staged")   // route b is n2 alone, the home elsewhere: stage, take, commit
	for id, items := range map[string][]Item{local: {{Route: "a", SKU: "s", Quantity: 1}}, staged: {{Route: "b", SKU: "s", Quantity: 1}}} {
		if _, err := e.inv.Reserve(e.ctx, id, items, "", time.Minute); err != nil {
			t.Fatal(err)
		}
		// the staged path commits off the caller's path: the record is
		// staging (with the stage's TTL) until that commit lands
		e.inv.bg.wg.Wait()
		if d := ttlOf(id); d != -1 {
			t.Errorf("reserved order %s: TTL %v, want none (-1)", id, d)
		}
	}
	if st := e.inv.Stats(); st.LocalReservations == 0 || st.StagedReservations == 0 {
		t.Fatalf("Stats %+v: want one order by each path", st)
	}
	if _, err := e.inv.Confirm(e.ctx, local); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Cancel(e.ctx, staged); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{local, staged} {
		// the retention counts from when its parts come due (order.lua's
		// final): the order's deadline (a minute from its Reserve) plus
		// partGrace
		if d := ttlOf(id); d < retention+time.Minute-10*time.Second || d > retention+time.Minute+2*time.Second {
			t.Errorf("decided order %s: TTL %v, want the retention %v after its parts come due", id, d, retention)
		}
	}
	// a one-round attempt whose route c take is short: its stage landed
	// and is decided failed, with the retention the stage gave it
	items := stagedItems()
	items[2].Quantity = stagedStock + 1
	if _, err := e.inv.Reserve(e.ctx, "ttl-failed", items, "", time.Minute); !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("Reserve of more than route c holds: %v, want ErrInsufficientStock", err)
	}
	if d := ttlOf("ttl-failed"); d < retention-time.Minute || d > retention {
		t.Errorf("failed order: TTL %v, want the retention %v", d, retention)
	}
}
