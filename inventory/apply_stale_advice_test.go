package inventory

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/shardis/shardis/topology"
)

// TestStaleRefusalNamesRecordsAndLoneUnits: route c (10 units of c/s)
// moves off n3 onto n2, the transfer's marker on n2 is gone, and n3 goes
// back to a copy from before the move, holding c's units again and (as a
// copy taken between a transfer's out and done would) a transfer record
// of c/s off n3. An apply giving n3 route c again refuses the hash as
// stale; the refusal must name the transfer record, to be deleted with
// the hash (left alone, a later apply at its epoch would read it as its
// own), and, once n2 no longer holds the units either (a node they moved
// to went back since), say that they may be counted nowhere else and
// that the SKU's stock must be loaded again after the delete: the advice
// to delete alone lost the route's stock (the schedule explorer's seeds
// 195213 and 195392 with REJOIN=1).
func TestStaleRefusalNamesRecordsAndLoneUnits(t *testing.T) {
	t.Parallel()
	srvs, ctx, routes, apply := routeCWorld(t)
	before, after, rejoin := routes("n3"), routes("n2"), routes("n2", "n3")
	n2, n3 := srvs[1].Client(t), srvs[2].Client(t)
	loadAndBuyTwo(t, ctx, openInv(t, before, Options{}), userHomedOn(t, "n3", "n2", "n3"))
	old3 := takeCopy(t, n3)
	if rep, err := apply(after); err != nil || rep.Phase != topology.PhaseStable || rep.StockMoved != 1 {
		t.Fatalf("moving route c off n3 = %+v, %v; want stable, 1 stock hash moved", rep, err)
	}
	if keys := n2.Keys(ctx, xferMarkerKeyPrefix+"*").Val(); len(keys) == 0 || n2.Del(ctx, keys...).Err() != nil {
		t.Fatalf("the transfers' markers on n2: %v, want some, deleted", keys)
	}
	old3.restore(t, n3)
	acceptNode(t, ctx, after, n3, "n3")
	if _, err := apply(after); err != nil {
		t.Fatalf("bringing n3 forward: %v", err)
	}
	ck := stockKey("c", "s")
	record := xferKey(xferID(1, xferStock, "n3", ck))
	if err := n3.HSet(ctx, record, "a", 8, "c", 2, "l", 10, "kind", "stock", "key", ck, "dest", "n2").Err(); err != nil {
		t.Fatal(err)
	}
	refused := func(want bool) {
		t.Helper()
		_, err := apply(rejoin)
		var stale *StaleCountersError
		if !errors.As(err, &stale) || !errors.Is(err, topology.ErrInvalid) {
			t.Fatalf("giving n3 route c again = %v; want a StaleCountersError", err)
		}
		i := slices.IndexFunc(stale.Found, func(s StaleCounter) bool { return s.Node == "n3" && s.Key == ck })
		if i < 0 {
			t.Fatalf("refusal %+v names no %s on n3", stale.Found, ck)
		}
		f := stale.Found[i]
		if !slices.Equal(f.Records, []string{record}) || !strings.Contains(err.Error(), record) {
			t.Errorf("refusal of %s: records %v (error %q); want %s named", ck, f.Records, err, record)
		}
		if f.NoneElsewhere != want || strings.Contains(err.Error(), "counted nowhere else") != want {
			t.Errorf("refusal of %s: NoneElsewhere %v (error %q); want %v", ck, f.NoneElsewhere, err, want)
		}
	}
	refused(false) // n2 holds c/s's units
	if err := n2.Del(ctx, ck).Err(); err != nil {
		t.Fatal(err)
	}
	refused(true) // nothing of c/s on n2 any more
}

