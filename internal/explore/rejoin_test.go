package explore

import (
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

// TestHealApplyClearsStaleCounters: the heal's apply, refused for a stale
// counter (n4 holds c/s units, as a copy taken while it served route c
// would, and T1 makes it join c), does what the refusal tells the
// operator: it deletes the counter and applies again. The refused apply
// is counted as one refused for stale counters and not as one that ran
// (observed.applied); the one after it ran.
func TestHealApplyClearsStaleCounters(t *testing.T) {
	w, ctx := testWorld(t, false, time.Minute)
	if err := w.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	key := inventory.StockKey("c", "s")
	if err := w.direct["n4"].HSet(ctx, key, "available", 3, "reserved", 0, "confirmed", 0, "loaded", 3).Err(); err != nil {
		t.Fatal(err)
	}
	o := newObserved()
	if err := w.healApply(ctx, o, "T1", time.Second); err != nil {
		t.Fatal(err)
	}
	if o.stale != 1 || o.staleFound != 1 || o.staleCleared != 1 {
		t.Errorf("refused %d, naming %d, cleared %d; want 1, 1, 1 (log %v)", o.stale, o.staleFound, o.staleCleared, o.log)
	}
	if len(o.ran) != 1 || o.ran[0].to != "T1" || o.applies != 2 {
		t.Errorf("ran %v of %d applies; want T1 once of 2", o.ran, o.applies)
	}
	if l, err := w.direct["n4"].HGet(ctx, key, "loaded").Int64(); err == nil && l != 0 {
		t.Errorf("n4 serves %d loaded units of %s that no load put there", l, key)
	}
	if at, stable, err := w.topologyNow(ctx); err != nil || at != "T1" || !stable {
		t.Errorf("topology %s, stable %v, %v; want T1, stable", at, stable, err)
	}
}
