package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// fencedStamp reports whether c's node is fenced (its stamp's epoch).
func fencedStamp(c *redis.Client) bool {
	return strings.HasPrefix(c.HGet(context.Background(), node.StampKey, "epoch").Val(), node.FencePrefix)
}

// TestStep3EndedUnderFencesIsNotRunAgain: n3 joins (routes a on n1, b on n2; c on n3 added),
// so order st's home moves from n2 to n3. n2's copy is taken during step
// 3, before st's record moved off it (st reserved there, no TTL). The
// apply ends stable; st is cancelled at n3 (acknowledged), its units sold
// to another order, and st's decided record expires at n3 (its retention
// passes). n1 and n3 are accepted while n2 does not answer (fenced at the
// apply's own token and attempt, stable under the fence); n2 goes back to
// its copy and is accepted unfenced (at the token, migrating). Every
// stable record at the token is fenced: the rerun resumed (only
// unfenced stable records told it step 3 had ended), bumped n1 and n3 back
// to migrating and ran step 3 again, which installed n2's old copy of st
// on n3 (reserved: its acknowledged cancel undone, a Confirm then
// answering confirmed for units sold to another order; found by a
// review). A stable record under a fence at the token now says step 3
// ended too: the nodes are brought forward, nothing moved again. With
// st's cancelled record still live at n3 ("live"), the install never
// replaced it.
func TestStep3EndedUnderFencesIsNotRunAgain(t *testing.T) {
	t.Parallel()
	t.Run("expired", func(t *testing.T) { step3UnderFences(t, true) })
	t.Run("live", func(t *testing.T) { step3UnderFences(t, false) })
}

func step3UnderFences(t *testing.T, expire bool) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	addrs := map[string]string{"n1": srvs[0].Addr(), "n2": srvs[1].Addr(), "n3": srvs[2].Addr()}
	before := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}})
	after := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}})
	n1, n2, n3 := srvs[0].Client(t), srvs[1].Client(t), srvs[2].Client(t)
	hb, _ := NewHomes(before)
	ha, _ := NewHomes(after)
	id := ""
	for i := 0; i < 1000 && id == ""; i++ {
		if c := fmt.Sprintf("st%d", i); hb.Home(c) == "n2" && ha.Home(c) == "n3" {
			id = c
		}
	}
	if id == "" {
		t.Fatal("no id")
	}
	inv := openInv(t, before, Options{})
	if _, err := inv.LoadStock(ctx, "a", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, id, []Item{{Route: "a", SKU: "s", Quantity: 2}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	quiet := slog.New(slog.DiscardHandler)
	f := &copyBeforeScript{t: t, node: "n2", script: orderMoveOutScript.name, c: n2}
	rep, err := ApplyTopology(ctx, ApplyOptions{To: after, From: before, Wait: 5 * time.Second, Logger: quiet, Faults: f})
	if err != nil || rep.Phase != topology.PhaseStable || rep.OrdersMoved != 1 || f.copy.keys == nil {
		t.Fatalf("n3 joins = %+v, %v (copy taken %v)", rep, err, f.copy.keys != nil)
	}
	inv = openInv(t, after, Options{})
	if out, err := inv.Cancel(ctx, id); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel %s = %+v, %v", id, out, err)
	}
	if _, err := inv.Reserve(ctx, "all", []Item{{Route: "a", SKU: "s", Quantity: 10}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Confirm(ctx, "all"); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	t.Logf("%s at n3 after the cancel: %v, ttl %v", id, orderFieldsOn(t, ctx, n3, id)["status"], n3.PTTL(ctx, orderKey(id)).Val())
	// its retention passes
	if expire {
		// every key with a TTL (the retention) whose name or content names
		// the order expires
		for name, c := range map[string]*redis.Client{"n1": n1, "n2": n2, "n3": n3} {
			keys, _ := c.Keys(ctx, "*").Result()
			for _, k := range keys {
				ttl := c.PTTL(ctx, k).Val()
				d := c.Dump(ctx, k).Val()
				if ttl > 0 && (strings.Contains(k, id) || strings.Contains(d, id)) {
					t.Logf("expiring %s on %s (ttl %v)", k, name, ttl)
					c.Del(ctx, k)
				} else if strings.Contains(k, id) || strings.Contains(d, id) {
					t.Logf("kept %s on %s (ttl %v)", k, name, ttl)
				}
			}
		}
	}
	acceptWithPaused(t, ctx, openInv(t, after, Options{}), "n1", srvs[1])
	acceptWithPaused(t, ctx, openInv(t, after, Options{}), "n3", srvs[1])
	if !fencedStamp(n1) || !fencedStamp(n3) {
		t.Fatal("setup: n1, n3 not fenced")
	}
	f.copy.restore(t, n2)
	if fenced := acceptNode(t, ctx, after, n2, "n2"); fenced {
		t.Fatal("setup: n2 fenced")
	}
	t.Logf("setup: n2 phase %s, %s on n2: %v", n2.HGet(ctx, keyTopology, "phase").Val(), id, orderFieldsOn(t, ctx, n2, id)["status"])
	rep, err = ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet})
	t.Logf("the rerun: %+v, %v", rep, err)
	st := orderFieldsOn(t, ctx, n3, id)
	t.Logf("%s at n3 after the rerun: status %q, ttl %v", id, st["status"], n3.PTTL(ctx, orderKey(id)).Val())
	if st["status"] != map[bool]string{true: "", false: "cancelled"}[expire] {
		t.Errorf("the rerun's step 3 installed n2's old copy of %s on n3 (status %q): an order cancelled and expired is live again", id, st["status"])
	}
	inv = openInv(t, after, Options{})
	out, err := inv.Confirm(ctx, id)
	lvl, lerr := inv.GetStock(ctx, "a", "s")
	t.Logf("Confirm %s = %+v, %v; a/s: %+v, %v", id, out, err, lvl, lerr)
	if err == nil && out.Status == StatusConfirmed {
		t.Errorf("order %s, cancelled (acknowledged), confirmed after the rerun: %+v", id, lvl)
	}
	_ = n1
}
