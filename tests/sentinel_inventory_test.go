package tests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/stack"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// invFailover is one run of the inventory over a Sentinel group (node n1,
// no persistence: a killed master loses everything it held) under order
// load while the master is killed with SIGKILL.
type invFailover struct {
	t   *testing.T
	g   *redistest.Group
	st  *stack.Stack
	n1  *node.Node
	old string // the killed master

	mu        sync.Mutex
	reserved  []string // orders whose Reserve was acknowledged
	confirmed []string // orders whose Confirm was acknowledged
	// unsure are reserved orders whose Confirm failed: its outcome may be
	// unknown (the decision may be on the node with its parts still
	// reserved), so the client retries it after the failover, as
	// Confirm's contract asks.
	unsure []string
	failed map[string]int
}

const (
	sentinelSKU    = "tee"
	sentinelLoaded = 100000
)

// startInvFailover starts the group and the inventory stack with the
// given durability, and loads the stock.
func startInvFailover(t *testing.T, durability string) *invFailover {
	f := &invFailover{t: t, failed: map[string]int{}}
	f.g = redistest.StartGroup(t, redistest.GroupOptions{Name: "inv-" + durability})
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": sentinelNode(f.g, "")}
	cfg.Servers = map[string]config.Server{invServer: server(config.OnNodeDownFail, map[string][]string{"r": {"n1"}})}
	cfg.Health = sentinelHealth
	cfg.Inventory.ReconcileInterval = 100 * time.Millisecond
	cfg.Inventory.ReservationTTL = time.Minute // nothing expires during the test
	cfg.Inventory.Durability = durability
	cfg.Inventory.DurabilityTimeout = 300 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := stack.Open(ctx, &cfg, stack.Options{Logger: logger})
	if err != nil {
		t.Fatalf("stack.Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f.st = st
	f.n1, _ = st.Router.Node("n1")
	f.waitUsable(10 * time.Second)
	if _, err := st.Inventory.LoadStock(context.Background(), "r", sentinelSKU, sentinelLoaded, 0); err != nil {
		t.Fatalf("LoadStock: %v", err)
	}
	return f
}

func (f *invFailover) waitUsable(limit time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(limit)
	for !f.n1.Usable() {
		if time.Now().After(deadline) {
			f.t.Fatalf("n1 not usable within %v: %v", limit, f.n1.DownReason())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// load runs workers that reserve one unit per order and confirm every
// other order, until stop is closed; it records what was acknowledged.
func (f *invFailover) load(stop <-chan struct{}, wg *sync.WaitGroup) {
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("o-%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := f.st.Inventory.Reserve(ctx, id, []inventory.Item{{Route: "r", SKU: sentinelSKU, Quantity: 1}}, "", 0)
				if err == nil {
					f.record(&f.reserved, id)
					if i%2 == 0 {
						if _, err = f.st.Inventory.Confirm(ctx, id); err == nil {
							f.record(&f.confirmed, id)
						} else {
							f.record(&f.unsure, id)
						}
					}
				}
				cancel()
				if err != nil {
					f.mu.Lock()
					c := errClass(err)
					if f.failed[c] == 0 {
						f.t.Logf("first %q failure: %v", c, err)
					}
					f.failed[c]++
					f.mu.Unlock()
					time.Sleep(5 * time.Millisecond) // do not spin on refusals
				}
			}
		}()
	}
}

// retryConfirms retries every Confirm that failed under load until it has
// an answer: a success is an acknowledged confirmation; any other definite
// answer leaves the order as it is.
func (f *invFailover) retryConfirms() {
	f.t.Helper()
	f.mu.Lock()
	unsure := append([]string(nil), f.unsure...)
	f.mu.Unlock()
	for _, id := range unsure {
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := f.st.Inventory.Confirm(ctx, id)
			cancel()
			if err == nil {
				f.record(&f.confirmed, id)
				break
			}
			if !errors.Is(err, inventory.ErrUnavailable) {
				break
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("Confirm %s still unavailable 10s after the failover: %v", id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (f *invFailover) record(list *[]string, id string) {
	f.mu.Lock()
	*list = append(*list, id)
	f.mu.Unlock()
}

func errClass(err error) string {
	switch {
	case errors.Is(err, inventory.ErrNotDurable):
		return "not acknowledged by a replica (unknown outcome)"
	case errors.Is(err, node.ErrDown):
		return "node down"
	case errors.Is(err, inventory.ErrUnavailable):
		return "unavailable"
	}
	return err.Error()
}

// killUnderLoad runs the load, kills the master, and returns once the
// sentinels promoted the replica (or fails the test). The load goes on
// until the returned stop func is called.
func (f *invFailover) killUnderLoad() (stop func()) {
	ch := make(chan struct{})
	var wg sync.WaitGroup
	f.load(ch, &wg)
	time.Sleep(500 * time.Millisecond)
	f.old = f.g.KillMaster()
	f.g.WaitPromoted(f.old, 60*time.Second) // past a TILT (redistest Group.Failover)
	return func() {
		close(ch)
		wg.Wait()
	}
}

// statuses returns the status of each order as recorded on the group's
// master.
func (f *invFailover) statuses(ids []string) map[string]string {
	f.t.Helper()
	c := f.g.Client(f.t, f.g.Master())
	ctx := context.Background()
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		rec, err := inventory.ReadOrder(ctx, c, id).Fields()
		if err != nil {
			f.t.Fatalf("reading order %s on the master: %v", id, err)
		}
		out[id] = rec["status"]
	}
	return out
}

// With durability replica, no acknowledged reservation or confirmation is
// lost across kill -9 of the master, and no unit is oversold: the promoted
// replica holds every acknowledged order, the node comes back UP (its
// write sequence is at least what was acknowledged: no rollback is
// detected), and the stock's counters add up, with exactly the confirmed
// orders' units confirmed.
func TestSentinelInventoryDurabilityReplica(t *testing.T) {
	f := startInvFailover(t, config.DurabilityReplica)
	stop := f.killUnderLoad()
	f.waitUsable(20 * time.Second)
	// UP on the promoted replica, which has no replica of its own: no
	// write can be acknowledged (each waits durability_timeout and is an
	// unknown outcome). Then the old master comes back as its replica, as
	// an operator would bring it back, and writes are acknowledged again.
	time.Sleep(700 * time.Millisecond)
	f.g.Rejoin(f.old, 20*time.Second)
	time.Sleep(500 * time.Millisecond)
	stop()
	f.retryConfirms()
	f.mu.Lock()
	reserved, confirmed := append([]string(nil), f.reserved...), append([]string(nil), f.confirmed...)
	t.Logf("acknowledged: %d reservations, %d confirmations; failed: %v", len(reserved), len(confirmed), f.failed)
	notDurable := f.failed[errClass(inventory.ErrNotDurable)]
	f.mu.Unlock()
	if notDurable == 0 {
		t.Error("no write failed as not acknowledged by a replica while the promoted master had none")
	}
	if len(reserved) == 0 || len(confirmed) == 0 {
		t.Fatalf("no acknowledged orders (%d reserved, %d confirmed)", len(reserved), len(confirmed))
	}
	// Every acknowledged confirmation is on the promoted master as such,
	// every acknowledged reservation is there reserved or confirmed.
	st := f.statuses(reserved)
	for _, id := range confirmed {
		if s := st[id]; s != "confirmed" {
			t.Errorf("order %s: Confirm was acknowledged, the promoted master has it %q", id, s)
		}
	}
	for _, id := range reserved {
		if s := st[id]; s != "reserved" && s != "confirmed" {
			t.Errorf("order %s: Reserve was acknowledged, the promoted master has it %q", id, s)
		}
	}
	// No unit oversold: the counters add up and the confirmed units are
	// exactly the confirmed orders' (once the deferred settles are done).
	ctx := context.Background()
	f.checkStock(ctx, func(lvl inventory.StockLevel, confirmedOrders int64) error {
		if lvl.Confirmed != confirmedOrders {
			return fmt.Errorf("confirmed %d units, %d orders are confirmed", lvl.Confirmed, confirmedOrders)
		}
		if lvl.Reserved+lvl.Confirmed < int64(len(reserved)) {
			return fmt.Errorf("reserved %d + confirmed %d units < %d acknowledged reservations", lvl.Reserved, lvl.Confirmed, len(reserved))
		}
		return nil
	})
}

// With durability none, a write is acknowledged when the master ran it,
// before the replica has it: kill -9 of the master can lose the last
// acknowledged writes (how many depends on timing, usually none on a
// loopback replica a fraction of a millisecond behind). What is
// deterministic is that such a loss is not silent: the promoted replica's
// write sequence is then behind what this process saw acknowledged, and
// the node is refused (node.ErrRolledBack, DOWN) until an operator
// accepts its data; while it is UP, every acknowledged order is there.
// The test logs which case happened.
func TestSentinelInventoryDurabilityNone(t *testing.T) {
	f := startInvFailover(t, config.DurabilityNone)
	stop := f.killUnderLoad()
	deadline := time.Now().Add(20 * time.Second)
	for !f.n1.Usable() && !errors.Is(f.n1.DownReason(), node.ErrRolledBack) {
		if time.Now().After(deadline) {
			t.Fatalf("n1 neither UP nor refused as rolled back 20s after the promotion: %v", f.n1.DownReason())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	f.mu.Lock()
	reserved, confirmed := append([]string(nil), f.reserved...), append([]string(nil), f.confirmed...)
	f.mu.Unlock()
	var lost []string
	st := f.statuses(reserved)
	for _, id := range reserved {
		if s := st[id]; s != "reserved" && s != "confirmed" {
			lost = append(lost, id)
		}
	}
	t.Logf("acknowledged: %d reservations, %d confirmations; failed: %v; acknowledged reservations missing on the promoted replica: %d %v",
		len(reserved), len(confirmed), f.failed, len(lost), lost)
	if errors.Is(f.n1.DownReason(), node.ErrRolledBack) {
		t.Logf("the promoted replica was behind what was acknowledged: n1 refused: %v", f.n1.DownReason())
		if _, err := f.st.Inventory.Reserve(context.Background(), "after", []inventory.Item{{Route: "r", SKU: sentinelSKU, Quantity: 1}}, "", 0); !errors.Is(err, inventory.ErrUnavailable) {
			t.Errorf("Reserve on a node refused as rolled back: %v, want ErrUnavailable", err)
		}
		return
	}
	// UP: its write sequence covers everything acknowledged, so nothing
	// acknowledged may be missing.
	if len(lost) > 0 {
		t.Errorf("n1 is UP on the promoted replica, yet %d acknowledged reservations are missing: %v", len(lost), lost)
	}
	f.checkStock(context.Background(), func(inventory.StockLevel, int64) error { return nil })
}

// checkStock waits up to 10s until the stock's counters are non-negative,
// add up to what was loaded, and extra (given the level and the number of
// confirmed orders on the master) holds.
func (f *invFailover) checkStock(ctx context.Context, extra func(inventory.StockLevel, int64) error) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f.stockProblem(ctx, extra)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("stock invariant: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (f *invFailover) stockProblem(ctx context.Context, extra func(inventory.StockLevel, int64) error) error {
	lvl, err := f.st.Inventory.GetStock(ctx, "r", sentinelSKU)
	if err != nil {
		return err
	}
	if lvl.Available < 0 || lvl.Reserved < 0 || lvl.Confirmed < 0 ||
		lvl.Available+lvl.Reserved+lvl.Confirmed != sentinelLoaded || lvl.Loaded != sentinelLoaded {
		return fmt.Errorf("available %d + reserved %d + confirmed %d, loaded %d; want %d", lvl.Available, lvl.Reserved, lvl.Confirmed, lvl.Loaded, sentinelLoaded)
	}
	c := f.g.Client(f.t, f.g.Master())
	var confirmedOrders int64
	iter := c.Scan(ctx, 0, "inv:order:*", 1000).Iterator()
	for iter.Next(ctx) {
		_, id := inventory.ParseKey(iter.Val())
		if rec, _ := inventory.ReadOrder(ctx, c, id).Fields(); rec["status"] == "confirmed" {
			confirmedOrders++
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return extra(lvl, confirmedOrders)
}

// durabilityConfig is one standalone node n1 serving the inventory with
// the given durability.
func durabilityConfig(t *testing.T, addr, durability string) *config.Config {
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: addr, Weight: 1}}
	cfg.Servers = map[string]config.Server{invServer: server(config.OnNodeDownFail, map[string][]string{"r": {"n1"}})}
	cfg.Health = sentinelHealth
	cfg.Inventory.Durability = durability
	cfg.Inventory.DurabilityTimeout = 100 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// durability aof needs WAITAOF (Redis 7.2): over an older node the stack
// refuses to start, naming the node and its version. (The Redis of this
// repository's test machines is 7.0; on 7.2 or later the stack starts.)
func TestDurabilityAOFNeedsRedis72(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ver, err := srv.Client(t).Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	cfg := durabilityConfig(t, srv.Addr(), config.DurabilityAOF)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := stack.Open(ctx, cfg, stack.Options{Logger: invDiscard})
	if strings.Contains(ver, "redis_version:7.0.") || strings.Contains(ver, "redis_version:6.") {
		if err == nil {
			st.Close()
			t.Fatal("stack.Open with durability aof over Redis < 7.2: nil error")
		}
		for _, want := range []string{"inventory.durability aof", "WAITAOF", "node n1 runs Redis 7.0"} {
			if !strings.Contains(err.Error(), want) && !(want == "node n1 runs Redis 7.0" && strings.Contains(err.Error(), "node n1 runs Redis 6.")) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("stack.Open with durability aof over Redis >= 7.2: %v", err)
	}
	st.Close()
}

// With durability replica, a node without a replica acknowledges nothing:
// the write ran but its outcome is unknown (ErrNotDurable, ErrUnavailable),
// exactly like a timeout, and the node itself is not blamed (UP, breaker
// closed).
func TestDurabilityReplicaWithoutReplica(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := stack.Open(ctx, durabilityConfig(t, srv.Addr(), config.DurabilityReplica), stack.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The instance's first read initialises the topology record on n1: the
	// script runs, its WAIT fails, and the view stays not ready until the
	// next read (250 ms later) finds the record. Wait for that, so the
	// LoadStock below meets its own durability wait, not that cached view.
	for !st.Inventory.TopologyStatus(ctx).Ready {
		if ctx.Err() != nil {
			t.Fatalf("topology never ready: %s", st.Inventory.TopologyStatus(context.Background()).Reason)
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	_, err = st.Inventory.LoadStock(ctx, "r", "tee", 10, 0)
	// LoadStock reports every node's failure in its message.
	if !errors.Is(err, inventory.ErrUnavailable) || !strings.Contains(err.Error(), inventory.ErrNotDurable.Error()) {
		t.Fatalf("LoadStock without a replica: %v, want ErrUnavailable naming ErrNotDurable", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("LoadStock failed after %v, before the 100ms durability timeout", d)
	}
	// The script ran on the master: the units are there.
	if v, _ := srv.Client(t).HGet(ctx, "inv:stock:r:tee", "available").Int64(); v != 10 {
		t.Errorf("available on the node = %d, want 10 (the script ran; only its acknowledgement is missing)", v)
	}
	for i := 0; i < 8; i++ {
		if _, err := st.Inventory.Reserve(ctx, fmt.Sprintf("o%d", i), []inventory.Item{{Route: "r", SKU: "tee", Quantity: 1}}, "", 0); !errors.Is(err, inventory.ErrNotDurable) {
			t.Fatalf("Reserve without a replica: %v, want ErrNotDurable", err)
		}
	}
	n1, _ := st.Router.Node("n1")
	if n1.State() != node.StateUp || n1.BreakerState() != "closed" {
		t.Errorf("n1 after unacknowledged writes: %v, breaker %s; want up, closed", n1.State(), n1.BreakerState())
	}
}
