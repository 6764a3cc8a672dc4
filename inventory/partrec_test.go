package inventory

import (
	"context"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
)

// partCodecCases are part records of every shape the scripts write, and
// odd ones whose references do not reproduce a field (stored literally).
func partCodecCases() []struct {
	id string
	f  map[string]string
} {
	sp := stockPartID("o-1", "ab12cd34ef56", 0)
	qp := quotaPartID("o|2", "tok", "r", "s:|k")
	out := []struct {
		id string
		f  map[string]string
	}{
		{sp, map[string]string{"state": "pending", "kind": "s", "order": "o-1", "token": "ab12cd34ef56", "sku": "mem-1",
			"qty": "1", "item": "0", "counter": stockKey("all", "mem-1"), "redo": RedoLogKey(3), "offset": "1234",
			"deadline": "1795000000000", "at": "1794999990000"}},
		{qp, map[string]string{"state": "confirmed", "kind": "q", "order": "o|2", "token": "tok", "sku": "s:|k",
			"qty": "2", "item": "-1", "counter": quotaKey("r", "s:|k", "u:1"), "offset": "0",
			"deadline": "1795000000000", "at": "1794999990000", "settled_at": "1795000000001", "held": "1"}},
		// a tombstone: no kind, no token field
		{sp, map[string]string{"state": "cancelled", "qty": "0", "order": "o-1", "tombstone": "1", "at": "17"}},
		{sp, map[string]string{"state": "pending", "kind": "s", "order": "o-1", "token": "ab12cd34ef56", "sku": "mem-1",
			"qty": "1", "item": "0", "counter": stockKey("all", "mem-1"), "redo": RedoLogKey(0), "offset": "1",
			"deadline": "5", "at": "4", "stuck_since": "9", "stuck_tries": "3", "moved": "2:fp"}},
		// references that do not hold: every field literal
		{sp, map[string]string{"state": "weird", "kind": "x", "order": "zz", "token": "=t", "sku": "^",
			"qty": "=1", "item": "=0", "counter": "other:key", "redo": "inv:redo:=x", "offset": "^"}},
		{"o|t|^", map[string]string{"state": "pending", "item": "^", "order": "o|t|^|long", "token": "q", "sku": "other",
			"counter": stockKey("r", "sku:x"), "redo": "inv:redo:"}},
		{"x", map[string]string{"order": "x", "token": "y", "counter": quotaKeyPrefix, "sku": "", "item": "x"}},
	}
	// and records pieced together from the fragments the references
	// look for, so every branch of both codecs meets the others
	frag := []string{"", "=", "^", "|", ":", "0", "12", "o", "t|", stockKeyPrefix, quotaKeyPrefix, redoLogKeyPrefix, "pending", "cancelled"}
	rng := rand.New(rand.NewPCG(25, 1))
	piece := func() string {
		var b strings.Builder
		for range rng.IntN(4) {
			b.WriteString(frag[rng.IntN(len(frag))])
		}
		return b.String()
	}
	for range 300 {
		f := map[string]string{}
		for _, name := range partFields {
			if rng.IntN(3) > 0 {
				f[name] = piece()
			}
		}
		id := piece() + "|" + piece()
		if rng.IntN(2) == 0 {
			id = f["order"] + "|" + f["token"] + "|" + f["item"]
		}
		out = append(out, struct {
			id string
			f  map[string]string
		}{id, f})
	}
	return out
}

