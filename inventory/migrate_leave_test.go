package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Removing a node, against real nodes: what it holds (a leaving node's
// stock, the parts of one-round reservations that never landed on it) must
// end where the new topology finds it, with every step of the apply
// rerunnable after a crash (safety issue items A2 and A3).

// topoFaults is these tests' Faults: it stops the apply the nth time it
// reaches point (counting from 1; never when nth is 0), and re-introduces
// mut (Mutator).
type topoFaults struct {
	point string
	nth   int32
	seen  atomic.Int32
	mut   Mutation
}

func (f *topoFaults) Call(_ context.Context, _ ScriptCall, send func() (any, error)) (any, error) {
	return send()
}

func (f *topoFaults) Crash(_ context.Context, point string) bool {
	return f.nth > 0 && point == f.point && f.seen.Add(1) == f.nth
}

func (f *topoFaults) Mutated(m Mutation) bool { return f.mut != "" && m == f.mut }

// leaveEnv is three nodes with route r over all of them; the apply removes
// n3.
type leaveEnv struct {
	t        *testing.T
	ctx      context.Context
	old, new *config.Config
	clients  map[string]*redis.Client
	skus     []string
	before   map[string]map[string]map[string]int64 // sku → node → field → value, before the apply
}

var leaveFields = []string{"available", "reserved", "confirmed", "loaded"}

// newLeaveEnv loads 300 units of "z" (100 a node, none sold: n3's
// transfer has confirmed 0) and, with sold, 3 units of "sold" (one a
// node, all sold: available 0).
func newLeaveEnv(t *testing.T, sold bool) *leaveEnv {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	e := &leaveEnv{t: t, clients: map[string]*redis.Client{}, skus: []string{"z"}}
	addrs := map[string]string{}
	for i, s := range srvs {
		name := fmt.Sprintf("n%d", i+1)
		addrs[name] = s.Addr()
		e.clients[name] = s.Client(t)
	}
	e.old, e.new = leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2", "n3"}}), leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	e.ctx = ctx
	inv := openInv(t, e.old, Options{})
	if _, err := inv.LoadStock(ctx, "r", "z", 300, 0); err != nil {
		t.Fatal(err)
	}
	if sold {
		e.skus = append(e.skus, "sold")
		if _, err := inv.LoadStock(ctx, "r", "sold", 3, 0); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			id := fmt.Sprintf("sold-%d", i)
			if _, err := inv.Reserve(ctx, id, []Item{{Route: "r", SKU: "sold", Quantity: 1}}, "", time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, err := inv.Confirm(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.before = e.counters()
	for _, sku := range e.skus {
		n3 := e.before[sku]["n3"]
		if n3["loaded"] == 0 || n3["reserved"] != 0 || (n3["available"] != 0 && n3["confirmed"] != 0) {
			t.Fatalf("setup: n3's %s is %v, want a zero field to transfer", sku, n3)
		}
	}
	return e
}

// startNamed starts n redis-server nodes and returns them with their
// addresses by name (n1, n2, ...), for leaveConfig.
func startNamed(t *testing.T, n int) ([]*redistest.Server, map[string]string) {
	srvs := redistest.StartN(t, n, redistest.Options{})
	addrs := map[string]string{}
	for i, s := range srvs {
		addrs[fmt.Sprintf("n%d", i+1)] = s.Addr()
	}
	return srvs, addrs
}

// leaveConfig is a configuration over the named nodes of addrs that the
// routes name (a node the routes do not name is not known to it).
func leaveConfig(t *testing.T, addrs map[string]string, routes map[string][]string) *config.Config {
	cfg := envConfig()
	cfg.Nodes = map[string]config.Node{}
	for _, ms := range routes {
		for _, m := range ms {
			cfg.Nodes[m] = config.Node{Addr: addrs[m], Weight: 1}
		}
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: routes}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// openInv opens an instance over cfg, closed with the test.
func openInv(t *testing.T, cfg *config.Config, opts Options) *Inventory {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	opts.Logger = slog.New(slog.DiscardHandler)
	inv, err := New(r, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	return inv
}

func (e *leaveEnv) apply(f Faults) (topology.Report, error) {
	return ApplyTopology(e.ctx, ApplyOptions{To: e.new, From: e.old, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler), Faults: f})
}

// counters reads every node's stock fields of every SKU.
func (e *leaveEnv) counters() map[string]map[string]map[string]int64 {
	e.t.Helper()
	out := map[string]map[string]map[string]int64{}
	for _, sku := range e.skus {
		out[sku] = map[string]map[string]int64{}
		for name, c := range e.clients {
			v, err := c.HMGet(e.ctx, stockKey("r", sku), leaveFields...).Result()
			if err != nil {
				e.t.Fatal(err)
			}
			out[sku][name] = map[string]int64{}
			for i, f := range leaveFields {
				s, _ := v[i].(string)
				var n int64
				if s != "" {
					if _, err := fmt.Sscan(s, &n); err != nil {
						e.t.Fatalf("%s %s on %s is %q", stockKey("r", sku), f, name, s)
					}
				}
				out[sku][name][f] = n
			}
		}
	}
	return out
}

// transferred checks that every SKU's transfer off n3 is in one of its
// three states, per field: not applied (n3 and the others as before),
// applied on the destination only (counted on both), or finished (n3 at 0,
// the others holding it once). A second subtraction or addition fits
// none. It returns whether every transfer is finished.
func (e *leaveEnv) transferred(what string) bool {
	e.t.Helper()
	now := e.counters()
	finished := true
	for _, sku := range e.skus {
		for _, f := range leaveFields {
			was3, is3 := e.before[sku]["n3"][f], now[sku]["n3"][f]
			was := e.before[sku]["n1"][f] + e.before[sku]["n2"][f]
			is := now[sku]["n1"][f] + now[sku]["n2"][f]
			switch {
			case is3 == was3 && is == was, is3 == was3 && is == was+was3:
				finished = finished && was3 == 0
			case is3 == 0 && is == was+was3:
			default:
				e.t.Errorf("%s: %s %s: n3 %d (was %d), n1+n2 %d (was %d): applied twice or lost", what, sku, f, is3, was3, is, was)
				finished = false
			}
		}
	}
	return finished
}

// TestTopologyRemoveNodeZeroTransfer removes a node whose stock transfers
// have a zero field (nothing sold: confirmed 0; everything sold: available
// 0), stopping the apply after each transfer step in turn (the nth time it
// reaches the crash point, n = 1, 2, …) and running it again: it must end
// stable, no rerun may subtract or add twice, and the stock adds up.
func TestTopologyRemoveNodeZeroTransfer(t *testing.T) {
	t.Parallel() // its own nodes
	for _, point := range []string{"xfer-out", "xfer-in"} {
		t.Run(point, func(t *testing.T) {
			e := newLeaveEnv(t, true)
			for nth := int32(1); ; nth++ {
				rep, err := e.apply(&topoFaults{point: point, nth: nth})
				what := fmt.Sprintf("apply stopped at %s #%d", point, nth)
				e.transferred(what)
				if err == nil {
					if rep.Phase != topology.PhaseStable {
						t.Fatalf("%s: ended %+v, want stable", what, rep)
					}
					break
				}
				if !errors.Is(err, errCrashed) {
					t.Fatalf("%s: %v, want the injected crash or the end", what, err)
				}
				if nth > 10 {
					t.Fatalf("%s: the apply still does not finish", what)
				}
			}
			rep, err := e.apply(nil)
			if err != nil || !rep.AlreadyApplied {
				t.Fatalf("rerun after the end = %+v, %v; want already applied", rep, err)
			}
			if !e.transferred("after the rerun") {
				t.Fatalf("transfers not finished: %v", e.counters())
			}
			inv := openInv(t, e.new, Options{})
			for _, sku := range e.skus {
				lvl, err := inv.GetStock(e.ctx, "r", sku)
				if err != nil {
					t.Fatal(err)
				}
				loaded := int64(300)
				if sku == "sold" {
					loaded = 3
				}
				if lvl.Loaded != loaded || lvl.Reserved != 0 || lvl.Available+lvl.Confirmed != loaded {
					t.Errorf("%s over n1, n2 = %+v, want %d loaded, all of it available or confirmed", sku, lvl, loaded)
				}
			}
			if keys, _ := e.clients["n3"].Keys(e.ctx, xferKeyPrefix+"[0-9]*").Result(); len(keys) > 0 {
				t.Errorf("transfer records left on n3: %v", keys)
			}
		})
	}
}

// TestTopologyMutationXferNegativeZero checks the explorer's mutation:
// with MutationXferNegativeZero the done step writes its first change and
// fails, as before the fix, so each rerun subtracts again.
func TestTopologyMutationXferNegativeZero(t *testing.T) {
	e := newLeaveEnv(t, false)
	f := &topoFaults{mut: MutationXferNegativeZero}
	for i := 1; i <= 2; i++ {
		if rep, err := e.apply(f); err == nil || errors.Is(err, errCrashed) {
			t.Fatalf("mutated apply #%d = %+v, %v; want the done step's refusal of -0", i, rep, err)
		}
	}
	if got, want := e.counters()["z"]["n3"]["available"], e.before["z"]["n3"]["available"]; got != -want {
		t.Fatalf("n3's available after two mutated applies = %d, want %d (subtracted twice)", got, -want)
	}
}
