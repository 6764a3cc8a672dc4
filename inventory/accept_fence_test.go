package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// A node accepted behind its peers' topology is fenced (router.AcceptNode,
// node.FencePrefix): no instance acts on it, whatever its topology, until
// an apply brings it forward and puts back what it had moved onto it.
// Each case was found by a review, each an order acknowledged twice or
// sold twice before the fence.

// nodeCopy is a node's data as a backup holds it: every key but the
// witness marks, and its stamp's topology fields.
type nodeCopy struct {
	keys           map[string]string
	ttls           map[string]time.Duration
	epoch, attempt string
}

// takeCopy copies c's data.
func takeCopy(t *testing.T, c *redis.Client) nodeCopy {
	t.Helper()
	ctx := context.Background()
	nc := nodeCopy{keys: map[string]string{}, ttls: map[string]time.Duration{}}
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k == node.StampKey || k == node.WitnessKey {
			continue
		}
		d, err := c.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		nc.keys[k], nc.ttls[k] = d, max(c.PTTL(ctx, k).Val(), 0)
	}
	nc.epoch = c.HGet(ctx, node.StampKey, "epoch").Val()
	nc.attempt = c.HGet(ctx, node.StampKey, "attempt").Val()
	return nc
}

// restore puts nc back on c, as a node restarted from that backup (its
// stamp's identity fields left to the accept).
func (nc nodeCopy) restore(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k != node.StampKey && k != node.WitnessKey {
			if err := c.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for k, d := range nc.keys {
		if err := c.RestoreReplace(ctx, k, nc.ttls[k], d).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for f, v := range map[string]string{"epoch": nc.epoch, "attempt": nc.attempt} {
		if v == "" {
			c.HDel(ctx, node.StampKey, f)
		} else if err := c.HSet(ctx, node.StampKey, f, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// acceptNode accepts node name through a router of cfg and reports
// whether it was fenced.
func acceptNode(t *testing.T, ctx context.Context, cfg *config.Config, c *redis.Client, name string) bool {
	t.Helper()
	if _, err := openInv(t, cfg, Options{}).r.AcceptNode(ctx, name); err != nil {
		t.Fatalf("accept %s: %v", name, err)
	}
	return strings.HasPrefix(c.HGet(ctx, node.StampKey, "epoch").Val(), node.FencePrefix)
}

// n2 goes back behind an apply that moved order x off it (its record
// live there again, the move's mark lost) and is accepted. An instance
// still configured with the topology before the apply, which reads the
// topology while n1 is unreachable, sees only n2. Before the fence it
// took n2's epoch as current and cancelled x there while the current
// topology's instances confirmed it on its new home.
func TestAcceptFencesANodeBehindAnApply(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n2 := srvs[1].Client(t)
	addrs := map[string]string{"n1": srvs[0].Addr(), "n2": srvs[1].Addr(), "n3": srvs[2].Addr()}
	two := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}})
	three := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}})
	h2, _ := NewHomes(two)
	h3, _ := NewHomes(three)
	id := ""
	for i := 0; i < 1000 && id == ""; i++ {
		if c := fmt.Sprintf("x%d", i); h2.Home(c) == "n2" && h3.Home(c) == "n3" {
			id = c
		}
	}
	inv2 := openInv(t, two, Options{})
	for _, rt := range []string{"a", "b"} {
		if _, err := inv2.LoadStock(ctx, rt, "s", 100, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := inv2.Reserve(ctx, id, []Item{{Route: "a", SKU: "s", Quantity: 1}, {Route: "b", SKU: "s", Quantity: 5}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	inv2.Close()
	old2 := takeCopy(t, n2)
	if rep, err := applyTopo(ctx, three, two); err != nil || rep.Phase != topology.PhaseStable || rep.OrdersMoved < 1 {
		t.Fatalf("apply three = %+v, %v", rep, err)
	}
	old2.restore(t, n2)
	if !acceptNode(t, ctx, three, n2, "n2") {
		t.Fatal("n2, accepted at epoch 1 while its peers are at 2, was not fenced")
	}
	srvs[0].Pause()
	invI := openInv(t, two, Options{})
	st := invI.TopologyStatus(ctx)
	srvs[0].Resume()
	if st.Ready {
		t.Errorf("an instance of the old topology that reads only the fenced n2 is ready: %+v", st)
	}
	if out, err := invI.Cancel(ctx, id); err == nil {
		t.Errorf("Cancel %s on the old topology's instance = %+v; want a refusal", id, out)
	}
	if out, err := openInv(t, three, Options{}).Confirm(ctx, id); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s at the current topology = %+v, %v", id, out, err)
	}
	rep, err := applyTopo(ctx, three, two)
	if err != nil || len(rep.Forward) != 1 || rep.Forward[0] != "n2" {
		t.Fatalf("apply three again = %+v, %v; want n2 brought forward", rep, err)
	}
	if tok := n2.HGet(ctx, node.StampKey, "epoch").Val(); strings.HasPrefix(tok, node.FencePrefix) {
		t.Errorf("n2 still fenced after its forward: %s", tok)
	}
	inv3 := openInv(t, three, Options{})
	if _, err := inv3.Confirm(ctx, id); err != nil { // settles the part the fence held back
		t.Fatalf("Confirm %s again: %v", id, err)
	}
	if lv, err := inv3.GetStock(ctx, "b", "s"); err != nil || lv.Confirmed != 5 || lv.Available != 95 {
		t.Errorf("b/s after x's Confirm = %+v, %v; want 5 confirmed, 95 available", lv, err)
	}
	if out, err := inv3.Cancel(ctx, id); err == nil && out.Status == StatusCancelled {
		t.Errorf("Cancel %s after its Confirm = %+v", id, out)
	}
}

// Every node goes back below an apply's epoch, order st3 is cancelled,
// and the same topology is applied again (the same token, another
// attempt); then n2 goes back to a copy from the first attempt, holding
// st3 reserved. Before the fence the apply found every node at the token
// (AlreadyApplied), instances acted on n2 at once, and st3 was confirmed
// on top of an acknowledged Cancel after its units were sold again.
func TestAcceptFencesAnEarlierAttemptsCopy(t *testing.T) {
	e, three, two, _ := retireWorld(t)
	ctx := e.ctx
	n1, n2, n3 := e.clients["n1"], e.clients["n2"], e.clients["n3"]
	id := movedN3ToN2(t, three, two)
	reservedCopy(t, e, three, id)
	all1 := map[*redis.Client]nodeCopy{n1: takeCopy(t, n1), n2: takeCopy(t, n2), n3: takeCopy(t, n3)}
	if rep, err := applyTopo(ctx, two, three); err != nil || rep.OrdersMoved != 1 || rep.Phase != topology.PhaseStable {
		t.Fatalf("first apply = %+v, %v", rep, err)
	}
	a1n2 := takeCopy(t, n2)
	for c, cp := range all1 {
		cp.restore(t, c)
	}
	if out, err := openInv(t, three, Options{}).Cancel(ctx, id); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel at epoch 1 = %+v, %v", out, err)
	}
	if rep, err := applyTopo(ctx, two, three); err != nil || rep.OrdersMoved != 1 || rep.Phase != topology.PhaseStable {
		t.Fatalf("second apply = %+v, %v", rep, err)
	}
	a1n2.restore(t, n2)
	if !acceptNode(t, ctx, two, n2, "n2") {
		t.Fatal("n2, accepted at its peers' token but another apply attempt, was not fenced")
	}
	inv := openInv(t, two, Options{})
	if out, err := inv.Confirm(ctx, id); err == nil {
		t.Errorf("Confirm %s on the fenced n2 = %+v; want a refusal", id, out)
	}
	rep, err := applyTopo(ctx, two, three)
	if err != nil || len(rep.Forward) != 1 || rep.Reinstalled != 1 {
		t.Fatalf("apply after n2 went back = %+v, %v; want n2 brought forward, st3 put back", rep, err)
	}
	if f := orderFieldsOn(t, ctx, n2, id); f["status"] != string(OrderCancelled) {
		t.Errorf("order %s on n2 after the forward: %v; want cancelled", id, f)
	}
	inv = openInv(t, two, Options{})
	if out, err := inv.Confirm(ctx, id); err == nil && out.Status == StatusConfirmed {
		t.Errorf("order %s, cancelled (acknowledged), confirmed: %+v", id, out)
	}
}

// applyTopo applies to, from from, waiting up to 5 s for step 3.
func applyTopo(ctx context.Context, to, from *config.Config) (topology.Report, error) {
	return ApplyTopology(ctx, ApplyOptions{To: to, From: from, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
}

// As TestAcceptFencesAnEarlierAttemptsCopy, but the second apply is of
// another topology at the same epoch (homes unchanged): n2 comes back at
// the first apply's token, the same epoch as its peers'. Before the
// fence the apply brought it "forward" sideways without retiring or
// putting back anything (it was not behind by epoch), and st3 was
// confirmed on top of its acknowledged Cancel.
func TestAcceptFencesASameEpochCopyOfAnotherTopology(t *testing.T) {
	e, three, two, _ := retireWorld(t)
	ctx := e.ctx
	n1, n2, n3 := e.clients["n1"], e.clients["n2"], e.clients["n3"]
	addrs := map[string]string{"n1": e.srvs[0].Addr(), "n2": e.srvs[1].Addr(), "n3": e.srvs[2].Addr()}
	twoB := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n1"}})
	id := movedN3ToN2(t, three, twoB)
	if id != movedN3ToN2(t, three, two) {
		t.Fatal("the two topologies home the order apart")
	}
	reservedCopy(t, e, three, id)
	all1 := map[*redis.Client]nodeCopy{n1: takeCopy(t, n1), n2: takeCopy(t, n2), n3: takeCopy(t, n3)}
	if rep, err := applyTopo(ctx, two, three); err != nil || rep.OrdersMoved != 1 || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply two = %+v, %v", rep, err)
	}
	c2 := takeCopy(t, n2)
	for c, cp := range all1 {
		cp.restore(t, c)
	}
	if out, err := openInv(t, three, Options{}).Cancel(ctx, id); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel at epoch 1 = %+v, %v", out, err)
	}
	if rep, err := applyTopo(ctx, twoB, three); err != nil || rep.OrdersMoved != 1 || rep.Phase != topology.PhaseStable || rep.ToEpoch != 2 {
		t.Fatalf("apply twoB = %+v, %v", rep, err)
	}
	c2.restore(t, n2)
	if !acceptNode(t, ctx, twoB, n2, "n2") {
		t.Fatal("n2, accepted at its peers' epoch but another topology's token, was not fenced")
	}
	rep, err := applyTopo(ctx, twoB, three)
	if err != nil || len(rep.Forward) != 1 || rep.Reinstalled != 1 {
		t.Fatalf("apply twoB after n2 went back = %+v, %v; want n2 brought forward, st3 put back", rep, err)
	}
	if out, err := openInv(t, twoB, Options{}).Confirm(ctx, id); err == nil && out.Status == StatusConfirmed {
		t.Errorf("order %s, cancelled (acknowledged), confirmed: %+v", id, out)
	}
}
