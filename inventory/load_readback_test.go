package inventory

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// corruptBeforeRead corrupts a SKU's counter on one node right before the
// first stock read (GetStock's script) reaches that node, once armed.
type corruptBeforeRead struct {
	crashPoint
	armed  atomic.Bool
	node   string
	key    string
	client *redis.Client
}

func (c *corruptBeforeRead) Call(ctx context.Context, sc ScriptCall, send func() (any, error)) (any, error) {
	if sc.Script == stockScript.name && sc.Node == c.node && c.armed.CompareAndSwap(true, false) {
		if err := c.client.HSet(ctx, c.key, "available", "lots").Err(); err != nil {
			return nil, err
		}
	}
	return send()
}

// TestLoadAddedThenReadBackFails: a LoadStock whose every node took its
// share, but whose read of the stock afterwards failed (here a counter
// corrupted between the load and the read), must say the units were added
// (ErrPartlyApplied, with the read's error), so that no caller retries it
// and adds them twice. Before, it returned the read's ErrCorrupt alone,
// which LoadStock's contract read as "no unit was added, retry".
func TestLoadAddedThenReadBackFails(t *testing.T) {
	t.Parallel()
	f := &corruptBeforeRead{node: "n1", key: stockKey("a", "s")}
	e := newStagedEnv(t) // routes a, b, c on n1, n2, n3
	f.client = e.clients["n1"]
	inv := e.faultyInstance(f)
	f.armed.Store(true)
	_, err := inv.LoadStock(e.ctx, "a", "s", 7, -1)
	if f.armed.Load() {
		t.Fatal("LoadStock read no stock on n1 after loading")
	}
	if !errors.Is(err, ErrPartlyApplied) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "all 7 units were added") {
		t.Fatalf("LoadStock = %v; want ErrPartlyApplied and the read's ErrCorrupt, saying every unit was added", err)
	}
}
