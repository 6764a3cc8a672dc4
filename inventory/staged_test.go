package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
)

// One-round reservations (staged.go) against real nodes: an attempt is
// stopped at each crash point, then each kind of actor that may meet the
// order next (a retry of the order id, Confirm, Cancel, the reconciler
// after the deadline) finishes it; every part must end settled once by
// the one recorded decision, and the stock must add up.

type stagedEnv struct {
	t       *testing.T
	srvs    []*redistest.Server
	ctx     context.Context
	inv     *Inventory
	r       *router.Router
	clients map[string]*redis.Client
	faults  *crashPoint // stops the next Reserve at a crash point (reserveAt)
}

const (
	stagedLease = 300 * time.Millisecond
	stagedTTL   = 700 * time.Millisecond
	stagedStock = 1000
)

// Routes a, b, c live on one node each, so an order of a+b+c is staged
// whatever its home node.
func newStagedEnv(t *testing.T) *stagedEnv { return newStagedEnvWith(t, Options{}) }

// newStagedEnvWith is newStagedEnv with opts (its logger, lease and faults
// are the env's).
func newStagedEnvWith(t *testing.T, opts Options) *stagedEnv { return newStagedEnvConfig(t, opts, nil) }

// newStagedEnvConfig is newStagedEnvWith with the configuration changed
// by mut (nil: none) before it is validated.
func newStagedEnvConfig(t *testing.T, opts Options, mut func(*config.Config)) *stagedEnv {
	return newStagedEnvOn(t, redistest.StartN(t, 3, redistest.Options{}), opts, mut)
}

