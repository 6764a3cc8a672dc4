package pgsync_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// zeroHeadsOnAck, once armed, sets the head of every queue the next
// acknowledgement to node names to 0 just before it is sent: the node
// went back under the committed positions between the landing and its
// acknowledgement, which the acknowledgement then refuses.
type zeroHeadsOnAck struct {
	node  string
	raw   *redis.Client
	armed atomic.Bool
	fired atomic.Bool
}

func (f *zeroHeadsOnAck) Call(_ context.Context, c inventory.ScriptCall, send func() (any, error)) (any, error) {
	if f.armed.Load() && c.Node == f.node && c.Script == "redo-ack-batch" && f.fired.CompareAndSwap(false, true) {
		for _, k := range c.Keys[2:] { // KEYS: offsets hash, acked hash, then the queues
			_ = f.raw.HSet(context.Background(), inventory.RedoOffsetsKey, k, 0).Err()
		}
	}
	return send()
}

func (f *zeroHeadsOnAck) Crash(context.Context, string) bool { return false }

// TestAckRefusedLogsWentBackWithoutHead checks the REDO LOG WENT BACK
// line of a queue paused because its acknowledgement was refused
// (payAcks): it names the refusal and logs no head, which the
// acknowledgement did not read. Found by a review: it logged head=0
// whatever the queue's head was (the RedoQueueRead it built had none).
func TestAckRefusedLogsWentBackWithoutHead(t *testing.T) {
	t.Parallel() // its own nodes and database
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e.reserveSpread(ctx, 2)
	f := &zeroHeadsOnAck{node: "n1", raw: e.raw["n1"]}
	inv, err := inventory.New(e.stack.Router, inventory.Options{Logger: quiet(), Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pgsync.Migrate(ctx, e.pool); err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	s := pgsync.New(inv, e.pool, pgsync.Settings{PollInterval: 20 * time.Millisecond, DecideWait: -1,
		RetryBackoff: 100 * time.Millisecond, Logger: logs.logger()})
	s.Start()
	defer s.Close()
	waitFor(t, 15*time.Second, "n1 landed and acknowledged", func() bool { return e.ackedAtHeads(ctx, "n1") })
	f.armed.Store(true)
	for i := range 8 {
		items := []inventory.Item{{Route: "all", SKU: fmt.Sprintf("k%d", i), Quantity: 1}}
		if _, err := e.inv.Reserve(ctx, fmt.Sprintf("r-%d", i), items, "", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 15*time.Second, "a queue of n1 paused as gone back", func() bool {
		return f.fired.Load() && len(logged(logs, "REDO LOG WENT BACK", "node", "n1")) > 0
	})
	for _, rec := range logged(logs, "REDO LOG WENT BACK", "node", "n1") {
		if h, ok := rec["head"]; ok {
			t.Errorf("REDO LOG WENT BACK of a refused acknowledgement logs head %v, which it never read: %v", h, rec)
		}
		if r, _ := rec["acknowledgement_refused"].(string); r == "" {
			t.Errorf("REDO LOG WENT BACK of a refused acknowledgement does not say why it was refused: %v", rec)
		}
	}
}
