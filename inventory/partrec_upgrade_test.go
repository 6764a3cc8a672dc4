package inventory

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Parts written by the release before the packed layout (hashes, as its
// scripts wrote them) are read, set aside and retried, counted by
// topology apply, confirmed, cancelled, expired and found by a retry of
// their order after the upgrade: nothing reserved is lost, nothing is
// settled twice, the stock and the user's quota counters add up.
func TestPartRecordsHashLayoutUpgrade(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	type order struct {
		upgradeOrder
		user string
	}
	var confirm, cancel, expire, retry []order
	for i := range 6 {
		items, user := one, ""
		if i%2 == 1 {
			items = stagedItems()
		}
		if i%3 != 0 {
			user = "u1" // quota parts too
		}
		mk := func(what string) order {
			return order{upgradeOrder{id: fmt.Sprintf("hash-%s-%d", what, i), items: items}, user}
		}
		confirm, cancel, expire, retry = append(confirm, mk("confirm")), append(cancel, mk("cancel")),
			append(expire, mk("expire")), append(retry, mk("retry"))
	}
	reserve := func(set []order, ttl time.Duration) {
		for i := range set {
			res, err := e.inv.Reserve(e.ctx, set[i].id, set[i].items, set[i].user, ttl)
			if err != nil {
				t.Fatalf("Reserve %s: %v", set[i].id, err)
			}
			set[i].res = res
		}
	}
	reserve(confirm, time.Hour)
	reserve(cancel, time.Hour)
	reserve(retry, time.Hour)
	reserve(expire, stagedTTL)
	if _, err := e.reserveAtTTL("staged:before-commit", "hash-staging", time.Hour); err == nil {
		t.Fatal("Reserve stopped before its commit succeeded")
	}
	// A tombstone (Cancel before any reserve) and settled parts carry a
	// TTL, which the conversion keeps.
	if _, err := e.inv.Cancel(e.ctx, "hash-tomb"); err != nil {
		t.Fatal(err)
	}
	if n := e.toHashLayout(); n < 40 {
		t.Fatalf("%d part records rewritten in the hash layout, want every part of the orders", n)
	}

	// Read by the redo log, set aside and retried, counted by topology apply.
	quota := map[string]bool{}
	for _, n := range e.inv.Nodes() {
		for q := range e.inv.RedoQueues() {
			entries, err := e.inv.ReadRedoLog(e.ctx, n.Name(), q, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, en := range entries {
				if en.State != "pending" || en.SKU != "s" || en.Quantity < 1 || !strings.HasPrefix(en.PartID, en.OrderID+"|") {
					t.Errorf("redo entry of a hash-layout part on %s: %+v", n.Name(), en)
				}
			}
		}
		qc, err := pendingQuotaCounters(e.ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		for k := range qc {
			quota[k] = true
		}
	}
	for _, rt := range []string{"a", "b", "c"} {
		if !quota[quotaKey(rt, "s", "u1")] {
			t.Errorf("topology apply does not see the pending quota parts of route %s: %v", rt, quota)
		}
	}
	stuckNode := retry[0].res.Receipts[0].Node
	stuckKeys := e.clients[stuckNode].Keys(e.ctx, partKey(retry[0].id+"|*")).Val()
	if len(stuckKeys) != 1 {
		t.Fatalf("parts of %s on %s: %v, want one", retry[0].id, stuckNode, stuckKeys)
	}
	e.setAsideAndRetry(stuckNode, strings.TrimPrefix(stuckKeys[0], partKeyPrefix))

	for _, o := range confirm {
		if out, err := e.inv.Confirm(e.ctx, o.id); err != nil || out.Status != StatusConfirmed || out.PendingParts != 0 {
			t.Fatalf("Confirm %s: %+v, %v", o.id, out, err)
		}
	}
	for _, o := range cancel {
		if out, err := e.inv.Cancel(e.ctx, o.id); err != nil || out.Status != StatusCancelled || out.PendingParts != 0 {
			t.Fatalf("Cancel %s: %+v, %v", o.id, out, err)
		}
	}
	for _, o := range retry {
		res, err := e.inv.Reserve(e.ctx, o.id, o.items, o.user, time.Hour)
		if err != nil || fmt.Sprint(res.Receipts) != fmt.Sprint(o.res.Receipts) {
			t.Fatalf("retry of %s: %+v, %v; want the receipts %+v", o.id, res.Receipts, err, o.res.Receipts)
		}
	}
	time.Sleep(stagedLease + 50*time.Millisecond)
	if out, err := e.inv.Confirm(e.ctx, "hash-staging"); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm of the staging record: %+v, %v", out, err)
	}
	time.Sleep(stagedTTL)
	keep := 0 // the retry orders' parts: a receipt per stock part, and a quota part per route of a user's order
	for _, o := range retry {
		keep += len(o.res.Receipts)
		if o.user != "" {
			keep += len(o.items) // one item per route
		}
	}
	e.expireUntilPending(keep)

	for _, set := range []struct {
		orders []order
		want   string
	}{{confirm, "confirmed"}, {cancel, "cancelled"}, {expire, "cancelled"}, {retry, "reserved"}} {
		for _, o := range set.orders {
			e.verify(o.id, set.want)
		}
	}
	e.verify("hash-staging", "confirmed")
	e.stock()
	// The user's quota counts what is confirmed or still reserved.
	for _, rt := range []string{"a", "b", "c"} {
		var want, got int64
		for _, o := range append(append([]order(nil), confirm...), retry...) {
			for _, it := range o.items {
				if o.user == "u1" && it.Route == rt {
					want += it.Quantity
				}
			}
		}
		for _, c := range e.clients {
			n, _ := c.Get(e.ctx, quotaKey(rt, "s", "u1")).Int64()
			got += n
		}
		if got != want {
			t.Errorf("quota of u1 on route %s: %d, want %d", rt, got, want)
		}
	}
}

// toHashLayout rewrites every part record of every node in the hash
// layout, field for field as the scripts before the packed layout wrote
// it (a quota part with an empty redo field), keeping its TTL. It returns
// how many it rewrote.
func (e *stagedEnv) toHashLayout() int {
	e.t.Helper()
	count := 0
	for name, c := range e.clients {
		keys, err := c.Keys(e.ctx, partKeyPrefix+"*").Result()
		if err != nil {
			e.t.Fatal(err)
		}
		for _, k := range keys {
			id := strings.TrimPrefix(k, partKeyPrefix)
			f := partFieldsOn(e.t, e.ctx, c, id)
			if f["kind"] == "q" {
				f["redo"] = ""
			}
			pttl := c.PTTL(e.ctx, k).Val()
			c.Del(e.ctx, k)
			if err := c.HSet(e.ctx, k, f).Err(); err != nil {
				e.t.Fatal(err)
			}
			if pttl > 0 {
				c.PExpire(e.ctx, k, pttl)
			}
			if typ := c.Type(e.ctx, k).Val(); typ != "hash" {
				e.t.Fatalf("part %s on %s is a %s after the rewrite", id, name, typ)
			}
			count++
		}
	}
	return count
}

// setAsideAndRetry sets part id of node aside, checks that the stuck-part
// listing reads its record, and puts it back by its SKU (which clears its
// backoff, on the record).
func (e *stagedEnv) setAsideAndRetry(node, id string) {
	e.t.Helper()
	if _, err := e.inv.SetAside(e.ctx, PendingPart{Node: node, PartID: id}, "test", time.Minute, time.Hour); err != nil {
		e.t.Fatal(err)
	}
	stuck, err := e.inv.StuckParts(e.ctx, node, 10)
	if err != nil || len(stuck) != 1 || stuck[0].State != PartPending || stuck[0].SKU != "s" || stuck[0].Quantity != 1 ||
		!strings.HasPrefix(id, stuck[0].OrderID+"|") {
		e.t.Fatalf("StuckParts(%s) = %+v, %v; want part %s, pending", node, stuck, err, id)
	}
	if f := partFieldsOn(e.t, e.ctx, e.clients[node], id); f["stuck_tries"] != "1" {
		e.t.Fatalf("part %s after SetAside: %v", id, f)
	}
	if n, err := e.inv.RetryStuckSKU(e.ctx, node, "a", "s"); err != nil || n != 1 {
		e.t.Fatalf("RetryStuckSKU: %d, %v", n, err)
	}
	if f := partFieldsOn(e.t, e.ctx, e.clients[node], id); f["stuck_tries"] != "" || f["state"] != "pending" {
		e.t.Fatalf("part %s after its retry: %v, want pending without stuck_tries", id, f)
	}
}