// newStagedEnvOn is newStagedEnvConfig over the three servers srvs (n1,
// n2, n3).
func newStagedEnvOn(t *testing.T, srvs []*redistest.Server, opts Options, mut func(*config.Config)) *stagedEnv {
	cfg := envConfig() // mut may set its probe timeout back
	cfg.Nodes = map[string]config.Node{}
	e := &stagedEnv{t: t, srvs: srvs, clients: map[string]*redis.Client{}, faults: &crashPoint{}}
	for i, s := range srvs {
		name := fmt.Sprintf("n%d", i+1)
		cfg.Nodes[name] = config.Node{Addr: s.Addr(), Weight: 1}
		e.clients[name] = s.Client(t)
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail,
		Routes: map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}}}}
	if mut != nil {
		mut(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	e.ctx = ctx
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	r, err := router.New(rctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.r = r
	t.Cleanup(func() { _ = r.Close() })
	opts.Logger, opts.AttemptLease, opts.Faults = slog.New(slog.DiscardHandler), stagedLease, e.faults
	e.inv, err = New(r, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.inv.Close)
	for _, rt := range []string{"a", "b", "c"} {
		if _, err := e.inv.LoadStock(ctx, rt, "s", stagedStock, 0); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func stagedItems() []Item {
	return []Item{{Route: "a", SKU: "s", Quantity: 1}, {Route: "b", SKU: "s", Quantity: 2}, {Route: "c", SKU: "s", Quantity: 3}}
}

// reserveAt runs one Reserve stopped at point ("" for none).
func (e *stagedEnv) reserveAt(point, id string) (Reservation, error) {
	return e.reserveAtTTL(point, id, stagedTTL)
}

// reserveAtTTL is reserveAt with the reservation's ttl: a test that
// confirms the order after more steps than stagedTTL surely covers on a
// busy machine gives it a long one.
func (e *stagedEnv) reserveAtTTL(point, id string, ttl time.Duration) (Reservation, error) {
	e.faults.point.Store(&point)
	defer e.faults.point.Store(nil)
	return e.inv.Reserve(e.ctx, id, stagedItems(), "", ttl)
}

// expireAll runs the reconciler's step on every due part of every node
// until none is left pending (parts of decided orders after their
// deadlines).
func (e *stagedEnv) expireAll() {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		for _, n := range e.inv.Nodes() {
			due, err := e.inv.DueParts(e.ctx, n, 100)
			if err != nil {
				e.t.Fatal(err)
			}
			for _, p := range due {
				if _, err := e.inv.ResolveExpired(e.ctx, p); err != nil {
					e.t.Fatalf("ResolveExpired %+v: %v", p, err)
				}
			}
			c, _ := e.clients[n.Name()].ZCard(e.ctx, PendingKey).Result()
			left += int(c)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d parts still pending 10s later", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// verify checks one order: its record's status is want (any of), every
// part of the token it names follows it (confirmed iff the order is
// confirmed; cancelled otherwise, or pending while it is reserved), and
// every other part of the order id is cancelled.
func (e *stagedEnv) verify(id string, want ...string) string {
	e.t.Helper()
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), id)
	f := orderFieldsOn(e.t, e.ctx, e.clients[home.Name()], id)
	status, token := f["status"], f["token"]
	if status == "" {
		status = "missing"
	}
	ok := false
	for _, w := range want {
		ok = ok || w == status
	}
	if !ok {
		e.t.Errorf("order %s is %s, want %v", id, status, want)
	}
	for name, c := range e.clients {
		keys, _ := c.Keys(e.ctx, partKey(id+"|*")).Result()
		for _, k := range keys {
			p := partFieldsOn(e.t, e.ctx, c, strings.TrimPrefix(k, partKeyPrefix))
			mine := token != "" && strings.Contains(k, token)
			var wantState string
			switch {
			case mine && status == "confirmed":
				wantState = "confirmed"
			case mine && status == "reserved":
				wantState = "pending"
			default:
				wantState = "cancelled"
			}
			if p["state"] != wantState {
				e.t.Errorf("order %s (%s, token %s): part %s on %s is %s, want %s", id, status, token, k, name, p["state"], wantState)
			}
		}
	}
	return status
}

// stock checks every node's counters add up.
func (e *stagedEnv) stock() {
	e.t.Helper()
	for _, rt := range []string{"a", "b", "c"} {
		lvl, err := e.inv.GetStock(e.ctx, rt, "s")
		if err != nil {
			e.t.Fatal(err)
		}
		if lvl.Available < 0 || lvl.Reserved < 0 || lvl.Available+lvl.Reserved+lvl.Confirmed != stagedStock {
			e.t.Errorf("route %s: %+v does not add up to %d", rt, lvl, stagedStock)
		}
	}
}

var stagedPoints = []string{"", "staged:before", "staged:stage-only", "staged:takes-only", "staged:some-takes", "staged:before-commit"}

// afterCrash is what each point leaves, once the lease ran out, for an
// actor that only reads: is the order reserved (every part taken)?
var stagedReserved = map[string]bool{"": true, "staged:before-commit": true}

func TestStagedCrashPoints(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	for _, point := range stagedPoints {
		name := strings.TrimPrefix(point, "staged:")
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			e.t = t
			// An attempt that takes every part is confirmed below after
			// steps and a sleep past the lease that a busy machine can
			// stretch past stagedTTL (ci458: "passed its deadline"): it
			// gets a long TTL. One that does not keeps stagedTTL, so
			// what it took comes due for expireAll.
			ttl := stagedTTL
			if stagedReserved[point] {
				ttl = time.Hour
			}
			// Retry of the same order id: ends reserved (by the crashed
			// attempt if it was complete, else by the retry), then confirmed.
			id := "retry-" + name
			first, err := e.reserveAtTTL(point, id, ttl)
			if (err != nil) != (point != "") {
				t.Fatalf("Reserve stopped at %q: %v", point, err)
			}
			res, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", stagedTTL)
			if err != nil || len(res.Receipts) != 3 {
				t.Fatalf("retry after %q: %+v, %v", point, res, err)
			}
			// one receipt per item, in item order, and the retry's the
			// first's when it reserved
			for i, r := range res.Receipts {
				if r.ItemIndex != i || point == "" && r != first.Receipts[i] {
					t.Fatalf("retry after %q: receipts %+v, want one per item in item order (the first attempt's %+v)", point, res.Receipts, first.Receipts)
				}
			}
			if out, err := e.inv.Confirm(e.ctx, id); err != nil || out.Status != StatusConfirmed {
				t.Fatalf("Confirm after the retry: %+v, %v", out, err)
			}

			// Confirm alone: confirmed iff the attempt took every part.
			id = "confirm-" + name
			_, _ = e.reserveAtTTL(point, id, ttl)
			time.Sleep(stagedLease + 50*time.Millisecond)
			out, err := e.inv.Confirm(e.ctx, id)
			if stagedReserved[point] {
				if err != nil || out.Status != StatusConfirmed {
					t.Fatalf("Confirm of a complete attempt (%q): %+v, %v", point, out, err)
				}
			} else if !errors.Is(err, ErrNotFound) {
				t.Fatalf("Confirm of an incomplete attempt (%q): %+v, %v; want ErrNotFound", point, out, err)
			}

			// Cancel alone, at once (an attempt cut short by it).
			id = "cancel-" + name
			_, _ = e.reserveAt(point, id)
			if out, err := e.inv.Cancel(e.ctx, id); err != nil || out.Status != StatusCancelled {
				t.Fatalf("Cancel after %q: %+v, %v", point, out, err)
			}
			if _, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", stagedTTL); !errors.Is(err, ErrCancelled) {
				t.Fatalf("Reserve after Cancel (%q): %v, want ErrCancelled", point, err)
			}

			// Nobody but the reconciler, after the deadline.
			id = "expire-" + name
			_, _ = e.reserveAt(point, id)
			time.Sleep(stagedTTL + partGrace + 100*time.Millisecond)
			e.expireAll()

			if !stagedReserved[point] {
				// An incomplete attempt: whatever the reconciler left
				// (a staged record without parts is due to no one) is
				// decided failed by the next reader.
				if _, err := e.inv.Confirm(e.ctx, id); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Confirm of an incomplete attempt after its deadline (%q): %v; want ErrNotFound", point, err)
				}
			}
			e.expireAll() // the leftovers of the attempts above
			e.verify("retry-"+name, "confirmed")
			if stagedReserved[point] {
				e.verify("confirm-"+name, "confirmed")
			} else {
				e.verify("confirm-"+name, "failed", "missing")
			}
			e.verify("cancel-"+name, "cancelled")
			if stagedReserved[point] {
				e.verify("expire-"+name, "cancelled")
			} else {
				e.verify("expire-"+name, "failed", "missing")
			}
			e.stock()
		})
	}
}

