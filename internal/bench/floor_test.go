package bench

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
)

// TestFloorYardstick checks the floor script against a real node (check),
// then 100 concurrent orders against 60 units through the batcher: exactly
// 60 are taken, each once, with offsets 1..60, and 40 are short; a taken
// order id is refused when stock is back.
func TestFloorYardstick(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	cfg := BenchConfig([]string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()})
	r, err := router.New(context.Background(), cfg, router.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFloorBatcher(ctx, r.Nodes()[0])
	if err := f.check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.n.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.load(ctx, 60); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 100)
	for i := range errs {
		wg.Go(func() { errs[i] = f.reserve("o" + strconv.Itoa(i)) })
	}
	wg.Wait()
	var ok, short int
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, errFloorShort):
			short++
		default:
			t.Errorf("order %d: %v", i, err)
		}
	}
	if ok != 60 || short != 40 {
		t.Fatalf("%d taken, %d short; want 60 and 40", ok, short)
	}
	c := f.n.Client()
	st, err := c.HMGet(ctx, floorStock, "available", "reserved").Result()
	if err != nil || st[0] != "0" || st[1] != "60" {
		t.Fatalf("stock %v (%v), want available 0, reserved 60", st, err)
	}
	redo, err := c.ZRangeWithScores(ctx, floorRedo, 0, -1).Result()
	if err != nil || len(redo) != 60 {
		t.Fatalf("redo queue holds %d entries (%v), want 60", len(redo), err)
	}
	for i, z := range redo {
		if z.Score != float64(i+1) {
			t.Fatalf("redo entry %d has offset %v, want %d", i, z.Score, i+1)
		}
	}
	if n, err := c.ZCard(ctx, floorPending).Result(); err != nil || n != 60 {
		t.Fatalf("pending index holds %d (%v), want 60", n, err)
	}
	if err := f.load(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := f.reserve("o0"); err == nil || errors.Is(err, errFloorShort) {
		t.Fatalf("a repeated order id: %v, want a refusal for its record", err)
	}
}
