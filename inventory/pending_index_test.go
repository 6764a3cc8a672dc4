package inventory

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A stock part is indexed as pending under its redo-log place; parts that
// a release before indexed under their ids are confirmed, cancelled,
// expired, rescheduled, set aside and retried as before and leave no
// member behind; a member that names no part is listed as a part whose
// record is gone and unindexed.
func TestPendingIndexMembers(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	cl := e.clients["n1"]
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	var all []upgradeOrder
	reserve := func(what string, n int, ttl time.Duration) []upgradeOrder {
		var set []upgradeOrder
		for i := range n {
			o := upgradeOrder{id: fmt.Sprintf("pidx-%s-%d", what, i), items: one}
			res, err := e.inv.Reserve(e.ctx, o.id, o.items, "", ttl)
			if err != nil {
				t.Fatalf("Reserve %s: %v", o.id, err)
			}
			o.res = res
			set = append(set, o)
		}
		all = append(all, set...)
		return set
	}
	confirm, cancel, keep := reserve("confirm", 2, time.Hour), reserve("cancel", 2, time.Hour), reserve("keep", 3, time.Hour)
	expire := reserve("expire", 2, stagedTTL)

	partOf := func(o upgradeOrder) (id, member string) {
		r := o.res.Receipts[0]
		en, err := e.inv.ReadRedoLog(e.ctx, r.Node, invQueue(t, r.RedoLog), r.Offset-1, 1)
		if err != nil || len(en) != 1 {
			t.Fatalf("redo entry of %s: %+v, %v", o.id, en, err)
		}
		return en[0].PartID, fmt.Sprintf("%d:%d", invQueue(t, r.RedoLog), r.Offset)
	}
	members := cl.ZRangeWithScores(e.ctx, PendingKey, 0, -1).Val()
	if len(members) != len(all) {
		t.Fatalf("pending index holds %d members, want %d", len(members), len(all))
	}
	for _, o := range all {
		id, m := partOf(o)
		if _, err := cl.ZScore(e.ctx, PendingKey, m).Result(); err != nil {
			t.Fatalf("part %s is not indexed under its place %s: %v", id, m, err)
		}
		if got := PendingMember(id, partFieldsOn(t, e.ctx, cl, id)); got != m {
			t.Fatalf("PendingMember(%s) = %q, want %q", id, got, m)
		}
		for _, member := range []string{m, id} {
			if got, err := PendingPartID(e.ctx, cl, member); err != nil || got != id {
				t.Fatalf("PendingPartID(%s) = %q, %v; want %s", member, got, err, id)
			}
		}
		// the layout of the release before: the part's id
		sc := cl.ZScore(e.ctx, PendingKey, m).Val()
		cl.ZRem(e.ctx, PendingKey, m)
		cl.ZAdd(e.ctx, PendingKey, redis.Z{Score: sc, Member: id})
	}

	for _, o := range confirm {
		if out, err := e.inv.Confirm(e.ctx, o.id); err != nil || out.Status != StatusConfirmed {
			t.Fatalf("Confirm %s: %+v, %v", o.id, out, err)
		}
	}
	for _, o := range cancel {
		if out, err := e.inv.Cancel(e.ctx, o.id); err != nil || out.Status != StatusCancelled {
			t.Fatalf("Cancel %s: %+v, %v", o.id, out, err)
		}
	}
	// rescheduled: moved to its place, at the new deadline
	later := time.Now().Add(2 * time.Hour).UnixMilli()
	id0, m0 := partOf(keep[0])
	if _, err := e.inv.pendingAdjust(e.ctx, e.inv.Nodes()[0], "later", id0, later); err != nil {
		t.Fatal(err)
	}
	if sc, err := cl.ZScore(e.ctx, PendingKey, m0).Result(); err != nil || int64(sc) != later || cl.ZScore(e.ctx, PendingKey, id0).Err() == nil {
		t.Fatalf("rescheduled part %s: %s at %v (%v), want only %s at %d", id0, m0, sc, err, m0, later)
	}
	// set aside and retried: back under its place
	id1, m1 := partOf(keep[1])
	e.setAsideAndRetry("n1", id1)
	if cl.ZScore(e.ctx, PendingKey, m1).Err() != nil || cl.ZScore(e.ctx, PendingKey, id1).Err() == nil {
		t.Fatalf("retried part %s: not indexed under %s alone: %v", id1, m1, cl.ZRange(e.ctx, PendingKey, 0, -1).Val())
	}
	// a member that names no part
	cl.ZAdd(e.ctx, PendingKey, redis.Z{Score: 1, Member: "0:999999"})
	if got, err := PendingPartID(e.ctx, cl, "0:999999"); err != nil || got != "" {
		t.Fatalf("PendingPartID of a place with no entry = %q, %v; want \"\"", got, err)
	}
	time.Sleep(stagedTTL)
	e.expireUntilPending(len(keep))
	for _, o := range expire {
		e.verify(o.id, "cancelled")
	}
	// left: the two moved to their places, the third still under its id
	id2, _ := partOf(keep[2])
	got := cl.ZRange(e.ctx, PendingKey, 0, -1).Val()
	sort.Strings(got)
	want := []string{m0, m1, id2}
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pending index after the settles: %v, want %v", got, want)
	}
	for _, o := range keep {
		e.verify(o.id, "reserved")
	}
	e.stock()
}