// TestStaleRefusalCountsOtherShares: route c spreads c/s over n2 and n3
// (10 loaded: a share of 5 on each). Route c then drops n3 (epoch 2): the
// transfer moves n3's share onto n2 (10 there). n2 and n3 both go back to
// their copies from before that apply (n2: its own share of 5, no marker
// of the transfer; n3: its share of 5) and are accepted and brought
// forward: n3's take back finds no marker on n2 and leaves its hash. An
// apply that gives n3 route c again refuses the hash as stale; n2 holds
// a loaded unit of c/s, its own share, not n3's, which it lost. The
// refusal said only that the units were counted elsewhere, and following
// it (delete the key) left 5 of the 10 loaded units, named nowhere (found
// by a review). It names the units loaded on the route's other nodes
// (StaleCounter.LoadedElsewhere: 5) to compare with the system of
// record's 10: deleting the key and loading the difference leaves 10.
func TestStaleRefusalCountsOtherShares(t *testing.T) {
	t.Parallel()
	srvs, ctx, routes, apply := routeCWorld(t)
	before, after := routes("n2", "n3"), routes("n2")
	n2, n3 := srvs[1].Client(t), srvs[2].Client(t)
	inv := openInv(t, before, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	ck := stockKey("c", "s")
	if l2, l3 := n2.HGet(ctx, ck, "loaded").Val(), n3.HGet(ctx, ck, "loaded").Val(); l2 != "5" || l3 != "5" {
		t.Fatalf("setup: c/s loaded %s on n2, %s on n3; want 5 and 5", l2, l3)
	}
	old2, old3 := takeCopy(t, n2), takeCopy(t, n3)
	if rep, err := apply(after); err != nil || rep.Phase != topology.PhaseStable || rep.StockMoved != 1 {
		t.Fatalf("dropping n3 from route c = %+v, %v; want stable, 1 stock hash moved", rep, err)
	}
	old2.restore(t, n2)
	old3.restore(t, n3)
	acceptNode(t, ctx, after, n2, "n2")
	acceptNode(t, ctx, after, n3, "n3")
	rep, err := apply(after)
	if err != nil || len(rep.Forward) != 2 {
		t.Fatalf("bringing n2 and n3 forward = %+v, %v; want both forward", rep, err)
	}
	t.Logf("forward: left behind %+v", rep.LeftBehind)
	// the operator follows the refusal to the letter
	_, err = apply(before)
	var stale *StaleCountersError
	if !errors.As(err, &stale) {
		t.Fatalf("giving n3 route c again = %v; want a StaleCountersError", err)
	}
	i := slices.IndexFunc(stale.Found, func(s StaleCounter) bool { return s.Node == "n3" && s.Key == ck })
	if i < 0 {
		t.Fatalf("refusal %+v names no %s on n3", stale.Found, ck)
	}
	f := stale.Found[i]
	if f.NoneElsewhere || f.LoadedElsewhere != 5 || !strings.Contains(err.Error(), "the route's other nodes hold 5 loaded units of it") ||
		!strings.Contains(err.Error(), "load the difference") {
		t.Fatalf("refusal of n3's %s: LoadedElsewhere %d, NoneElsewhere %v (%v); want 5 loaded elsewhere (n2's own share), named, and the difference to load",
			ck, f.LoadedElsewhere, f.NoneElsewhere, err)
	}
	if err := n3.Del(ctx, append([]string{ck}, f.Records...)...).Err(); err != nil {
		t.Fatal(err)
	}
	const recordsLoaded = 10 // what the system of record says was loaded
	inv = openInv(t, after, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", recordsLoaded-f.LoadedElsewhere, -1); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	if rep, err := apply(before); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("giving n3 route c again once the key is gone = %+v, %v", rep, err)
	}
	lvl, err := openInv(t, before, Options{}).GetStock(ctx, "c", "s")
	if err != nil {
		t.Fatal(err)
	}
	if lvl.Available+lvl.Confirmed != 10 || lvl.Loaded != 10 {
		t.Fatalf("after following the refusal: c/s has %d available, %d confirmed, %d loaded; want 10 of 10", lvl.Available, lvl.Confirmed, lvl.Loaded)
	}
}
