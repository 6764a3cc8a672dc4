package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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
	keys  map[string]string
	ttls  map[string]time.Duration
	stamp map[string]string // the stamp's topology fields
}

// stampTopoFields are the stamp's fields a topology write sets.
var stampTopoFields = []string{"epoch", "attempt"}

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
	nc.stamp = map[string]string{}
	for _, f := range stampTopoFields {
		nc.stamp[f] = c.HGet(ctx, node.StampKey, f).Val()
	}
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
	for f, v := range nc.stamp {
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
	t.Parallel()
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
	t.Parallel() // its own nodes
	e, three, two, _ := retireWorld(t)
	ctx, n2 := e.ctx, e.clients["n2"]
	id := movedN3ToN2(t, three, two)
	earlierAttemptOnN2(t, e, three, two, two, id, false)
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

// earlierAttemptOnN2 runs, in retireWorld's e, the first apply of two
// from three with order id reserved (moved off n3 onto n2), every node's
// going back to its copy from before it, id's Cancel at epoch 1 and the
// apply of second (two again: the same token, another attempt; or
// another topology at the same epoch); then n2 goes back to its copy
// from the first apply, holding id reserved (without its apply attempt
// when strip: a release before's copy).
func earlierAttemptOnN2(t *testing.T, e *stagedEnv, three, two, second *config.Config, id string, strip bool) {
	t.Helper()
	ctx := e.ctx
	n1, n2, n3 := e.clients["n1"], e.clients["n2"], e.clients["n3"]
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
	if rep, err := applyTopo(ctx, second, three); err != nil || rep.OrdersMoved != 1 || rep.Phase != topology.PhaseStable || rep.ToEpoch != 2 {
		t.Fatalf("second apply = %+v, %v", rep, err)
	}
	a1n2.restore(t, n2)
	if strip {
		n2.HDel(ctx, node.StampKey, "attempt")
		n2.HDel(ctx, node.TopologyKey, "attempt")
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
	t.Parallel() // its own nodes
	e, three, two, _ := retireWorld(t)
	ctx, n2 := e.ctx, e.clients["n2"]
	addrs := map[string]string{"n1": e.srvs[0].Addr(), "n2": e.srvs[1].Addr(), "n3": e.srvs[2].Addr()}
	twoB := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n1"}})
	id := movedN3ToN2(t, three, twoB)
	if id != movedN3ToN2(t, three, two) {
		t.Fatal("the two topologies home the order apart")
	}
	earlierAttemptOnN2(t, e, three, two, twoB, id, false)
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

// attemptsWorld applies three from two twice over nodes that all went
// back below its epoch in between (attempts A1, then A2 at the same
// token), reserving x (homed on n2 at two, n3 at three) before the first;
// n1's copy taken after A1 is returned. Orders x and y are ids homed on
// n3 at three and n2 at two.
func attemptsWorld(t *testing.T) (srvs []*redistest.Server, ctx context.Context, two, three *config.Config, x, y string, a1n1 nodeCopy) {
	srvs = redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	n1, n2, n3 := srvs[0].Client(t), srvs[1].Client(t), srvs[2].Client(t)
	addrs := map[string]string{"n1": srvs[0].Addr(), "n2": srvs[1].Addr(), "n3": srvs[2].Addr()}
	two = leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}})
	three = leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}})
	h2, _ := NewHomes(two)
	h3, _ := NewHomes(three)
	for i := 0; i < 1000 && (x == "" || y == ""); i++ {
		id := fmt.Sprintf("o%d", i)
		if h3.Home(id) != "n3" || h2.Home(id) != "n2" {
			continue
		}
		if x == "" {
			x = id
		} else {
			y = id
		}
	}
	inv2 := openInv(t, two, Options{})
	if _, err := inv2.LoadStock(ctx, "b", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv2.Reserve(ctx, x, []Item{{Route: "b", SKU: "s", Quantity: 2}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	inv2.Close()
	all1 := map[*redis.Client]nodeCopy{n1: takeCopy(t, n1), n2: takeCopy(t, n2), n3: takeCopy(t, n3)}
	if _, err := applyTopo(ctx, three, two); err != nil { // A1
		t.Fatal(err)
	}
	a1n1 = takeCopy(t, n1)
	for c, cp := range all1 {
		cp.restore(t, c)
	}
	time.Sleep(5 * time.Millisecond)                      // A2's writes are later than A1's by the nodes' clocks
	if _, err := applyTopo(ctx, three, two); err != nil { // A2
		t.Fatal(err)
	}
	return srvs, ctx, two, three, x, y, a1n1
}

// n1 goes back to a copy of the first attempt A1 while n3 holds the
// second's, A2, and lost nothing; n3 is accepted first, compared with n1
// before n1 is. Nothing tells the accept which copy of the epoch is
// current, so it fences n3 too (it fails closed), and the apply, which
// takes n2's unfenced A2 as current, brings n3 forward with nothing
// retired and n1 with its stale records retired and put back. A review
// found the first rule (any difference) fencing n3 and its forward
// retiring order y's live record and putting x's older copy back over
// its acknowledged Cancel; the second (ordered by the nodes' clocks)
// failed with a clock running fast.
func TestAcceptFenceOfANodeThatLostNothingRetiresNothing(t *testing.T) {
	t.Parallel() // its own nodes
	srvs, ctx, two, three, x, y, a1n1 := attemptsWorld(t)
	n1, n3 := srvs[0].Client(t), srvs[2].Client(t)
	inv3 := openInv(t, three, Options{})
	if out, err := inv3.Cancel(ctx, x); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel %s = %+v, %v", x, out, err)
	}
	if _, err := inv3.Reserve(ctx, y, []Item{{Route: "b", SKU: "s", Quantity: 3}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	inv3.Close()
	a1n1.restore(t, n1)
	if !acceptNode(t, ctx, three, n3, "n3") || !acceptNode(t, ctx, three, n1, "n1") {
		t.Fatal("n3 and n1, each accepted while the other's copy of the epoch differs, were not both fenced")
	}
	rep, err := applyTopo(ctx, three, two)
	if err != nil || len(rep.Forward) != 2 {
		t.Fatalf("apply = %+v, %v; want n1 and n3 brought forward", rep, err)
	}
	inv := openInv(t, three, Options{})
	if out, err := inv.Confirm(ctx, y); err != nil || out.Status != StatusConfirmed {
		t.Errorf("Confirm %s, reserved and untouched by the loss = %+v, %v", y, out, err)
	}
	if out, err := inv.Confirm(ctx, x); err == nil && out.Status == StatusConfirmed {
		t.Errorf("order %s, cancelled (acknowledged), confirmed: %+v", x, out)
	}
}

// Every node accepted while n1 holds a copy of the first attempt, one by
// one in any order or all at once: each is fenced (a fenced peer counts
// by the copy under its fence, and the copies differ), nothing is served,
// and the apply refuses to guess which copy is current (ErrInvalid, naming
// both). Once the operator unfences a node holding the current one by
// hand, the apply brings the others forward. Before, the accepts' order
// decided which node was served, and accepts at once fenced every node
// for good.
func TestAcceptFenceFailsClosedInAnyOrder(t *testing.T) {
	check := func(t *testing.T, srvs []*redistest.Server, ctx context.Context, two, three *config.Config) {
		t.Helper()
		for i, s := range srvs {
			if tok := s.Client(t).HGet(ctx, node.StampKey, "epoch").Val(); !strings.HasPrefix(tok, node.FencePrefix) {
				t.Errorf("n%d not fenced: %s", i+1, tok)
			}
		}
		if st := openInv(t, three, Options{}).TopologyStatus(ctx); st.Ready {
			t.Errorf("an instance is ready with every node fenced: %+v", st)
		}
		if rep, err := applyTopo(ctx, three, two); !errors.Is(err, topology.ErrInvalid) || !strings.Contains(err.Error(), "two topologies of epoch 2") {
			t.Fatalf("apply with every node fenced, two copies of epoch 2 = %+v, %v; want ErrInvalid", rep, err)
		}
		n2 := srvs[1].Client(t)
		tok := strings.TrimPrefix(n2.HGet(ctx, node.StampKey, "epoch").Val(), node.FencePrefix)
		if err := n2.HSet(ctx, node.StampKey, "epoch", tok).Err(); err != nil { // the operator's choice
			t.Fatal(err)
		}
		if rep, err := applyTopo(ctx, three, two); err != nil || len(rep.Forward) != 2 {
			t.Fatalf("apply once n2 is unfenced = %+v, %v; want n1 and n3 brought forward", rep, err)
		}
		// ready within 5 s: a fresh instance's first read has a second,
		// which a loaded machine can pass
		after := openInv(t, three, Options{})
		st := after.TopologyStatus(ctx)
		for end := time.Now().Add(5 * time.Second); !st.Ready && time.Now().Before(end); st = after.TopologyStatus(ctx) {
			time.Sleep(50 * time.Millisecond)
		}
		if !st.Ready {
			t.Errorf("after the apply: %+v", st)
		}
	}
	t.Run("one by one", func(t *testing.T) {
		srvs, ctx, two, three, _, _, a1n1 := attemptsWorld(t)
		a1n1.restore(t, srvs[0].Client(t))
		for _, name := range []string{"n2", "n3", "n1"} {
			acceptNode(t, ctx, three, srvs[name[1]-'1'].Client(t), name)
		}
		check(t, srvs, ctx, two, three)
	})
	t.Run("at once", func(t *testing.T) {
		srvs, ctx, two, three, _, _, a1n1 := attemptsWorld(t)
		a1n1.restore(t, srvs[0].Client(t))
		r := openInv(t, three, Options{}).r
		var wg sync.WaitGroup
		for _, name := range []string{"n1", "n2", "n3"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := r.AcceptNode(ctx, name); err != nil {
					t.Errorf("accept %s: %v", name, err)
				}
			}()
		}
		wg.Wait()
		check(t, srvs, ctx, two, three)
	})
}

// A peer that cannot be read while a node is accepted: the accept cannot
// tell whether the node is behind it, so it fences the node. Before, the
// peer was passed over, n2 (a copy of the first attempt) was served, and
// the apply found every node at the token.
func TestAcceptFencesWhenAPeerCannotBeRead(t *testing.T) {
	t.Parallel()
	srvs, ctx, _, three, _, _, _ := attemptsWorld(t)
	n2 := srvs[1].Client(t)
	r := openInv(t, three, Options{}).r
	srvs[0].Pause()
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := r.AcceptNode(actx, "n2")
	cancel()
	srvs[0].Resume()
	if err != nil {
		t.Fatalf("accept n2 with n1 unreadable: %v", err)
	}
	if tok := n2.HGet(ctx, node.StampKey, "epoch").Val(); !strings.HasPrefix(tok, node.FencePrefix) {
		t.Errorf("n2, accepted with a peer unreadable, not fenced: %s", tok)
	}
}

// A node fenced at the apply's own token and attempt (an accept that
// failed closed) holds what the apply wrote:
// the forward unfences it and retires nothing there. Before, a fenced
// node was behind whatever it held, and the forward retired the live
// records its previous topology homed elsewhere.
func TestForwardOfAFenceAtTheTokenRetiresNothing(t *testing.T) {
	srvs, ctx, two, three, _, y, _ := attemptsWorld(t)
	n3 := srvs[2].Client(t)
	inv3 := openInv(t, three, Options{})
	if _, err := inv3.Reserve(ctx, y, []Item{{Route: "b", SKU: "s", Quantity: 3}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	inv3.Close()
	tok := n3.HGet(ctx, node.StampKey, "epoch").Val()
	if err := n3.HSet(ctx, node.StampKey, "epoch", node.FencePrefix+tok).Err(); err != nil {
		t.Fatal(err)
	}
	rep, err := applyTopo(ctx, three, two)
	if err != nil || len(rep.Forward) != 1 || rep.Retired != 0 || rep.Reinstalled != 0 {
		t.Fatalf("apply = %+v, %v; want n3 brought forward, nothing retired or put back", rep, err)
	}
	if out, err := openInv(t, three, Options{}).Confirm(ctx, y); err != nil || out.Status != StatusConfirmed {
		t.Errorf("Confirm %s = %+v, %v", y, out, err)
	}
}

// weighted is the three-route topology of leaveConfig with node weights w.
func weighted(t *testing.T, addrs map[string]string, w map[string]int) *config.Config {
	t.Helper()
	cfg := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}})
	for n, v := range w {
		nd := cfg.Nodes[n]
		nd.Weight = v
		cfg.Nodes[n] = nd
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// An apply's bump stops after n1 (epoch 3; n2 and n3 still at 2), and n1,
// which lost nothing, is accepted while n2 is unreadable: fenced, ahead of
// every other node. The apply takes n1's copy as current and resumes to
// it, retiring nothing on n1. Before, the highest unfenced epoch (2) was
// current: the resume was refused, `topology show` advised the apply of
// epoch 2, and that apply "brought n1 forward" backwards, retiring order
// w's live record (acknowledged, its units stranded) and putting back z's
// older copy over its acknowledged Cancel. Found by a review.
func TestApplyResumesToAFencedNodeAhead(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n1 := srvs[0].Client(t)
	addrs := map[string]string{"n1": srvs[0].Addr(), "n2": srvs[1].Addr(), "n3": srvs[2].Addr()}
	p, q, r := weighted(t, addrs, nil), weighted(t, addrs, map[string]int{"n1": 4}), weighted(t, addrs, map[string]int{"n1": 4, "n2": 3})
	hp, _ := NewHomes(p)
	hq, _ := NewHomes(q)
	var ids []string
	for i := 0; i < 2000 && len(ids) < 2; i++ {
		if id := fmt.Sprintf("q%d", i); hp.Home(id) != "n1" && hq.Home(id) == "n1" {
			ids = append(ids, id)
		}
	}
	z, w := ids[0], ids[1]
	invP := openInv(t, p, Options{})
	if _, err := invP.LoadStock(ctx, "a", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := invP.Reserve(ctx, z, []Item{{Route: "a", SKU: "s", Quantity: 2}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	invP.Close()
	if rep, err := applyTopo(ctx, q, p); err != nil || rep.OrdersMoved < 1 {
		t.Fatalf("apply q = %+v, %v", rep, err)
	}
	invQ := openInv(t, q, Options{})
	if out, err := invQ.Cancel(ctx, z); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel %s = %+v, %v", z, out, err)
	}
	if _, err := invQ.Reserve(ctx, w, []Item{{Route: "a", SKU: "s", Quantity: 3}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	invQ.Close()
	if _, err := ApplyTopology(ctx, ApplyOptions{To: r, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler), Faults: &topoFaults{point: "bump", nth: 1}}); !errors.Is(err, ErrCrashed) {
		t.Fatalf("apply r, crashed after its first bump: %v", err)
	}
	router := openInv(t, r, Options{}).r
	srvs[1].Pause()
	actx, acancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := router.AcceptNode(actx, "n1")
	acancel()
	srvs[1].Resume()
	if err != nil {
		t.Fatal(err)
	}
	if tok := n1.HGet(ctx, node.StampKey, "epoch").Val(); !strings.HasPrefix(tok, node.FencePrefix) {
		t.Fatalf("n1, accepted with n2 unreadable, not fenced: %s", tok)
	}
	rep, err := applyTopo(ctx, r, q)
	if err != nil || rep.Phase != topology.PhaseStable || rep.Retired != 0 {
		t.Fatalf("resuming the apply of r = %+v, %v; want stable, nothing retired", rep, err)
	}
	inv := openInv(t, r, Options{})
	if out, err := inv.Confirm(ctx, w); err != nil || out.Status != StatusConfirmed {
		t.Errorf("Confirm %s (reserved, acknowledged) = %+v, %v", w, out, err)
	}
	if out, err := inv.Confirm(ctx, z); err == nil && out.Status == StatusConfirmed {
		t.Errorf("order %s, cancelled (acknowledged), confirmed: %+v", z, out)
	}
}

// acceptWithPaused accepts node name through inv's router while paused
// does not answer.
func acceptWithPaused(t *testing.T, ctx context.Context, inv *Inventory, name string, paused *redistest.Server) {
	t.Helper()
	paused.Pause()
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := inv.r.AcceptNode(actx, name)
	cancel()
	paused.Resume()
	if err != nil {
		t.Fatalf("accept %s: %v", name, err)
	}
}

// Fenced nodes whose copy cannot be told apart are left to the operator,
// never retired by a guess (each found by a review): a fenced node whose
// topology record is lost (before: read as a node behind, its live
// records retired; or its bump expected no token and the resume was
// stuck; or an instance copied a fenced peer's record onto it, fence
// and all); every node fenced, one copy without an apply attempt
// (before: taken as current, the other copy's live records retired); and
// a copy of a release before, without an attempt, at its peers' token
// (before: not fenced at all).
func TestFencedCopiesThatCannotBeToldAreLeftToTheOperator(t *testing.T) {
	t.Parallel()
	t.Run("record lost", func(t *testing.T) {
		srvs, ctx, two, three, _, y, _ := attemptsWorld(t)
		n3 := srvs[2].Client(t)
		inv3 := openInv(t, three, Options{})
		if _, err := inv3.Reserve(ctx, y, []Item{{Route: "b", SKU: "s", Quantity: 3}}, "", time.Hour); err != nil {
			t.Fatal(err)
		}
		inv3.Close()
		acceptWithPaused(t, ctx, openInv(t, three, Options{}), "n3", srvs[0])
		if tok := n3.HGet(ctx, node.StampKey, "epoch").Val(); !strings.HasPrefix(tok, node.FencePrefix) {
			t.Fatalf("n3 not fenced: %s", tok)
		}
		saved := n3.HGetAll(ctx, node.TopologyKey).Val()
		n3.Del(ctx, node.TopologyKey)
		_ = openInv(t, three, Options{}).TopologyStatus(ctx) // an instance's repair must not copy a record onto it
		if rep, err := applyTopo(ctx, three, two); !errors.Is(err, topology.ErrInvalid) || rep.Retired != 0 {
			t.Fatalf("apply with n3's record lost = %+v, %v; want topology.ErrInvalid (refused before any write), nothing retired", rep, err)
		}
		if err := n3.HSet(ctx, node.TopologyKey, saved).Err(); err != nil { // the operator restores it
			t.Fatal(err)
		}
		if rep, err := applyTopo(ctx, three, two); err != nil || rep.Retired != 0 {
			t.Fatalf("apply after the record is restored = %+v, %v", rep, err)
		}
		if out, err := openInv(t, three, Options{}).Confirm(ctx, y); err != nil || out.Status != StatusConfirmed {
			t.Errorf("Confirm %s (reserved, acknowledged) = %+v, %v", y, out, err)
		}
	})
	t.Run("a copy without an attempt", func(t *testing.T) {
		srvs, ctx, two, three, _, y, _ := attemptsWorld(t)
		inv3 := openInv(t, three, Options{})
		if _, err := inv3.Reserve(ctx, y, []Item{{Route: "b", SKU: "s", Quantity: 3}}, "", time.Hour); err != nil {
			t.Fatal(err)
		}
		inv3.Close()
		n1 := srvs[0].Client(t)
		n1.HDel(ctx, node.StampKey, "attempt")
		n1.HDel(ctx, node.TopologyKey, "attempt")
		inv := openInv(t, three, Options{})
		acceptWithPaused(t, ctx, inv, "n1", srvs[1])
		acceptWithPaused(t, ctx, inv, "n2", srvs[2])
		acceptWithPaused(t, ctx, inv, "n3", srvs[0])
		if rep, err := applyTopo(ctx, three, two); !errors.Is(err, topology.ErrInvalid) || rep.Retired != 0 {
			t.Fatalf("apply, every node fenced, one copy without an attempt = %+v, %v; want ErrInvalid, nothing retired", rep, err)
		}
	})
	t.Run("a release before's copy", func(t *testing.T) {
		e, three, two, _ := retireWorld(t)
		ctx, n2 := e.ctx, e.clients["n2"]
		id := movedN3ToN2(t, three, two)
		earlierAttemptOnN2(t, e, three, two, two, id, true)
		if !acceptNode(t, ctx, two, n2, "n2") {
			t.Error("n2, a copy without an attempt at its peers' token, was not fenced")
		}
		if out, err := openInv(t, two, Options{}).Confirm(ctx, id); err == nil && out.Status == StatusConfirmed {
			t.Errorf("order %s, cancelled (acknowledged), confirmed: %+v", id, out)
		}
	})
}
