package inventory

import (
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/node"
)

// Two limit changes of the same version (two instances in the same ms):
// load.lua settles a tie on the higher limit, so every node ends at the
// same one whatever order the calls arrive in, and ConvergeLimits
// (limit_sync.lua) follows the same rule. The higher change (5) fails on
// n2 mid-call, so it is recorded as pending on n1, which took it; the
// lower (3) reached both; ConvergeLimits then sends (5, V) to n2. Before,
// limit_sync.lua applied only a strictly newer version: n2 stayed at 3,
// n1 at 5, and the pending change was dropped as done (found by a
// review).
func TestLimitTieConverges(t *testing.T) {
	e := newLimitRouteEnv(t)
	n1, _ := e.r.Node("n1")
	key := stockKey("d", "t")
	ver := time.Now().UnixMilli() + 1
	// I1's change (3, V) reaches both nodes
	for _, n := range []string{"n1", "n2"} {
		nn, _ := e.r.Node(n)
		if _, err := e.inv.run(e.ctx, nn, loadScript, []string{key}, int64(0), int64(3), ver, farLoadDeadline()); err != nil {
			t.Fatal(err)
		}
	}
	// I2's change (5, V) reaches n1; its call to n2 failed: the change is
	// recorded on n1 (LoadStock's recordLimitTodo)
	if _, err := e.inv.run(e.ctx, n1, loadScript, []string{key}, int64(0), int64(5), ver, farLoadDeadline()); err != nil {
		t.Fatal(err)
	}
	e.inv.recordLimitTodo(e.ctx, []*node.Node{n1}, "d", "t", 5, ver)
	left, err := e.inv.ConvergeLimits(e.ctx, "n1")
	t.Logf("ConvergeLimits(n1): left %d, %v", left, err)
	l1 := e.clients["n1"].HGet(e.ctx, key, "limit").Val()
	l2 := e.clients["n2"].HGet(e.ctx, key, "limit").Val()
	if l1 != l2 {
		t.Errorf("after ConvergeLimits the route's nodes hold different limits: n1 %s, n2 %s", l1, l2)
	}
}

// Two limit changes of one version, both missing n2, are recorded as
// pending on n1: the record keeps the higher limit (limit_todo.lua, as
// load.lua and limit_sync.lua settle a tie), so ConvergeLimits brings n2
// to what n1 holds. Before, it kept the first recorded, the lower, and the
// nodes ended split for good (found by a review).
func TestLimitTieTodoKeepsTheHigher(t *testing.T) {
	e := newLimitRouteEnv(t)
	n1, _ := e.r.Node("n1")
	key := stockKey("d", "t")
	ver := time.Now().UnixMilli() + 1
	// I1's change (3, V) reaches n1, its call to n2 failed: recorded on n1
	if _, err := e.inv.run(e.ctx, n1, loadScript, []string{key}, int64(0), int64(3), ver, farLoadDeadline()); err != nil {
		t.Fatal(err)
	}
	e.inv.recordLimitTodo(e.ctx, []*node.Node{n1}, "d", "t", 3, ver)
	// I2's change (5, V) the same
	if _, err := e.inv.run(e.ctx, n1, loadScript, []string{key}, int64(0), int64(5), ver, farLoadDeadline()); err != nil {
		t.Fatal(err)
	}
	e.inv.recordLimitTodo(e.ctx, []*node.Node{n1}, "d", "t", 5, ver)
	t.Logf("todo on n1: %v", e.clients["n1"].HGetAll(e.ctx, keyLimitsTodo).Val())
	left, err := e.inv.ConvergeLimits(e.ctx, "n1")
	t.Logf("ConvergeLimits(n1): left %d, %v; todo now %v", left, err, e.clients["n1"].HGetAll(e.ctx, keyLimitsTodo).Val())
	l1 := e.clients["n1"].HGet(e.ctx, key, "limit").Val()
	l2 := e.clients["n2"].HGet(e.ctx, key, "limit").Val()
	if l1 != l2 {
		t.Errorf("after ConvergeLimits the route's nodes hold different limits: n1 %s, n2 %s", l1, l2)
	}
}

// newLimitRouteEnv is a staged env with route d on n1 and n2, 20 units of
// d/t loaded, for tests of limit changes across a route's nodes.
func newLimitRouteEnv(t *testing.T) *stagedEnv {
	e := newStagedEnvConfig(t, Options{}, func(c *config.Config) {
		c.Servers["inventory"].Routes["d"] = []string{"n1", "n2"}
	})
	if _, err := e.inv.LoadStock(e.ctx, "d", "t", 20, 0); err != nil {
		t.Fatal(err)
	}
	return e
}
