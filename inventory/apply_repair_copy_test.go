package inventory

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/topology"
)

// beforeWrite is a topology.Driver that passes every call to the
// inventory's own, and runs then once, just before the first record
// write on node: the record scripts run bare, past Faults.
type beforeWrite struct {
	topology.Driver
	node string
	then func()
	once sync.Once
}

// Write implements topology.Driver.
func (d *beforeWrite) Write(ctx context.Context, name, expect string, rec topology.Record) error {
	if name == d.node {
		d.once.Do(d.then)
	}
	return d.Driver.Write(ctx, name, expect, rec)
}

// TestRepairRefusedOnACopyTakenDuringStep3AcceptedAfterTheRead: route c
// moved off n3 (its 10 units of c/s to n2), the apply stable. n3 then
// lost its topology record under its stamp (Record.Lost at the token).
// The apply of the current topology reads it lost, every other node
// stable, and writes the token's stable record there again (repair). Just
// before that write, n3 goes back to its copy taken during the apply's
// step 3, before its transfer's out (at the token, migrating, c's 10
// units), and is accepted unfenced (its peers at the same token and
// attempt). Before, repair's compare-and-set on the token passed and,
// the record there, only moved its phase to stable: 10 units on n2 and on
// n3, the run (and every rerun) reporting the topology applied. Now
// repair writes at the incarnation the apply read (as step 4 and a move
// forward do): the accept gave n3 a new one, so the write is refused, and
// the rerun reads n3 migrating at the token and brings it forward,
// taking c/s back off it.
func TestRepairRefusedOnACopyTakenDuringStep3AcceptedAfterTheRead(t *testing.T) {
	t.Parallel()
	w := newMidStep3(t, 2)
	n3 := w.srvs[2].Client(t)
	if err := n3.Del(w.ctx, keyTopology).Err(); err != nil {
		t.Fatal(err)
	}
	d := &beforeWrite{Driver: testMigrator(t, w.ctx, w.after), node: "n3", then: func() {
		w.copy.restore(t, n3)
		if fenced := acceptNode(t, w.ctx, w.after, n3, "n3"); fenced {
			t.Error("setup: n3 fenced; want it accepted at the token (same token and attempt as its peers)")
		}
		if l3, phase := w.loaded(t, 2), n3.HGet(w.ctx, keyTopology, "phase").Val(); l3 != 10 || phase != string(topology.PhaseMigrating) {
			t.Errorf("setup: n3 back to its copy holds %d loaded, phase %q; want 10, migrating", l3, phase)
		}
	}}
	rep, err := topology.Apply(w.ctx, topology.Options{To: topology.Of(w.after), Wait: 5 * time.Second, Logger: w.quiet}, d)
	if !reflect.DeepEqual(rep.Repaired, []string{"n3"}) {
		t.Fatalf("setup: the apply repaired %v; want n3 (its record lost at the token)", rep.Repaired)
	}
	if !errors.Is(err, ErrTopology) || !strings.Contains(err.Error(), "incarnation") || rep.AlreadyApplied {
		t.Errorf("the apply that repaired n3 as it went back = %+v, %v; want its write refused on n3 for its new incarnation", rep, err)
	}
	w.rerunBringsN3Forward(t)
}

// TestInstanceRepairRefusedOnACopyTakenDuringStep3AcceptedAfterTheRead:
// the same copy and accept, between an instance's read of n3's record
// lost and its repair from a peer (stable at the token). Before, the
// repair's compare-and-set on the token passed and moved the copy's
// record to stable: 10 units on n2 and on n3, and the apply of the
// current topology reported it applied. Now the instance writes at the
// incarnation it read from n3: refused, n3 stays migrating, and the
// apply brings it forward, taking c/s back off it.
func TestInstanceRepairRefusedOnACopyTakenDuringStep3AcceptedAfterTheRead(t *testing.T) {
	t.Parallel()
	w := newMidStep3(t, 2)
	n3 := w.srvs[2].Client(t)
	inv := openInv(t, w.after, Options{})
	if err := n3.Del(w.ctx, keyTopology).Err(); err != nil {
		t.Fatal(err)
	}
	recs, unread := inv.readRecords(w.ctx, inv.nodes)
	if len(unread) != 0 || len(recs) != 3 || !recs[2].Lost {
		t.Fatalf("setup: records %+v, unread %v; want n3's lost", recs, unread)
	}
	w.copy.restore(t, n3)
	if fenced := acceptNode(t, w.ctx, w.after, n3, "n3"); fenced {
		t.Fatal("setup: n3 fenced; want it accepted at the token (same token and attempt as its peers)")
	}
	if inv.repairLost(w.ctx, recs, true) {
		t.Error("n3's record written again from a peer though n3 was accepted since it was read lost")
	}
	if phase := n3.HGet(w.ctx, keyTopology, "phase").Val(); phase != string(topology.PhaseMigrating) {
		t.Errorf("n3's phase %q; want migrating (its copy's, left as it is)", phase)
	}
	rep, err := w.apply(nil)
	if err != nil || !reflect.DeepEqual(rep.Forward, []string{"n3"}) || rep.TakenBack != 1 {
		t.Errorf("the apply = %+v, %v; want n3 brought forward, 1 taken back (c/s)", rep, err)
	}
	if l2, l3 := w.loaded(t, 1), w.loaded(t, 2); l2 != 10 || l3 != 0 {
		t.Errorf("at the end: n2 holds %d loaded, n3 %d; want 10 and 0 (counted once)", l2, l3)
	}
}