// part_read and part_put (Lua) and packPart and unpackPartValue (Go) are
// one codec: each reads what the other writes, field for field, and both
// write the same bytes; a record in the hash layout of the releases before
// reads the same through part_read; part_put keeps a key's TTL, or sets
// the one it is given.
func TestPartCodecLuaMatchesGo(t *testing.T) {
	srv := redistest.StartN(t, 1, redistest.Options{})[0]
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	codec := redis.NewScript(`
local partPrefix = ARGV[1]
` + preludeFor(partCodecLua) + partCodecLua + `
if ARGV[2] == 'put' then
  local t = {}
  for i = 4, #ARGV, 2 do t[ARGV[i]] = ARGV[i + 1] end
  part_put(KEYS[1], t, tonumber(ARGV[3]))
  return redis.call('GET', KEYS[1])
end
local t = part_read(KEYS[1])
if not t then return false end
local out = {}
for k, v in pairs(t) do out[#out + 1] = k out[#out + 1] = v end
return out
`)
	luaGet := func(id string) map[string]string {
		t.Helper()
		v, err := codec.Run(ctx, c, []string{partKey(id)}, partKeyPrefix, "get").StringSlice()
		if err != nil {
			t.Fatalf("part_read %s: %v", id, err)
		}
		out := map[string]string{}
		for i := 0; i+1 < len(v); i += 2 {
			out[v[i]] = v[i+1]
		}
		return out
	}
	for _, tc := range partCodecCases() {
		want := maps.Clone(tc.f)
		maps.DeleteFunc(want, func(_, v string) bool { return v == "" })
		args := []any{partKeyPrefix, "put", ""}
		for k, v := range tc.f {
			args = append(args, k, v)
		}
		got, err := codec.Run(ctx, c, []string{partKey(tc.id)}, args...).Text()
		if err != nil {
			t.Fatalf("part_put %s %v: %v", tc.id, tc.f, err)
		}
		if g := packPart(tc.id, tc.f); g != got {
			t.Errorf("part %s %v: Lua packs %q, Go %q", tc.id, tc.f, got, g)
		}
		if back, err := unpackPartValue(tc.id, got); err != nil || !maps.Equal(back, want) {
			t.Errorf("Go unpacks Lua's %q of %s: %v, %v; want %v", got, tc.id, back, err, want)
		}
		if err := c.Set(ctx, partKey(tc.id), packPart(tc.id, tc.f), 0).Err(); err != nil {
			t.Fatal(err)
		}
		if back := luaGet(tc.id); !maps.Equal(back, want) {
			t.Errorf("Lua reads Go's packing of %s: %v; want %v", tc.id, back, want)
		}
		// the hash layout, as the scripts before wrote it
		c.Del(ctx, partKey(tc.id))
		if err := c.HSet(ctx, partKey(tc.id), want).Err(); err != nil {
			t.Fatal(err)
		}
		if back := luaGet(tc.id); !maps.Equal(back, want) {
			t.Errorf("Lua reads the hash layout of %s: %v; want %v", tc.id, back, want)
		}
		if f, err := ReadPart(ctx, c, tc.id).Fields(); err != nil || !maps.Equal(f, want) {
			t.Errorf("ReadPart of the hash layout of %s: %v, %v; want %v", tc.id, f, err, want)
		}
		c.Del(ctx, partKey(tc.id))
	}
	if v, err := codec.Run(ctx, c, []string{partKey("none")}, partKeyPrefix, "get").Result(); err != redis.Nil {
		t.Errorf("part_read of no key: %v, %v; want nil", v, err)
	}
	if f, err := ReadPart(ctx, c, "none").Fields(); err != nil || len(f) != 0 {
		t.Errorf("ReadPart of no key: %v, %v; want no fields", f, err)
	}

	// TTL: kept by a write without one (as HSET kept it), set by one with.
	k := partKey("ttl|t|0")
	c.HSet(ctx, k, "state", "pending")
	c.Expire(ctx, k, time.Hour)
	if _, err := codec.Run(ctx, c, []string{k}, partKeyPrefix, "put", "", "state", "confirmed").Result(); err != nil {
		t.Fatal(err)
	}
	if ttl := c.TTL(ctx, k).Val(); ttl < 59*time.Minute {
		t.Errorf("TTL after a write without one: %v, want the hour kept", ttl)
	}
	if _, err := codec.Run(ctx, c, []string{k}, partKeyPrefix, "put", "60", "state", "cancelled").Result(); err != nil {
		t.Fatal(err)
	}
	if ttl := c.TTL(ctx, k).Val(); ttl > time.Minute || ttl < 50*time.Second {
		t.Errorf("TTL after a write with 60 s: %v", ttl)
	}
}

// A malformed packed value is ErrCorrupt naming the field, never a panic.
func TestUnpackPartValueRejects(t *testing.T) {
	for _, v := range []string{"z", "p\x1fs\x1f1\x1f1\x1f1\x1fzz", "p\x1f\x1f\x1f\x1f\x1f\x1f^", "p\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f99",
		"p\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f1\x1f99", "p\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f-1",
		strings.Repeat("\x1f", len(partFields))} {
		if f, err := unpackPartValue("o|t|0", v); err == nil {
			t.Errorf("unpack %q = %v, want an error", v, f)
		}
	}
}

// FuzzPartCodec: any record round-trips through the Go codec.
func FuzzPartCodec(f *testing.F) {
	for _, tc := range partCodecCases() {
		f.Add(tc.id, tc.f["order"], tc.f["token"], tc.f["sku"], tc.f["counter"], tc.f["item"], tc.f["redo"], tc.f["state"])
	}
	f.Fuzz(func(t *testing.T, id, order, token, sku, counter, item, redo, state string) {
		in := map[string]string{"order": order, "token": token, "sku": sku, "counter": counter, "item": item,
			"redo": redo, "state": state, "qty": "1"}
		for _, v := range in {
			if strings.ContainsAny(v, partUS) {
				t.Skip("no field holds a control byte")
			}
		}
		maps.DeleteFunc(in, func(_, v string) bool { return v == "" })
		got, err := unpackPartValue(id, packPart(id, in))
		if err != nil || !maps.Equal(got, in) {
			t.Fatalf("round trip of %s %v: %v, %v", id, in, got, err)
		}
	})
}

// partFieldsOn reads part id's record on c in either layout (ReadPart),
// or, when it has none, the inline part it is (inlineFieldsOn), as the
// scripts' part_get does; the tests' one way to look at a part.
func partFieldsOn(t testing.TB, ctx context.Context, c redis.Cmdable, id string) map[string]string {
	t.Helper()
	f, err := ReadPart(ctx, c, id).Fields()
	if err != nil {
		t.Fatalf("reading part %s: %v", id, err)
	}
	if len(f) == 0 {
		return inlineFieldsOn(t, ctx, c, id)
	}
	return f
}
