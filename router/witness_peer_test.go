package router_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/node"
)

// A peer that missed a mark (its write timed out while another peer took
// it) gets that mark at a later heartbeat even when the node is idle and
// its mark does not move again. Before, the writer kept one "last written"
// mark per node, set by the first peer that held it, so the peer that
// missed it held an older mark for as long as the node stayed idle: a
// node losing those writes while the other peer was away went unrefused.
func TestWitnessMarkReachesThePeerThatMissedIt(t *testing.T) {
	r, srvs := reviewRouter(t, "fail", "order")
	for _, n := range []string{"n1", "n2", "n3"} {
		waitState(t, r, n, node.StateUp, 5*time.Second)
	}
	ctx := context.Background()
	n1, err := r.Node("n1")
	if err != nil {
		t.Fatal(err)
	}
	c1, c2, c3 := srvs[0].Client(t), srvs[1].Client(t), srvs[2].Client(t)
	// advance moves n1's acknowledged write sequence to seq, as an
	// inventory write script and its acknowledgement would.
	advance := func(seq int64) {
		if err := c1.HSet(ctx, node.StampKey, "seq", seq).Err(); err != nil {
			t.Fatal(err)
		}
		n1.ObserveSeq(seq)
	}
	wait := func(what string, limit time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, limit)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	held := func(i int, seq string) bool {
		cl := c2
		if i == 3 {
			cl = c3
		}
		v, _ := cl.HGet(ctx, node.WitnessKey, "n1").Result()
		return strings.HasSuffix(v, ":"+seq)
	}
	advance(1000)
	wait("n2 and n3 hold n1's mark at 1000", 5*time.Second, func() bool { return held(2, "1000") && held(3, "1000") })

	// n3 takes no writes for 1.5 s, longer than the 1 s budget of a mark's write.
	if err := c3.Do(ctx, "CLIENT", "PAUSE", "1500", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	advance(2000)
	wait("n2 holds n1's mark at 2000", 5*time.Second, func() bool { return held(2, "2000") })
	wait("n3 holds n1's mark at 2000 once it takes writes again (n1 idle since)", 6*time.Second,
		func() bool { return held(3, "2000") })
}
