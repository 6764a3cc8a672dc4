package inventory

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
)

// review4DurableEnv is one node, n1 (route "a", SKU "s" loaded), with a
// replica attached, behind durability replica with a 700 ms wait: a
// replica's acknowledgement under a loaded CI machine (a cold build
// beside the tests) took longer than 200 ms, and the set-up's LoadStock
// failed as not durable.
type review4DurableEnv struct {
	ctx     context.Context
	inv     *Inventory
	master  *redis.Client
	replica *redistest.Server
}

// newReview4DurableEnv starts the master and its replica (fresh servers,
// not the pool's: the replica link is no state a pooled server is reset
// from), attaches the replica and waits for its link, then opens the
// router and the inventory and loads 100 units of a/s (acknowledged by
// the replica).
func newReview4DurableEnv(t *testing.T) *review4DurableEnv {
	t.Helper()
	opts := redistest.Options{Args: []string{"--save", ""}}
	master, replica := redistest.Start(t, opts), redistest.Start(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	mc, rc := master.Client(t), replica.Client(t)
	if err := rc.Do(ctx, "replicaof", "127.0.0.1", strconv.Itoa(master.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mi, _ := mc.Info(ctx, "replication").Result()
		ri, _ := rc.Info(ctx, "replication").Result()
		if strings.Contains(mi, "connected_slaves:1") && strings.Contains(ri, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica link not up:\n%s\n%s", mi, ri)
		}
	}
	cfg := envConfig()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: master.Addr(), Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail,
		Routes: map[string][]string{"a": {"n1"}}}}
	cfg.Inventory.Durability = config.DurabilityReplica
	cfg.Inventory.DurabilityTimeout = 700 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	r, err := router.New(rctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	inv, err := New(r, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	if _, err := inv.LoadStock(ctx, "a", "s", 100, 0); err != nil {
		t.Fatalf("LoadStock with the replica attached: %v", err)
	}
	return &review4DurableEnv{ctx: ctx, inv: inv, master: mc, replica: replica}
}

// Gap 1: with durability replica, ReadRedoPage (AdminService.ReadRedoLog)
// hands out only entries a replica has, as ReadRedoBatch (pgsync's read)
// does: a Reserve that no replica acknowledged (ErrNotDurable: a failover
// may undo it) ran on the master, and its entry is there; a read that
// would hand it out fails as unknown (ErrNotDurable), like ReadRedoBatch's,
// until the replica is back and has it. A read that hands nothing out
// (an idle poll) costs no fence and does not fail, as ReadRedoBatch's.
// Before, ReadRedoPage handed the unacknowledged entry out.
func TestReview4ReadRedoPageWaitsForReplica(t *testing.T) {
	t.Parallel() // its own nodes; it mostly waits
	e := newReview4DurableEnv(t)
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	res, err := e.inv.Reserve(e.ctx, "r4-acked", one, "", time.Minute)
	if err != nil {
		t.Fatalf("Reserve with the replica attached: %v", err)
	}
	first := res.Receipts[0]
	q := invQueue(t, first.RedoLog)
	p, err := e.inv.ReadRedoPage(e.ctx, "n1", q, 0, 10)
	if err != nil || len(p.Entries) != 1 || p.Entries[0].Offset != first.Offset {
		t.Fatalf("ReadRedoPage with the replica attached = %+v, %v; want the acknowledged entry", p, err)
	}

	e.replica.Pause() // SIGSTOP: it acknowledges nothing more
	t.Cleanup(e.replica.Resume)
	// an idle poll past the acknowledged entry: nothing to hand out, no fence
	if p, err := e.inv.ReadRedoPage(e.ctx, "n1", q, first.Offset, 10); err != nil || len(p.Entries) != 0 {
		t.Fatalf("idle ReadRedoPage with the replica stopped = %+v, %v; want no entries and no error", p, err)
	}
	if _, err := e.inv.Reserve(e.ctx, "r4-unacked", one, "", time.Minute); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("Reserve with the replica stopped: %v; want ErrNotDurable (unknown outcome)", err)
	}
	if n, _ := e.master.ZCard(e.ctx, redoSegmentKey(first.RedoLog, first.Offset+1)).Result(); n == 0 {
		t.Fatal("the unacknowledged Reserve left no entry on the master: the test proves nothing")
	}
	_, berr := e.inv.ReadRedoBatch(e.ctx, "n1", "", []RedoCursor{{Queue: q, After: first.Offset}}, 10, 0)
	if !errors.Is(berr, ErrNotDurable) {
		t.Fatalf("ReadRedoBatch with the replica stopped: %v; want ErrNotDurable", berr)
	}
	p, err = e.inv.ReadRedoPage(e.ctx, "n1", q, first.Offset, 10)
	if !errors.Is(err, ErrNotDurable) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ReadRedoPage with the replica stopped = %+v, %v; want ErrNotDurable (as ReadRedoBatch: %v), "+
			"not the entry a failover may undo", p, err, berr)
	}
	if _, err := e.inv.ReadRedoLog(e.ctx, "n1", q, first.Offset, 10); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("ReadRedoLog with the replica stopped: %v; want ErrNotDurable", err)
	}

	e.replica.Resume()
	var last error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		p, last = e.inv.ReadRedoPage(e.ctx, "n1", q, first.Offset, 10)
		if last == nil {
			break
		}
	}
	if last != nil || len(p.Entries) != 1 || p.Entries[0].Offset != first.Offset+1 {
		t.Fatalf("ReadRedoPage with the replica back = %+v, %v; want the entry, now on the replica", p, last)
	}
}