// Concurrent retries of one order id and a Cancel racing them: one
// decision, every part following it, the stock adding up.
func TestStagedRaces(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("race-%d", i)
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			oks int
		)
		for w := 0; w < 3; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", stagedTTL); err == nil {
					mu.Lock()
					oks++
					mu.Unlock()
				}
			}()
		}
		if i%2 == 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i%5) * 200 * time.Microsecond)
				_, _ = e.inv.Cancel(e.ctx, id)
			}()
		}
		wg.Wait()
		if i%2 == 1 && oks != 3 {
			t.Errorf("order %s: %d of 3 concurrent retries succeeded, want all", id, oks)
		}
		if i%2 == 1 {
			if _, err := e.inv.Confirm(e.ctx, id); err != nil {
				t.Errorf("Confirm %s: %v", id, err)
			}
		}
	}
	time.Sleep(stagedTTL + partGrace + 100*time.Millisecond)
	e.expireAll()
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("race-%d", i)
		if i%2 == 1 {
			e.verify(id, "confirmed")
		} else {
			e.verify(id, "cancelled")
		}
	}
	e.stock()
	if s := e.inv.Stats(); s.StagedReservations == 0 {
		t.Errorf("no order took the staged path: %+v", s)
	}
}

// A staged order whose other part's node is down when its part here is due:
// the reconciler cannot decide it, puts the part off (so parts behind it
// are not held up) and decides it once the node is back.
func TestStagedExpiryWithPartNodeDown(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	var id string
	for i := 0; id == ""; i++ {
		// Its record on a node that stays up: only a part is out of reach.
		if h, _ := e.inv.orderHome(e.inv.topo.cur.Load(), fmt.Sprintf("down-%d", i)); h.Name() != "n3" {
			id = fmt.Sprintf("down-%d", i)
		}
	}
	if _, err := e.reserveAt("staged:before-commit", id); !errors.Is(err, errCrashed) {
		t.Fatalf("Reserve stopped before the commit: %v", err)
	}
	time.Sleep(stagedTTL + partGrace + 100*time.Millisecond)
	e.srvs[2].Pause() // n3 holds the order's item on route c
	defer e.srvs[2].Resume()
	n1, _ := e.r.Node("n1")
	due, err := e.inv.DueParts(e.ctx, n1, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due parts on n1: %v, %v; want the order's one", due, err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
	res, err := e.inv.ResolveExpired(ctx, due[0])
	cancel()
	if res != Postponed || err == nil {
		t.Fatalf("ResolveExpired with n3 frozen = %q, %v; want postponed with the error", res, err)
	}
	if again, _ := e.inv.DueParts(e.ctx, n1, 10); len(again) != 0 {
		t.Fatalf("the part is still due after being put off: %v", again)
	}
	e.srvs[2].Resume()
	deadline := time.Now().Add(10 * time.Second)
	for {
		member := PendingMember(due[0].PartID, partFieldsOn(t, e.ctx, e.clients["n1"], due[0].PartID))
		p, err := e.clients["n1"].ZScore(e.ctx, PendingKey, member).Result()
		if err != nil {
			t.Fatalf("part %s not indexed under %s: %v", due[0].PartID, member, err)
		}
		if time.UnixMilli(int64(p)).Before(time.Now()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the part was not due again within 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.expireAll()
	e.verify(id, "cancelled")
	e.stock()
}

// A one-round attempt that a node refuses for good — a user over the
// per-user limit, a limited SKU without a user — answers with the refusal
// at once instead of running the general path, which would only meet it
// again; its parts are cancelled and the stock adds up.
func TestStagedRefusalInOneRound(t *testing.T) {
	e := newStagedEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "b", "lim", stagedStock, 2); err != nil {
		t.Fatal(err)
	}
	// Orders homed off n2 (route b's node, which keeps the quota), so the
	// refusal comes back from a take, not from the home's own stage.
	id := func(prefix string) string {
		for i := 0; ; i++ {
			id := fmt.Sprintf("%s-%d", prefix, i)
			if e.inv.topo.cur.Load().homes.Home(id) != "n2" {
				return id
			}
		}
	}
	items := func(lim int64) []Item {
		return []Item{{Route: "a", SKU: "s", Quantity: 1}, {Route: "b", SKU: "lim", Quantity: lim}}
	}
	first := id("ok")
	if _, err := e.inv.Reserve(e.ctx, first, items(2), "u1", time.Minute); err != nil {
		t.Fatalf("Reserve within the limit: %v", err)
	}
	before := e.inv.Stats()
	over := id("over")
	if _, err := e.inv.Reserve(e.ctx, over, items(1), "u1", time.Minute); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("Reserve over the limit = %v, want ErrLimitExceeded", err)
	}
	noUser := id("nouser")
	if _, err := e.inv.Reserve(e.ctx, noUser, items(1), "", time.Minute); !errors.Is(err, ErrLimitExceeded) || !strings.Contains(err.Error(), "needs user_id") {
		t.Fatalf("Reserve of a limited SKU without a user = %v, want ErrLimitExceeded naming user_id", err)
	}
	after := e.inv.Stats()
	// the order over its limit has quota parts on two nodes (routes a and
	// b): it is refused by the reads before the round (soldout.go), the
	// one without a user by the round
	refused := func(s Stats) int64 { return s.StagedRefusals + s.RefusedFenced + s.RefusedUnwritten }
	if got := refused(after) - refused(before); got != 2 {
		t.Fatalf("StagedRefusals+RefusedFenced+RefusedUnwritten grew by %d, want 2 (stats %+v)", got, after)
	}
	if after.StagedFallbacks != before.StagedFallbacks {
		t.Fatalf("a refused order took the general path: StagedFallbacks %d → %d", before.StagedFallbacks, after.StagedFallbacks)
	}
	e.verify(first, "reserved")
	e.verify(over, "failed", "missing")
	e.verify(noUser, "failed", "missing")
	e.stock()
	lvl, err := e.inv.GetStock(e.ctx, "b", "lim")
	if err != nil {
		t.Fatal(err)
	}
	if lvl.Reserved != 2 || lvl.Available != stagedStock-2 {
		t.Fatalf("b/lim after the refusals = %+v, want 2 reserved (the first order)", lvl)
	}
}
