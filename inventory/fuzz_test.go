package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
)

// The fuzzers of this file run the public API and the Lua scripts against
// real redis-server nodes. Each fuzz process (the coordinator and every
// worker) starts its own three nodes once, in the Fuzz function, and
// every iteration works on SKU and order ids of its own (a per-process
// sequence number is prepended), so iterations never see each other's
// stock.

// fuzzEnv is three redis-server nodes n1..n3 and an inventory over them,
// with routes "all" (n1, n2, n3) and "one" (n2) of the "inventory" server.
type fuzzEnv struct {
	inv    *Inventory
	r      *router.Router
	raw    map[string]*redis.Client // node name → a client of its own, for checks
	routes map[string][]string
	seq    atomic.Int64
}

var fuzzNodeNames = []string{"n1", "n2", "n3"}

func newFuzzEnv(f *testing.F) *fuzzEnv {
	f.Helper()
	srvs := redistest.StartN(f, 3, redistest.Options{})
	cfg := config.Default()
	// Generous probe timeouts: fuzz workers keep the CPU busy, and a
	// node marked DOWN would fail iterations for the wrong reason.
	cfg.Health.Heartbeat = time.Second
	cfg.Health.Timeout = 5 * time.Second
	cfg.Nodes = map[string]config.Node{}
	env := &fuzzEnv{raw: map[string]*redis.Client{}, routes: map[string][]string{
		"all": fuzzNodeNames, "one": {"n2"},
	}}
	for i, s := range srvs {
		cfg.Nodes[fuzzNodeNames[i]] = config.Node{Addr: s.Addr(), Weight: 1}
		env.raw[fuzzNodeNames[i]] = s.Client(f)
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: env.routes}}
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := router.New(ctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: log})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = r.Close() })
	for _, n := range r.Nodes() {
		if !n.Usable() {
			f.Fatalf("node %s is not up: %v", n.Name(), n.DownReason())
		}
	}
	env.r = r
	if env.inv, err = New(r, Options{Logger: log}); err != nil {
		f.Fatal(err)
	}
	return env
}

// prefix returns a prefix unique to one iteration of this process.
func (e *fuzzEnv) prefix() string { return "f" + strconv.FormatInt(e.seq.Add(1), 10) + "~" }

