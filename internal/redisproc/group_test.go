package redisproc

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// A group starts settled; after kill -9 of its master the sentinels
// promote the replica, and the old master, restarted, rejoins as a
// replica of the new one (Rejoin).
func TestGroupFailover(t *testing.T) {
	start := time.Now()
	g, err := StartGroup(GroupOptions{Name: "g1", KillWithParent: true})
	if err != nil {
		t.Fatalf("StartGroup: %v", err)
	}
	t.Logf("group settled %v after start", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", g.Logs(40))
		}
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ctx := context.Background()
	old, err := g.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old != g.Data[0].Addr() {
		t.Fatalf("master %s, want the first data server %s", old, g.Data[0].Addr())
	}
	killed := time.Now()
	if err := g.ByAddr(old).Kill(); err != nil {
		t.Fatal(err)
	}
	promoted, err := g.WaitPromoted(ctx, old, 60*time.Second) // past a sentinel TILT (30 s) on a loaded machine
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted %s %v after kill -9 of %s", promoted, time.Since(killed).Round(time.Millisecond), old)
	if promoted != g.Data[1].Addr() {
		t.Errorf("promoted %s, want the replica %s", promoted, g.Data[1].Addr())
	}
	if err := g.Rejoin(ctx, old); err != nil {
		t.Fatal(err)
	}
	// REPLICAOF took effect at once: the old master is the promoted one's
	// replica (its link comes up with the sync).
	if ri, err := g.info(ctx, old, "replication"); err != nil || ri["role"] != "slave" || ri["master_port"] != strconv.Itoa(portOf(promoted)) {
		t.Fatalf("after Rejoin %s reports %v (%v), want a replica of %s", old, ri, err, promoted)
	}
	if err := g.WaitSettled(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// Sentinel may fail over again by itself (a master that did not answer
	// within down-after on a loaded machine): worth a note, not a failure.
	if m, _ := g.Master(ctx); m != promoted {
		t.Logf("note: the sentinels failed over again, to %s\n%s", m, g.Logs(30))
	}
	t.Logf("settled with %s rejoined as replica %v after the kill", old, time.Since(killed).Round(time.Millisecond))
}
