package pgsync_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// gate is a pgx tracer that stops one landing transaction of a node just
// before it takes its queue locks (after the worker read the redo log and
// the cancel reasons): an instance paused (GC, SIGSTOP, a slow host)
// between its read and its landing.
type gate struct {
	key     int32
	mu      sync.Mutex
	armed   bool
	blocked chan struct{}
	release chan struct{}
}

func newGate(node string) *gate {
	return &gate{key: pgsync.LockKey(node), blocked: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func (g *gate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(data.SQL, "pg_try_advisory_xact_lock($1, q)") || len(data.Args) == 0 || data.Args[0] != g.key {
		return ctx
	}
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(g.blocked)
		<-g.release
	}
	return ctx
}

func (g *gate) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Two sync instances, one of them paused between its read of n2's redo log
// and its landing (past nothing: no lock is held, no session ends). While
// it is paused, n2 goes back to an older copy of its data (the cancel of
// an order lost) and is accepted; the other instance lands the part under
// the new incarnation, pending. The paused one then resumes and lands what
// it read of the old incarnation over that row: cancelled, which nothing
// moves again. The node then confirms the order: the row must follow the
// node (it is the node's decided state), or the difference must be a
// counted conflict, as it is when one instance lands both incarnations in
// order (TestRestoredNodeConflictsWithASettledRow).
func TestPausedInstanceLandsAnOldIncarnationOverANewOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e.loadStock("one", "d", 100)
	order := e.orderOnN2(t)

	// Instance A: its own pool with the gate; it holds pending parts back
	// for a minute, so it reads the order's part only once cancelled.
	g := newGate("n2")
	pc, err := pgxpool.ParseConfig(e.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "120000"
	pc.ConnConfig.Tracer = g
	poolA, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer poolA.Close()
	if _, _, err := pgsync.Migrate(ctx, poolA); err != nil {
		t.Fatal(err)
	}
	mA := pgsync.NewMetrics(nil)
	a := pgsync.New(e.inv, poolA, pgsync.Settings{Batch: 200, PollInterval: 20 * time.Millisecond,
		SettleInterval: 100 * time.Millisecond, RetryBackoff: 100 * time.Millisecond, DecideWait: 3 * time.Second,
		StepTimeout: 2 * time.Minute, Logger: testLog(t), Metrics: mA})
	a.Start()
	defer a.Close()

	if _, err := e.inv.Reserve(ctx, order, []inventory.Item{{Route: "one", SKU: "d", Quantity: 3}}, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	snap := e.snapshotN2(t, ctx) // the part pending
	g.arm()
	if _, err := e.inv.Cancel(ctx, order); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.blocked: // A read the part cancelled and is about to land it
	case <-time.After(20 * time.Second):
		t.Fatal("instance A did not come to land the cancelled part")
	}
	time.Sleep(2 * time.Second) // the peers' marks pass the cancel
	e.restartN2(t, snap)
	e.acceptWentBack(t, ctx, "n2 refused as gone back")

	// Instance B lands the new incarnation: the part, pending.
	mB := pgsync.NewMetrics(nil)
	e.syncer(mB)
	waitFor(t, 20*time.Second, "B to land the part under the new incarnation", func() bool {
		rows, err := e.dbRows(ctx, "n2")
		if err != nil || len(rows) != 1 {
			return false
		}
		for _, r := range rows {
			return r.state == "pending"
		}
		return false
	})

	// A resumes with what it read before n2 went back.
	close(g.release)
	time.Sleep(time.Second)

	if _, err := e.inv.Confirm(ctx, order); err != nil {
		t.Fatalf("Confirm at the new incarnation: %v", err)
	}
	var nodeState string
	waitFor(t, 10*time.Second, "the part confirmed on n2", func() bool {
		ps, err := e.nodeParts(ctx, "n2")
		if err != nil {
			return false
		}
		for _, p := range ps {
			if p.order == order {
				nodeState = p.state
			}
		}
		return nodeState == "confirmed"
	})
	time.Sleep(2 * time.Second) // settle passes of both instances
	rows, err := e.dbRows(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	conflicts := mA.Conflicts() + mB.Conflicts()
	for id, r := range rows {
		t.Logf("row of %s: %+v (node: %s); conflicts counted: %v", id, r, nodeState, conflicts)
		if r.state != nodeState && conflicts == 0 {
			t.Errorf("row of %s is %s, the node's decided state is %s, and no conflict was counted (A %v, B %v)",
				id, r.state, nodeState, mA.Conflicts(), mB.Conflicts())
		}
	}
	if len(rows) != 1 {
		t.Errorf("rows of n2: %+v, want the one part's", rows)
	}
	e.waitConsistent(10*time.Second, [][2]string{{"one", "d"}}, nil)
}
