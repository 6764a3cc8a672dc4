package inventory

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardis/shardis/topology"
)

// Order records written by the release before the packed layout (hashes,
// as its scripts wrote them) are confirmed, cancelled, expired, found by a
// retry of their order, decided while staging, and refuse a Reserve of a
// tombstoned id after the upgrade: nothing reserved is lost, nothing is
// settled twice, the stock adds up; every record the new code writes is
// packed.
func TestOrderRecordsHashLayoutUpgrade(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	var confirm, cancel, expire, retry []upgradeOrder
	for i := range 6 {
		items := one
		if i%2 == 1 {
			items = stagedItems()
		}
		mk := func(what string) upgradeOrder {
			return upgradeOrder{id: fmt.Sprintf("hord-%s-%d", what, i), items: items}
		}
		confirm, cancel, expire, retry = append(confirm, mk("confirm")), append(cancel, mk("cancel")),
			append(expire, mk("expire")), append(retry, mk("retry"))
	}
	reserve := func(set []upgradeOrder, ttl time.Duration) {
		for i := range set {
			res, err := e.inv.Reserve(e.ctx, set[i].id, set[i].items, "", ttl)
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
	if _, err := e.reserveAtTTL("staged:before-commit", "hord-staging", time.Hour); err == nil {
		t.Fatal("Reserve stopped before its commit succeeded")
	}
	if _, err := e.inv.Cancel(e.ctx, "hord-tomb"); err != nil {
		t.Fatal(err)
	}
	if n := orderRecordsToHashLayout(t, e.ctx, e.clients); n != 6*4+2 {
		t.Fatalf("%d order records rewritten in the hash layout, want %d", n, 6*4+2)
	}

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
		res, err := e.inv.Reserve(e.ctx, o.id, o.items, "", time.Hour)
		if err != nil || fmt.Sprint(res.Receipts) != fmt.Sprint(o.res.Receipts) {
			t.Fatalf("retry of %s: %+v, %v; want the receipts %+v", o.id, res.Receipts, err, o.res.Receipts)
		}
	}
	if _, err := e.inv.Reserve(e.ctx, "hord-tomb", one, "", time.Hour); err == nil {
		t.Fatal("Reserve of a tombstoned order (hash layout) succeeded")
	}
	time.Sleep(stagedLease + 50*time.Millisecond)
	if out, err := e.inv.Confirm(e.ctx, "hord-staging"); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm of the staging record: %+v, %v", out, err)
	}
	time.Sleep(stagedTTL)
	e.expireAllBut(retry)

	for _, set := range []struct {
		orders []upgradeOrder
		want   string
	}{{confirm, "confirmed"}, {cancel, "cancelled"}, {expire, "cancelled"}, {retry, "reserved"}} {
		for _, o := range set.orders {
			e.verify(o.id, set.want)
		}
	}
	e.verify("hord-staging", "confirmed")
	e.stock()
	// every record a script wrote since is packed
	for _, set := range [][]upgradeOrder{confirm, cancel, expire} {
		for _, o := range set {
			home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), o.id)
			if typ := e.clients[home.Name()].Type(e.ctx, orderKey(o.id)).Val(); typ != "string" {
				t.Errorf("order %s after its decision is a %q, want a string", o.id, typ)
			}
		}
	}
}

// Pending orders in the hash layout whose home a topology change moves
// are moved (packed on the way), then confirmed and cancelled on their new
// home; the stock adds up.
func TestOrderRecordsHashLayoutMoveWithTopology(t *testing.T) {
	t.Parallel() // its own nodes
	e := newMigrateEnv(t)
	ids := e.reserveMoving(e.open(e.old), "hm", 2)
	if n := orderRecordsToHashLayout(t, e.ctx, e.clients); n < len(ids) {
		t.Fatalf("%d order records rewritten in the hash layout, want %d or more (the env's own)", n, len(ids))
	}
	if rep, err := e.apply(); err != nil || rep.Phase != topology.PhaseStable || rep.OrdersMoved < len(ids) {
		t.Fatalf("apply = %+v, %v; want %d orders moved or more", rep, err, len(ids))
	}
	for _, id := range ids {
		f := orderFieldsOn(t, e.ctx, e.clients["n4"], id)
		if f["status"] != "reserved" || f["moved"] != "" || !strings.HasPrefix(f["parts"], partsLayout2) {
			t.Fatalf("order %s on n4 after the move: %v", id, f)
		}
		if typ := e.clients["n4"].Type(e.ctx, orderKey(id)).Val(); typ != "string" {
			t.Errorf("order %s on n4 is a %q, want a string", id, typ)
		}
	}
	e.settleMoved(ids)
}

// orderRecordsToHashLayout rewrites every order record of every node in
// the hash layout, field for field as the scripts before the packed
// layout wrote them, keeping its TTL. It returns how many it rewrote.
func orderRecordsToHashLayout(t *testing.T, ctx context.Context, clients map[string]*redis.Client) int {
	t.Helper()
	count := 0
	for name, c := range clients {
		keys, err := c.Keys(ctx, orderKeyPrefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			id := strings.TrimPrefix(k, orderKeyPrefix)
			f := orderFieldsOn(t, ctx, c, id)
			pttl := c.PTTL(ctx, k).Val()
			c.Del(ctx, k)
			if err := c.HSet(ctx, k, f).Err(); err != nil {
				t.Fatal(err)
			}
			if pttl > 0 {
				c.PExpire(ctx, k, pttl)
			}
			if typ := c.Type(ctx, k).Val(); typ != "hash" {
				t.Fatalf("order %s on %s is a %s after the rewrite", id, name, typ)
			}
			count++
		}
	}
	return count
}