// fzValidID is the documented id rule: 1..128 bytes of UTF-8, no
// control bytes.
func fzValidID(s string) bool {
	if s == "" || len(s) > MaxIDLen || !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

func fzValidQty(q int64) bool { return q >= 1 && q <= MaxQuantity }

// fzCounters is one node's stock hash of a SKU, as stored.
type fzCounters struct {
	raw                                           map[string]string
	available, reserved, confirmed, loaded, limit int64
}

func (c fzCounters) nums() [5]int64 {
	return [5]int64{c.available, c.reserved, c.confirmed, c.loaded, c.limit}
}

// stockOf reads the stock hash of (route, sku) on every node of route.
func (e *fuzzEnv) stockOf(t *testing.T, route, sku string) map[string]fzCounters {
	t.Helper()
	out := map[string]fzCounters{}
	for _, name := range e.routes[route] {
		out[name] = e.nodeStock(t, name, route, sku)
	}
	return out
}

// nodeStock reads the stock hash of (route, sku) on one node.
func (e *fuzzEnv) nodeStock(t *testing.T, name, route, sku string) fzCounters {
	t.Helper()
	m, err := e.raw[name].HGetAll(context.Background(), stockKey(route, sku)).Result()
	if err != nil {
		t.Fatalf("HGETALL on %s: %v", name, err)
	}
	c := fzCounters{raw: m}
	for field, p := range map[string]*int64{"available": &c.available, "reserved": &c.reserved,
		"confirmed": &c.confirmed, "loaded": &c.loaded, "limit": &c.limit} {
		if v, ok := m[field]; ok {
			if *p, err = strconv.ParseInt(v, 10, 64); err != nil {
				t.Fatalf("node %s: %s %s = %q is not an integer", name, stockKey(route, sku), field, v)
			}
		}
	}
	return c
}

// sameCounters compares counters by value (a field at 0 and a missing
// field are the same).
func sameCounters(a, b map[string]fzCounters) bool {
	if len(a) != len(b) {
		return false
	}
	for name, c := range a {
		if c.nums() != b[name].nums() {
			return false
		}
	}
	return true
}

// checkStock checks the per-node invariant of (route, sku) and returns
// the totals over the route's nodes.
func (e *fuzzEnv) checkStock(t *testing.T, route, sku string) (total fzCounters, per map[string]fzCounters) {
	t.Helper()
	per = e.stockOf(t, route, sku)
	for name, c := range per {
		if c.available < 0 || c.reserved < 0 || c.confirmed < 0 || c.loaded < 0 || c.limit < 0 {
			t.Fatalf("node %s: negative counter for %s/%q: %v", name, route, sku, c.raw)
		}
		if c.available+c.reserved+c.confirmed != c.loaded {
			t.Fatalf("node %s: available+reserved+confirmed != loaded for %s/%q: %v", name, route, sku, c.raw)
		}
		total.available += c.available
		total.reserved += c.reserved
		total.confirmed += c.confirmed
		total.loaded += c.loaded
	}
	return total, per
}

// quotaHeld sums the per-user quota counters of (route, sku, user) on the
// route's nodes.
func (e *fuzzEnv) quotaHeld(t *testing.T, route, sku, user string) int64 {
	t.Helper()
	var held int64
	for _, name := range e.routes[route] {
		v, err := e.raw[name].Get(context.Background(), quotaKey(route, sku, user)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("GET quota on %s: %v", name, err)
		}
		held += v
	}
	return held
}

// pendingOf returns the pending-index entries of an order on every node.
func (e *fuzzEnv) pendingOf(t *testing.T, orderID string) []string {
	t.Helper()
	var out []string
	for _, name := range fuzzNodeNames {
		ids, err := e.raw[name].ZRange(context.Background(), PendingKey, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ids {
			id, err := PendingPartID(context.Background(), e.raw[name], m) // a stock part is indexed by its redo-log place
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(id, orderID+"|") {
				out = append(out, name+":"+id)
			}
		}
	}
	return out
}

const (
	fzRouteOne     = 1 << iota // route "one" (one node) instead of "all"
	fzConfirm                  // confirm the reservation (else cancel it)
	fzSecondItem               // a second item of the same SKU
	fzQuotaCheck               // reserve a colliding-looking (sku, user) pair afterwards
	fzUnknownRoute             // route "nope", which is not configured
)

// FuzzScriptArgs runs LoadStock, Reserve (twice: the retry must return the
// same reservation), Confirm or Cancel, and the refusals that follow,
// through the public API with fuzzed ids, quantities, limits and ttl.
// Every call either succeeds or fails as the documented rules predict
// (ErrInvalid, ErrInsufficientStock, ErrLimitExceeded, ErrCancelled,
// ErrOrderMismatch, ErrConfirmed, ErrExpired), refused calls change
// nothing, and on every node available+reserved+confirmed == loaded with
// no counter negative.
func FuzzScriptArgs(f *testing.F) {
	env := newFuzzEnv(f)
	long := strings.Repeat("x", 200)
	type seed struct {
		order, sku, user              string
		load, limit, qty, qty2, ttlMs int64
		flags                         uint8
	}
	for _, s := range []seed{
		{"o-1", "tshirt-red", "alice", 100, 2, 2, 0, 0, fzConfirm},
		{"o-1", "tshirt-red", "alice", 100, 2, 2, 1, 0, fzSecondItem},        // over the limit
		{"o-2", "tshirt-red", "", 10, 0, 11, 0, 60_000, 0},                   // insufficient
		{"o-3", "sku", "bob", 7, -1, 7, 0, 0, fzRouteOne | fzConfirm},        // all of it, one node
		{"o-4", "sku", "bob", 9, 3, 2, 1, 1, fzSecondItem | fzConfirm},       // 1ms ttl: may expire
		{"o|5", "a:b", "c:d", 50, 5, 3, 0, 0, fzConfirm | fzQuotaCheck},      // separators in ids
		{"o{6}", "{sku}", "u|{x}", 50, 5, 3, 0, 0, fzConfirm | fzQuotaCheck}, // hash-tag braces
		{"ø-7", "ʃkü-✓", "üser", 30, 1, 1, 0, 0, fzConfirm},                  // unicode
		{"o\x00", "sku\x00", "u\x00", 10, 0, 1, 0, 0, 0},                     // NUL bytes
		{"o\xff", "sku\xfe", "u\xfd", 10, 5, 1, 0, 0, fzConfirm},             // invalid UTF-8
		{long, long, long, 10, 0, 1, 0, 0, 0},                                // over-long ids
		{"o-8", "sku", "u", math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MinInt64, math.MaxInt64, 0},
		{"o-9", "sku", "u", MaxQuantity, MaxQuantity, MaxQuantity, 0, -1, fzConfirm},
		{"o-10", "sku", "u", MaxQuantity + 1, 0, 0, -5, 0, 0},
		{"o-11", "sku", "u", 5, 0, 5, 0, 0, fzUnknownRoute},
	} {
		f.Add(s.order, s.sku, s.user, s.load, s.limit, s.qty, s.qty2, s.ttlMs, s.flags)
	}
	f.Fuzz(func(t *testing.T, order, sku, user string, load, limit, qty, qty2, ttlMs int64, flags uint8) {
		ctx := context.Background()
		inv := env.inv
		pfx := env.prefix()
		order, sku = pfx+order, pfx+sku
		route := "all"
		if flags&fzRouteOne != 0 {
			route = "one"
		}
		routeOK := flags&fzUnknownRoute == 0
		if !routeOK {
			route = "nope"
		}

		// LoadStock.
		// A load of 0 with a limit changes only the limit.
		loadOK := routeOK && fzValidID(sku) && (fzValidQty(load) || load == 0 && limit >= 0) && limit <= MaxQuantity
		lvl, err := inv.LoadStock(ctx, route, sku, load, limit)
		var loaded, effLimit int64
		switch {
		case !loadOK:
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("LoadStock(%q, %q, %d, %d) = %v, want ErrInvalid", route, sku, load, limit, err)
			}
		case err != nil:
			t.Fatalf("LoadStock(%q, %q, %d, %d): %v", route, sku, load, limit, err)
		default:
			loaded, effLimit = load, max(limit, 0)
			if lvl.Loaded != loaded || lvl.Available != loaded || lvl.Limit != effLimit {
				t.Fatalf("LoadStock(%d, limit %d) returned %+v", load, limit, lvl)
			}
		}
		checkRoute := route // where the SKU's counters are looked at
		if !routeOK {
			checkRoute = "all" // nothing can have been written anywhere
		}
		total, afterLoad := env.checkStock(t, checkRoute, sku)
		if total.loaded != loaded || total.available != loaded {
			t.Fatalf("after LoadStock: totals %+v, want %d loaded and available", total, loaded)
		}

		// Reserve.
		items := []Item{{Route: route, SKU: sku, Quantity: qty}}
		if flags&fzSecondItem != 0 {
			items = append(items, Item{Route: route, SKU: sku, Quantity: qty2})
		}
		ttl := time.Duration(ttlMs) * time.Millisecond
		valid := fzValidID(order) && (user == "" || fzValidID(user)) && ttl >= 0
		var want int64
		for _, it := range items {
			valid = valid && routeOK && fzValidID(it.SKU) && fzValidQty(it.Quantity)
			want += it.Quantity // only used when valid: no overflow (≤ 2·10⁹)
		}
		res, err := inv.Reserve(ctx, order, items, user, ttl)
		var wantErr error
		switch {
		case !valid:
			wantErr = ErrInvalid
		case user == "" && effLimit > 0: // a limited SKU needs a user
			wantErr = ErrInvalid
		case user != "" && effLimit > 0 && want > effLimit:
			wantErr = ErrLimitExceeded
		case want > loaded:
			wantErr = ErrInsufficientStock
		}
		if wantErr != nil {
			if wantErr == ErrInsufficientStock && loaded == 0 && errors.Is(err, ErrUnknownSKU) {
				wantErr = ErrUnknownSKU // never loaded, told apart when the read-only check runs (soldout.go)
			}
			if !errors.Is(err, wantErr) {
				t.Fatalf("Reserve(%q, %+v, user %q, ttl %v) = %v, want %v (loaded %d, limit %d)", order, items, user, ttl, err, wantErr, loaded, effLimit)
			}
			if _, now := env.checkStock(t, checkRoute, sku); !sameCounters(now, afterLoad) {
				t.Fatalf("refused Reserve (%v) changed the stock:\nbefore %v\nafter  %v", err, afterLoad, now)
			}
			if user != "" && fzValidID(user) {
				if held := env.quotaHeld(t, checkRoute, sku, user); held != 0 {
					t.Fatalf("refused Reserve (%v) left %d units on user %q's quota", err, held, user)
				}
			}
			if p := env.pendingOf(t, order); len(p) > 0 {
				t.Fatalf("refused Reserve (%v) left pending parts %v", err, p)
			}
			return
		}
		if err != nil {
			t.Fatalf("Reserve(%q, %+v, user %q, ttl %v): %v (loaded %d, limit %d)", order, items, user, ttl, err, loaded, effLimit)
		}
		fzCheckReceipts(t, env, res, order, route, items)
		total, _ = env.checkStock(t, route, sku)
		if total.reserved != want || total.available != loaded-want || total.confirmed != 0 {
			t.Fatalf("after Reserve of %d: totals %+v (loaded %d)", want, total, loaded)
		}
		quota := int64(0)
		if user != "" { // counted with or without a limit
			quota = want
		}
		if held := env.quotaHeld(t, route, sku, user); user != "" && held != quota {
			t.Fatalf("after Reserve of %d: user %q holds %d on the quota, want %d", want, user, held, quota)
		}

		// A retry returns the same reservation and takes nothing more.
		again, err := inv.Reserve(ctx, order, items, user, ttl)
		if err != nil || !reflect.DeepEqual(again, res) {
			t.Fatalf("retried Reserve = %#v, %v; want %#v", again, err, res)
		}
		if t2, _ := env.checkStock(t, route, sku); t2.nums() != total.nums() {
			t.Fatalf("retried Reserve changed the totals: %+v, then %+v", total, t2)
		}
		// The same order id with other items is refused.
		if qty < MaxQuantity {
			other := slices.Clone(items)
			other[0].Quantity++
			if _, err := inv.Reserve(ctx, order, other, user, ttl); !errors.Is(err, ErrOrderMismatch) {
				t.Fatalf("Reserve of order %q with other items = %v, want ErrOrderMismatch", order, err)
			}
		}

		if flags&fzConfirm != 0 {
			out, err := inv.Confirm(ctx, order)
			switch {
			case err == nil:
				if out.Status != StatusConfirmed || out.PendingParts != 0 {
					t.Fatalf("Confirm = %+v", out)
				}
				total, _ = env.checkStock(t, route, sku)
				if total.confirmed != want || total.reserved != 0 || total.available != loaded-want {
					t.Fatalf("after Confirm of %d: totals %+v (loaded %d)", want, total, loaded)
				}
				if held := env.quotaHeld(t, route, sku, user); user != "" && held != quota {
					t.Fatalf("after Confirm of %d: user %q holds %d on the quota, want %d", want, user, held, quota)
				}
				if _, err := inv.Cancel(ctx, order); !errors.Is(err, ErrConfirmed) {
					t.Fatalf("Cancel after Confirm = %v, want ErrConfirmed", err)
				}
				if flags&fzQuotaCheck != 0 && quota > 0 {
					fzCheckQuotaIsolation(t, env, pfx, route, sku, user)
				}
			case errors.Is(err, ErrExpired) && ttl < 10*time.Second && ttl > 0:
				total, _ = env.checkStock(t, route, sku)
				if total.available != loaded || total.reserved != 0 || total.confirmed != 0 {
					t.Fatalf("after an expired Confirm: totals %+v, want all %d available", total, loaded)
				}
			default:
				t.Fatalf("Confirm(%q) (ttl %v) = %+v, %v", order, ttl, out, err)
			}
		} else {
			out, err := inv.Cancel(ctx, order)
			if err != nil || out.Status != StatusCancelled || out.PendingParts != 0 || out.Reason != "cancelled" {
				t.Fatalf("Cancel(%q) = %+v, %v", order, out, err)
			}
			total, _ = env.checkStock(t, route, sku)
			if total.available != loaded || total.reserved != 0 || total.confirmed != 0 {
				t.Fatalf("after Cancel: totals %+v, want all %d available", total, loaded)
			}
			if held := env.quotaHeld(t, route, sku, user); user != "" && held != 0 {
				t.Fatalf("after Cancel: user %q still holds %d on the quota", user, held)
			}
			if _, err := inv.Confirm(ctx, order); !errors.Is(err, ErrCancelled) {
				t.Fatalf("Confirm after Cancel = %v, want ErrCancelled", err)
			}
			if _, err := inv.Reserve(ctx, order, items, user, ttl); !errors.Is(err, ErrCancelled) {
				t.Fatalf("Reserve after Cancel = %v, want ErrCancelled", err)
			}
		}
		if p := env.pendingOf(t, order); len(p) > 0 {
			t.Fatalf("settled order left pending parts %v", p)
		}
		env.checkStock(t, route, sku)
	})
}

// fzCheckReceipts checks a successful reservation against its items.
func fzCheckReceipts(t *testing.T, env *fuzzEnv, res Reservation, order, route string, items []Item) {
	t.Helper()
	if res.OrderID != order {
		t.Fatalf("Reservation.OrderID = %q, want %q", res.OrderID, order)
	}
	got := make([]int64, len(items))
	for _, r := range res.Receipts {
		if r.ItemIndex < 0 || r.ItemIndex >= len(items) {
			t.Fatalf("receipt %+v: item index out of range", r)
		}
		it := items[r.ItemIndex]
		queue := RedoLogKey(int(xxhash.Sum64String(it.Route+":"+it.SKU) % uint64(env.inv.cfg.RedoQueues)))
		if r.SKU != it.SKU || r.Quantity <= 0 || !slices.Contains(env.routes[route], r.Node) || r.RedoLog != queue || r.Offset <= 0 {
			t.Fatalf("receipt %+v for item %+v (want node of %v, redo log %s)", r, it, env.routes[route], queue)
		}
		got[r.ItemIndex] += r.Quantity
	}
	for i, it := range items {
		if got[i] != it.Quantity {
			t.Fatalf("receipts of item %d add up to %d, want %d: %+v", i, got[i], it.Quantity, res.Receipts)
		}
	}
	if d := time.Until(res.Deadline); d > env.inv.cfg.MaxReservationTTL+time.Minute {
		t.Fatalf("deadline %v is %v away, past max_reservation_ttl", res.Deadline, d)
	}
}

// fzCheckQuotaIsolation reserves, for another user, another SKU whose
// (sku, user) pair joined with ':' reads like the given one, up to its
// whole per-user limit. The given user's holdings of sku must not count.
func fzCheckQuotaIsolation(t *testing.T, env *fuzzEnv, pfx, route, sku, user string) {
	t.Helper()
	var sku2, user2 string
	if k := strings.IndexByte(user, ':'); k >= 0 {
		sku2, user2 = sku+":"+user[:k], user[k+1:]
	} else if k := strings.LastIndexByte(sku, ':'); k >= 0 {
		sku2, user2 = sku[:k], sku[k+1:]+":"+user
	} else {
		return
	}
	if !fzValidID(sku2) || !fzValidID(user2) {
		return
	}
	ctx := context.Background()
	const lim = 3
	if _, err := env.inv.LoadStock(ctx, route, sku2, 10, lim); err != nil {
		t.Fatalf("LoadStock(%q): %v", sku2, err)
	}
	order2 := pfx + "quota-check"
	_, err := env.inv.Reserve(ctx, order2, []Item{{Route: route, SKU: sku2, Quantity: lim}}, user2, 0)
	if err != nil {
		t.Fatalf("user %q reserving %d of %q (limit %d) = %v; user %q's units of %q must not count (quota keys %q and %q)",
			user2, lim, sku2, lim, err, user, sku, quotaKey(route, sku2, user2), quotaKey(route, sku, user))
	}
	if _, err := env.inv.Cancel(ctx, order2); err != nil {
		t.Fatal(err)
	}
}

// fzCanonicalInt is what the scripts accept as an integer.
var fzCanonicalInt = regexp.MustCompile(`^(0|-?[1-9][0-9]*)$`)

var fzStockFields = []string{"available", "reserved", "confirmed", "loaded", "limit"}

// fzNodeSnapshot is everything on one node that a refused script must leave
// as it was.
func fzNodeSnapshot(t *testing.T, c *redis.Client, keys ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range keys {
		typ, err := c.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		switch typ {
		case "hash":
			v, err = c.HGetAll(ctx, k).Result()
		case "zset":
			v, err = c.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "string":
			v, err = c.Get(ctx, k).Result()
		}
		if err != nil {
			t.Fatal(err)
		}
		out[k] = fmt.Sprintf("%s %v", typ, v)
	}
	return out
}

// FuzzCorruptValue writes a value that is not an integer into one field of
// a SKU's stock hash on one node, by hand, and runs every script that
// reads that field: each must refuse with SHARDIS_CORRUPT (ErrCorrupt
// through nodeErr) and change nothing on the node. The public API then
// reports ErrCorrupt (GetStock, Reserve) and a reserve that reached the
// node leaves no stock taken anywhere. Restoring the value lets the
// pending part settle normally.
func FuzzCorruptValue(f *testing.F) {
	env := newFuzzEnv(f)
	for i, v := range []string{"abc", "1.5", "1e3", " 1", "01", "-0", "0x10", "", "inf", "nan", "9" + strings.Repeat("9", 30) + ".0", "１", "5\x00", "--1"} {
		f.Add(uint8(i), v, uint8(i/5))
	}
	f.Fuzz(func(t *testing.T, fieldSel uint8, value string, nodeSel uint8) {
		if fzCanonicalInt.MatchString(value) {
			value += "x" // an integer is not corrupt; make it one that is
		}
		ctx := context.Background()
		inv := env.inv
		pfx := env.prefix()
		route, sku := "all", pfx+"sku"
		field := fzStockFields[int(fieldSel)%len(fzStockFields)]
		n, err := env.r.Node(fuzzNodeNames[int(nodeSel)%len(fuzzNodeNames)])
		if err != nil {
			t.Fatal(err)
		}
		raw := env.raw[n.Name()]
		if _, err := inv.LoadStock(ctx, route, sku, 30, 30); err != nil { // a limit the 29-unit Reserve below fits
			t.Fatal(err)
		}
		// A pending part on n, taken by the reserve script directly.
		order, token := pfx+"o", "tok"
		queue := inv.redoQueue(route, sku)
		partReqFor := func(id string) partReq {
			return partReq{part: part{ID: id, Node: n.Name(), Kind: "s", Item: 0, Route: route, SKU: sku, Qty: 1},
				queue: queue, ck: stockKey(route, sku)}
		}
		deadline := partDue{hold: time.Hour}
		batch := inv.runBatches(ctx, order, token, deadline, nodeBatches{{n: n, reqs: []partReq{partReqFor(stockPartID(order, token, 0))}}})[0]
		rep, err := batch.replies, batch.err
		if err != nil || len(rep) != 1 || rep[0].state != "pending" || rep[0].qty != 1 {
			t.Fatalf("reserve script = %+v, %v", rep, err)
		}
		pending := stockPartID(order, token, 0)

		key := stockKey(route, sku)
		orig, err := raw.HGet(ctx, key, field).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		origMissing := errors.Is(err, redis.Nil)
		if err := raw.HSet(ctx, key, field, value).Err(); err != nil {
			t.Fatal(err)
		}
		// the queue's segment that holds the pending part and the one its
		// next offset would go to (redolog.go)
		keys := []string{key, PendingKey, RedoOffsetsKey, redoSegmentKey(queue, rep[0].offset), redoSegmentKey(queue, rep[0].offset+1),
			partKey(pending), partKey(stockPartID(order, "tok2", 0))}
		before := fzNodeSnapshot(t, raw, keys...)
		corrupt := func(what string, err error) {
			t.Helper()
			if err == nil || !strings.Contains(err.Error(), "SHARDIS_CORRUPT") || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s with %s = %q: got %v, want a SHARDIS_CORRUPT error", what, field, value, err)
			}
			if after := fzNodeSnapshot(t, raw, keys...); !reflect.DeepEqual(after, before) {
				t.Fatalf("%s refused with %v but changed node %s:\nbefore %v\nafter  %v", what, err, n.Name(), before, after)
			}
		}

		// Scripts that read every field.
		_, err = inv.run(ctx, n, stockScript, []string{key})
		corrupt("stock script", err)
		_, err = inv.run(ctx, n, loadScript, []string{key}, 5, 7, int64(0), farLoadDeadline())
		corrupt("load script", err)
		// The reserve script reads available, reserved and limit.
		if field == "available" || field == "reserved" || field == "limit" {
			res := inv.runBatches(ctx, order, "tok2", deadline, nodeBatches{{n: n, reqs: []partReq{partReqFor(stockPartID(order, "tok2", 0))}}})[0]
			corrupt("reserve script", res.err)
		}
		// Settling reads reserved, and the counter the units go to.
		for _, action := range []Action{Cancel, Confirm} {
			to := "available"
			if action == Confirm {
				to = "confirmed"
			}
			if field == "reserved" || field == to {
				_, err := inv.SettleNow(ctx, Settle{Node: n.Name(), Action: action, OrderID: order, PartIDs: []string{pending}})
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("SettleNow(%s) with %s = %q: %v, want ErrCorrupt", action, field, value, err)
				}
				corrupt("settle script ("+string(action)+")", err)
			}
		}

		// The public API.
		if _, err := inv.GetStock(ctx, route, sku); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("GetStock with %s = %q on %s: %v, want ErrCorrupt", field, value, n.Name(), err)
		}
		if field == "available" || field == "reserved" || field == "limit" {
			// Other nodes: the same counters (a "reserved" field may
			// appear, at 0) and the same pending parts.
			others := map[string]string{}
			for _, name := range fuzzNodeNames {
				if name != n.Name() {
					others[name] = fzOtherSnapshot(t, env, name, route, sku)
				}
			}
			// 29 units: every node must be asked, n included.
			_, err := inv.Reserve(ctx, pfx+"o2", []Item{{Route: route, SKU: sku, Quantity: 29}}, "fz-user", 0)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Reserve with %s = %q on %s: %v, want ErrCorrupt", field, value, n.Name(), err)
			}
			if after := fzNodeSnapshot(t, raw, keys...); !reflect.DeepEqual(after, before) {
				t.Fatalf("Reserve refused with %v but changed node %s:\nbefore %v\nafter  %v", err, n.Name(), before, after)
			}
			for name, snap := range others {
				if after := fzOtherSnapshot(t, env, name, route, sku); after != snap {
					t.Fatalf("Reserve refused with %v but left stock taken on %s:\nbefore %v\nafter  %v", err, name, snap, after)
				}
			}
		}

		// Restore the field: the part settles and the invariant holds.
		if origMissing {
			err = raw.HDel(ctx, key, field).Err()
		} else {
			err = raw.HSet(ctx, key, field, orig).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
		res, err := inv.SettleNow(ctx, Settle{Node: n.Name(), Action: Cancel, OrderID: order, PartIDs: []string{pending}})
		if err != nil || !slices.Equal(res, []string{"done"}) {
			t.Fatalf("SettleNow after restoring %s = %v, %v", field, res, err)
		}
		if total, _ := env.checkStock(t, route, sku); total.loaded != 30 || total.available != 30 {
			t.Fatalf("after restoring: totals %+v, want 30 loaded and available", total)
		}
	})
}

