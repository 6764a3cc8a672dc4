package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardis/shardis/internal/pgproc"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
	"github.com/shardis/shardis/router"
)

// TestSyncProc starts the sync child over three real nodes and a real
// PostgreSQL: it lands the parts of orders reserved here, its CPU is its
// own (not this process's), and Stop ends the process.
func TestSyncProc(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	addrs := []string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pg, err := pgproc.Start(pgproc.Options{KillWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	if err := pg.CreateDatabase(ctx, "shardis"); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, pg.DSN("shardis"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, _, err := pgsync.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}

	cfg := BenchConfig(addrs)
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	inv, err := inventory.New(r, inventory.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	if _, err := inv.LoadStock(ctx, routeAll, "s-0", 100, 0); err != nil {
		t.Fatal(err)
	}
	const orders = 20
	for i := range orders {
		if _, err := inv.Reserve(ctx, fmt.Sprintf("o-%d", i), []inventory.Item{{Route: routeAll, SKU: "s-0", Quantity: 1}}, "", time.Minute); err != nil {
			t.Fatal(err)
		}
	}

	p, err := startSyncProc(addrs, pg.DSN("shardis"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if p.Pid() == os.Getpid() {
		t.Fatalf("child pid %d is ours", p.Pid())
	}
	var landed int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM stock_movements").Scan(&landed); err != nil {
			t.Fatal(err)
		}
		if landed == orders {
			break
		}
	}
	if landed != orders {
		t.Fatalf("the sync child landed %d of %d parts", landed, orders)
	}
	if procTicks(p.Pid()) == 0 {
		t.Errorf("no CPU read for the child's pid %d", p.Pid())
	}
	p.Stop()
	if procTicks(p.Pid()) != 0 {
		t.Errorf("the child's process is still there after Stop")
	}
}
