package inventory

import (
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/node"
)

// The tie rule (same version: the higher limit) is in load.lua and
// limit_sync.lua, but not in limit_todo.lua, which keeps the first change
// recorded at a version (cv >= nv: return 0). Two changes of one version
// both miss n2 and are recorded on n1: the lower (3, V) first, then the
// higher (5, V), which n1 applied (load.lua) but whose todo is dropped.
// ConvergeLimits sends (3, V) to n2, n2 takes it, and the todo is done:
// n1 holds 5, n2 holds 3, nothing left to converge them.
// Two limit changes of one version, both missing n2, are recorded as
// pending on n1: the record keeps the higher limit (limit_todo.lua, as
// load.lua and limit_sync.lua settle a tie), so ConvergeLimits brings n2
// to what n1 holds. Before, it kept the first recorded, the lower, and the
// nodes ended split for good (found by a review).
func TestLimitTieTodoKeepsTheHigher(t *testing.T) {
	e := newStagedEnvConfig(t, Options{}, func(c *config.Config) {
		c.Servers["inventory"].Routes["d"] = []string{"n1", "n2"}
	})
	if _, err := e.inv.LoadStock(e.ctx, "d", "t", 20, 0); err != nil {
		t.Fatal(err)
	}
	n1, _ := e.r.Node("n1")
	key := stockKey("d", "t")
	ver := time.Now().UnixMilli() + 1
	// I1's change (3, V) reaches n1, its call to n2 failed: recorded on n1
	if _, err := e.inv.run(e.ctx, n1, loadScript, []string{key}, int64(0), int64(3), ver); err != nil {
		t.Fatal(err)
	}
	e.inv.recordLimitTodo(e.ctx, []*node.Node{n1}, "d", "t", 3, ver)
	// I2's change (5, V) the same
	if _, err := e.inv.run(e.ctx, n1, loadScript, []string{key}, int64(0), int64(5), ver); err != nil {
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