// fzOtherSnapshot is node name's counters of (route, sku) and its pending
// index, for comparison.
func fzOtherSnapshot(t *testing.T, env *fuzzEnv, name, route, sku string) string {
	t.Helper()
	c := env.nodeStock(t, name, route, sku)
	c.raw = nil
	pending, err := env.raw[name].ZRange(context.Background(), PendingKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%+v pending %v", c, pending)
}

// FuzzRedoRead reads redo logs with fuzzed node names, queues, offsets and
// limits. Out-of-range arguments are refused with ErrInvalid; otherwise
// the entries are exactly the queue's entries with offset > after, in
// strictly increasing (gap-free) offset order, at most limit of them. An
// acknowledgement never lowers the acknowledged offset and returns it.
func FuzzRedoRead(f *testing.F) {
	env := newFuzzEnv(f)
	ctx := context.Background()
	start := time.Now()
	// Entries in several queues of every node: pending, confirmed and
	// cancelled parts.
	skus := map[string]bool{}
	for s := range 8 {
		sku := "redo-sku-" + strconv.Itoa(s)
		skus[sku] = true
		if _, err := env.inv.LoadStock(ctx, "all", sku, 1000, 0); err != nil {
			f.Fatal(err)
		}
		for o := range 6 {
			order := fmt.Sprintf("redo-%d-%d", s, o)
			if _, err := env.inv.Reserve(ctx, order, []Item{{Route: "all", SKU: sku, Quantity: int64(100 + o)}}, "", 0); err != nil {
				f.Fatal(err)
			}
			switch o % 3 {
			case 1:
				_, err := env.inv.Confirm(ctx, order)
				if err != nil {
					f.Fatal(err)
				}
			case 2:
				_, err := env.inv.Cancel(ctx, order)
				if err != nil {
					f.Fatal(err)
				}
			}
		}
	}
	queues := map[string]int{}
	for _, name := range fuzzNodeNames {
		for q := range env.inv.cfg.RedoQueues {
			if n := len(redoEntriesOn(f, ctx, env.raw[name], q)); n > 0 && queues[name] == 0 {
				queues[name] = q
			}
		}
	}
	for i, name := range fuzzNodeNames {
		f.Add(name, queues[name], int64(0), 100, int64(1))
		f.Add(name, queues[name], int64(i+1), 2, int64(-1))
	}
	f.Add("n1", 0, int64(-5), 1, int64(0))
	f.Add("n2", 49, int64(math.MaxInt64), 10000, int64(math.MaxInt64))
	f.Add("n3", 50, int64(0), 100, int64(1))
	f.Add("n3", -1, int64(0), 100, int64(1))
	f.Add("n1", queues["n1"], int64(math.MinInt64), 10001, int64(math.MinInt64))
	f.Add("n1", queues["n1"], int64(0), 0, int64(1<<53+1))
	f.Add("nx", 0, int64(0), 1, int64(0))
	f.Add("", 0, int64(0), 1, int64(0))
	f.Fuzz(func(t *testing.T, nodeName string, queue int, after int64, limit int, ackOffset int64) {
		inv := env.inv
		entries, err := inv.ReadRedoLog(ctx, nodeName, queue, after, limit)
		raw, known := env.raw[nodeName]
		badQueue := !known || queue < 0 || queue >= inv.cfg.RedoQueues
		if badQueue || ackOffset > 1<<53 {
			// Offsets beyond 2^53 cannot be held exactly by the scripts.
			if got, err := inv.AckRedoLog(ctx, nodeName, queue, ackOffset); !errors.Is(err, ErrInvalid) {
				t.Fatalf("AckRedoLog(%q, %d, %d) = %d, %v; want ErrInvalid", nodeName, queue, ackOffset, got, err)
			}
		}
		if badQueue || limit < 1 || limit > 10000 {
			if !errors.Is(err, ErrInvalid) || entries != nil {
				t.Fatalf("ReadRedoLog(%q, %d, %d, %d) = %d entries, %v; want ErrInvalid", nodeName, queue, after, limit, len(entries), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("ReadRedoLog(%q, %d, %d, %d): %v", nodeName, queue, after, limit, err)
		}
		all := redoEntriesOn(t, ctx, raw, queue)
		var want []redis.Z
		for i, z := range all {
			if z.Score != float64(i+1) {
				t.Fatalf("queue %d on %s is not gap-free: entry %d has offset %v", queue, nodeName, i, z.Score)
			}
			if int64(z.Score) > after && len(want) < limit {
				want = append(want, z)
			}
		}
		if len(entries) != len(want) {
			t.Fatalf("ReadRedoLog(%q, %d, after %d, limit %d) = %d entries, want %d", nodeName, queue, after, limit, len(entries), len(want))
		}
		for i, e := range entries {
			if e.Offset != int64(want[i].Score) || e.PartID != want[i].Member {
				t.Fatalf("entry %d = %+v, want offset %v part %v", i, e, want[i].Score, want[i].Member)
			}
			if e.Offset <= after || (i > 0 && e.Offset <= entries[i-1].Offset) {
				t.Fatalf("entries not strictly increasing past %d: %+v", after, entries)
			}
			if !skus[e.SKU] || !strings.HasPrefix(e.OrderID, "redo-") || !strings.HasPrefix(e.PartID, e.OrderID+"|") || e.Quantity <= 0 ||
				!slices.Contains([]string{"pending", "confirmed", "cancelled"}, e.State) ||
				e.At.Before(start.Add(-time.Second)) || e.At.After(time.Now().Add(time.Second)) {
				t.Fatalf("malformed entry %+v", e)
			}
		}

		if ackOffset > 1<<53 {
			return
		}
		// Acknowledge, then put the acknowledgement back as it was.
		qk := RedoLogKey(queue)
		prevRaw, err := raw.HGet(ctx, keyRedoAcked, qk).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		hadPrev := err == nil
		defer func() {
			if hadPrev {
				err = raw.HSet(ctx, keyRedoAcked, qk, prevRaw).Err()
			} else {
				err = raw.HDel(ctx, keyRedoAcked, qk).Err()
			}
			if err != nil {
				t.Error(err)
			}
		}()
		var prev int64
		if hadPrev {
			if prev, err = strconv.ParseInt(prevRaw, 10, 64); err != nil {
				t.Fatalf("acknowledged offset of %s on %s is %q", qk, nodeName, prevRaw)
			}
		}
		headRaw, err := raw.HGet(ctx, RedoOffsetsKey, qk).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		head, _ := strconv.ParseInt(headRaw, 10, 64)
		got, err := inv.AckRedoLog(ctx, nodeName, queue, ackOffset)
		if ackOffset > head {
			// Past the last offset handed out: refused, nothing stored.
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("AckRedoLog(%q, %d, %d) past the head %d: %v, want ErrInvalid", nodeName, queue, ackOffset, head, err)
			}
			if now, _ := raw.HGet(ctx, keyRedoAcked, qk).Result(); now != prevRaw {
				t.Fatalf("a refused ack changed the acknowledged offset %q → %q", prevRaw, now)
			}
			return
		}
		if err != nil {
			t.Fatalf("AckRedoLog(%q, %d, %d): %v", nodeName, queue, ackOffset, err)
		}
		if wantAck := max(prev, ackOffset); got != wantAck {
			t.Fatalf("AckRedoLog(%q, %d, %d) with %d acknowledged = %d, want %d", nodeName, queue, ackOffset, prev, got, wantAck)
		}
		stored, err := raw.HGet(ctx, keyRedoAcked, qk).Result()
		if ackOffset > prev && (err != nil || stored != strconv.FormatInt(ackOffset, 10)) {
			t.Fatalf("AckRedoLog(%d) stored %q, %v", ackOffset, stored, err)
		}
		if again, err := inv.AckRedoLog(ctx, nodeName, queue, ackOffset-1); err == nil && again != got && ackOffset != math.MinInt64 {
			t.Fatalf("AckRedoLog(%d) after acknowledging %d = %d: it must never lower", ackOffset-1, got, again)
		}
	})
}
