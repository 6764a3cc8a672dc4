package bench

import (
	"context"
	"log/slog"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

func TestScratchPerfRedis(t *testing.T) {
	ctx := context.Background()
	c, err := StartCluster(ctx, false, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	inv := c.Inv
	if _, err := inv.LoadStock(ctx, singleRoutes[0], "hot", 1_000_000_000, 0); err != nil {
		t.Fatal(err)
	}
	hot1 := []inventory.Item{{Route: singleRoutes[0], SKU: "hot", Quantity: 1}}
	op := func(w *Worker) error {
		id, err := inv.NewOrderID(ctx, hot1...)
		if err != nil {
			return err
		}
		_, err = inv.Reserve(ctx, id, hot1, "", 0)
		return err
	}
	load := NewLoad(64, 1)
	load.Run(time.Second, op)
	set, _ := c.Router.Set(invServer, singleRoutes[0])
	n1 := set.Nodes()[0].Name()
	var pid int
	for i, name := range nodeNames {
		if name == n1 {
			pid = c.Pids()[i]
		}
	}
	cmd := exec.Command("perf", "record", "-F", "2000", "-g", "-p", strconv.Itoa(pid), "-o", "/tmp/redis.perf", "--", "sleep", "4")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := load.Run(5*time.Second, op)
	cmd.Wait()
	t.Logf("orders/s %.0f", s.OpsPerSec())
}
