package tests

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
)

// fenceGate is a Faults that holds the next durability fence
// ("durable-fence") before it is sent, until released: the consumer's
// process stalled between its read and the fence (a GC pause, a paused
// VM, a stopped process), as long as a failover takes.
type fenceGate struct {
	mu      sync.Mutex
	armed   bool
	held    chan struct{} // closed when a fence is being held
	release chan struct{}
}

func (f *fenceGate) Call(ctx context.Context, c inventory.ScriptCall, send func() (any, error)) (any, error) {
	f.mu.Lock()
	hold := f.armed && c.Script == "durable-fence"
	if hold {
		f.armed = false
	}
	f.mu.Unlock()
	if hold {
		close(f.held)
		<-f.release
	}
	return send()
}

func (f *fenceGate) Crash(context.Context, string) bool { return false }

// With durability replica, a redo-log read that returns entries returns
// only once a replica has everything it read (durability.go, "Reads a
// consumer lands"): the fence, an empty write and its WAIT, sent after the
// read on the same node. But the fence is a second call, and nothing ties
// it to the server process the read ran on. Here the read runs on the
// master and returns the entry of a Reserve no replica acknowledged
// (ErrNotDurable); the consumer stalls before its fence; the master is
// killed and the replica, which never received the Reserve, is promoted;
// then the fence runs on the promoted replica, whose own replica
// acknowledges it. ReadRedoBatch answers the entry as durable, though the
// node no longer has it: the sync would land a Reserve the failover undid
// (TestSentinelSyncAfterUnacknowledgedReserve's case, one stall later).
func TestFenceAfterFailoverIsNotDurable(t *testing.T) {
	t.Parallel()
	const pw = "grouppw"
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "fence-failover", Password: pw, DownAfter: 3 * time.Second})
	cfg := durableSentinelConfig(g, pw)
	cfg.Inventory.RedoQueues = 1
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r, _ := startRouter(t, &cfg)
	gate := &fenceGate{held: make(chan struct{}), release: make(chan struct{})}
	logger := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	inv, err := inventory.New(r, inventory.Options{Logger: logger, Faults: gate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	n1, _ := r.Node("n1")
	waitFor(t, 10*time.Second, "n1 usable", func() bool { return n1.Usable() })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := inv.LoadStock(ctx, "r", "tee", 10, 0); err != nil {
		t.Fatalf("LoadStock: %v", err)
	}
	// an acknowledged order first: the consumer lands it and moves on
	if _, err := inv.Reserve(ctx, "a", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 1}}, "", 0); err != nil {
		t.Fatalf("Reserve a: %v", err)
	}
	b0, err := inv.ReadRedoBatch(ctx, "n1", "", []inventory.RedoCursor{{Queue: 0}}, 100, 0)
	if err != nil {
		t.Fatalf("ReadRedoBatch: %v", err)
	}
	es := b0.Queues[0].Entries
	if len(es) == 0 {
		t.Fatalf("no redo entry of a: %+v", b0)
	}
	cur := inventory.RedoCursor{Queue: 0, After: es[len(es)-1].Offset, PartID: es[len(es)-1].PartID}
	t.Logf("consumer at %+v", cur)

	rc := cutReplica(t, ctx, g)
	_, err = inv.Reserve(ctx, "x", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 1}}, "", 0)
	t.Logf("Reserve x while the replica is cut off: %v", err)
	if !errors.Is(err, inventory.ErrNotDurable) {
		t.Fatalf("Reserve without a replica: %v, want ErrNotDurable (unknown outcome)", err)
	}

	// the consumer reads past its cursor; its fence stalls
	gate.mu.Lock()
	gate.armed = true
	gate.mu.Unlock()
	type result struct {
		b   inventory.RedoBatch
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := inv.ReadRedoBatch(context.Background(), "n1", "", []inventory.RedoCursor{cur}, 100, 0)
		done <- result{b, err}
	}()
	select {
	case <-gate.held:
	case res := <-done:
		t.Fatalf("the read returned before its fence: %+v, %v", res.b, res.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no fence")
	}

	failOverToCutReplica(t, ctx, g, rc, pw, n1, 30*time.Second)
	close(gate.release)
	res := <-done
	t.Logf("read across the failover: %+v, err %v", res.b, res.err)

	now, err := inv.ReadRedoBatch(ctx, "n1", "", []inventory.RedoCursor{cur}, 100, 0)
	if err != nil {
		t.Fatalf("ReadRedoBatch after the failover: %v", err)
	}
	t.Logf("the node's queue past the cursor now: %+v", now)
	if res.err != nil {
		return // unknown: the consumer reads again, as after a timeout
	}
	got := res.b.Queues[0].Entries
	have := map[int64]string{}
	for _, e := range now.Queues[0].Entries {
		have[e.Offset] = e.PartID
	}
	for _, e := range got {
		if have[e.Offset] != e.PartID {
			t.Errorf("ReadRedoBatch answered entry %d (part %s, order %s) as durable (a replica had it), but the node "+
				"no longer holds it after the failover (now %q): the fence ran on the promoted replica, not on the "+
				"server the read ran on", e.Offset, e.PartID, e.OrderID, have[e.Offset])
		}
	}
}

// durableSentinelConfig is the configuration of the durability tests over
// one Sentinel group g (password pw): node n1 the group, route r on it,
// durability replica with a 300 ms WAIT, reservations of a minute.
func durableSentinelConfig(g *redistest.Group, pw string) config.Config {
	cfg := config.Default()
	n := sentinelNode(g, "")
	n.Password = pw
	cfg.Nodes = map[string]config.Node{"n1": n}
	cfg.Servers = map[string]config.Server{invServer: server(config.OnNodeDownFail, map[string][]string{"r": {"n1"}})}
	cfg.Health = sentinelHealth
	cfg.Inventory.ReservationTTL = time.Minute
	cfg.Inventory.Durability = config.DurabilityReplica
	cfg.Inventory.DurabilityTimeout = 300 * time.Millisecond
	return cfg
}
