package inventory

import (
	"testing"

	"github.com/shardis/shardis/topology"
)

// TestRepairLostWaitsForItsPeers: n2 lost its topology record during a
// migration (its stamp still names the token). Its record is written
// again from a peer at the token, whole: its previous topology, its
// phase and the apply's attempt. While no peer could be read, it is not
// written from the instance's own configuration (as a stable record with
// neither): the node would then read stable mid-migration, and, no
// longer lost, never be repaired from its peers (a review found it).
// With every node read and none at the token, it is (every node lost it).
func TestRepairLostWaitsForItsPeers(t *testing.T) {
	t.Parallel() // its own nodes
	e := newMigrateEnv(t)
	if rep, err := e.apply(); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply = %+v, %v", rep, err)
	}
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		if err := e.clients[n].HSet(e.ctx, keyTopology, "phase", string(topology.PhaseMigrating)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	inv := e.open(e.new)
	recs, unread := inv.readRecords(e.ctx, inv.nodes)
	if len(unread) != 0 || len(recs) != 4 {
		t.Fatalf("records %v, unread %v", recs, unread)
	}
	want := recs[0]
	if err := e.clients["n2"].Del(e.ctx, keyTopology).Err(); err != nil {
		t.Fatal(err)
	}
	recs, _ = inv.readRecords(e.ctx, inv.nodes)
	var lost []topology.Record
	for _, r := range recs {
		if r.Lost {
			lost = append(lost, r)
		}
	}
	if len(lost) != 1 || lost[0].Node != "n2" {
		t.Fatalf("records after n2's was deleted: %+v, want n2's lost", recs)
	}
	if inv.repairLost(e.ctx, lost, false) {
		t.Fatal("n2's record written again while its peers were not read")
	}
	if !inv.repairLost(e.ctx, recs, true) {
		t.Fatal("n2's record not written again from its peers")
	}
	got, err := readRecord(e.ctx, inv.nodes[1])
	if err != nil || got.Node != "n2" || got.Token != want.Token || got.Phase != topology.PhaseMigrating ||
		got.Prev == nil || got.Prev.Fingerprint() != want.Prev.Fingerprint() || got.Attempt == "" || got.Attempt != want.Attempt {
		t.Fatalf("n2's record written again: %+v, %v; want %+v's, whole", got, err, want)
	}
	if err := e.clients["n2"].Del(e.ctx, keyTopology).Err(); err != nil {
		t.Fatal(err)
	}
	if !inv.repairLost(e.ctx, lost, true) {
		t.Fatal("n2's record not written from the configuration with every node read and none at its token")
	}
}
