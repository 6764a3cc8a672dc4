package inventory

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestScriptFailureTyped: against a real node, a script that fails at run
// time (a Lua error, as Redis 7.0 words it; a redis.call refused by its
// own checks, from a script or a function) and one that refuses an
// operation it does not know (SHARDIS_BADOP) reach the caller as
// ErrScriptFailed, which the reconciler's Unsettleable reads without
// looking at any message; neither reads as unavailable.
func TestScriptFailureTyped(t *testing.T) {
	e := newStagedEnv(t)
	n, err := e.r.Node("n1")
	if err != nil {
		t.Fatal(err)
	}
	broken := redis.NewScript(`local x = nil; return x + 1`)
	raw := broken.Run(e.ctx, n.Client(), nil).Err()
	if raw == nil {
		t.Fatal("a script adding to nil succeeded")
	}
	_, err = e.inv.pendingAdjust(e.ctx, n, "frobnicate", "o|t|0")
	// errors of redis.call's own checks: Redis 7.0 words them without
	// "user_script" at the front ("ERR Lua redis lib command arguments
	// must be strings or integers script: …, on @user_script:1."), and a
	// function's as "…, on @user_function:2."
	badArgs := redis.NewScript(`return redis.call('GET', {})`).Run(e.ctx, n.Client(), nil).Err()
	unknown := redis.NewScript(`return redis.call('NO-SUCH-COMMAND')`).Run(e.ctx, n.Client(), nil).Err()
	lib := "#!lua name=shardis_test_broken\nredis.register_function('shardis_test_broken', function() return redis.call('GET', {}) end)"
	if err := n.Client().FunctionLoadReplace(e.ctx, lib).Err(); err != nil {
		t.Fatal(err)
	}
	defer n.Client().FunctionDelete(e.ctx, "shardis_test_broken")
	fnArgs := n.Client().FCall(e.ctx, "shardis_test_broken", nil).Err()
	for what, err := range map[string]error{"Lua runtime error": nodeErr(n, raw), "SHARDIS_BADOP": err,
		"bad redis.call arguments": nodeErr(n, badArgs), "unknown command": nodeErr(n, unknown),
		"bad redis.call arguments in a function": nodeErr(n, fnArgs)} {
		if !errors.Is(err, ErrScriptFailed) || !Unsettleable(err) || errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v; want ErrScriptFailed (Unsettleable), not ErrUnavailable", what, err)
		}
		if !strings.Contains(err.Error(), "node n1") {
			t.Errorf("%s: %v does not name the node", what, err)
		}
	}
}

// TestStuckPartsUnreadableRecord: a set-aside part whose record cannot
// be read (a hash-layout quantity that is not an integer; a packed record
// with more fields than the layout has) is listed with a Problem naming
// the node, the record and the field, not as a part of 0 units, and the
// other set-aside parts are listed all the same.
func TestStuckPartsUnreadableRecord(t *testing.T) {
	e := newStagedEnv(t)
	c := e.clients["n1"]
	bad, packed, good := "o1|t1|0", "o2|t2|0", "o3|t3|0"
	for i, id := range []string{bad, packed, good} {
		if err := c.ZAdd(e.ctx, keyStuck, redis.Z{Score: float64(i + 1), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
		c.HSet(e.ctx, keyStuckWhy, id, "why")
	}
	c.HSet(e.ctx, partKey(bad), "state", "pending", "order", "o1", "sku", "s", "qty", "many")
	c.Set(e.ctx, partKey(packed), strings.Repeat("\x1f", 40), 0)
	c.HSet(e.ctx, partKey(good), "state", "pending", "order", "o3", "sku", "s", "qty", "2")
	got, err := e.inv.StuckParts(e.ctx, "n1", 10)
	if err != nil || len(got) != 3 {
		t.Fatalf("StuckParts = %+v, %v; want 3 parts listed", got, err)
	}
	if p := got[0]; p.PartID != bad || p.OrderID != "o1" || p.Quantity != 0 ||
		!strings.Contains(p.Problem, "n1") || !strings.Contains(p.Problem, partKey(bad)) || !strings.Contains(p.Problem, "reply[3]") {
		t.Errorf("unreadable hash record listed as %+v; want a Problem naming n1, %s and reply[3]", p, partKey(bad))
	}
	if p := got[1]; p.PartID != packed || !strings.Contains(p.Problem, partKey(packed)) || !strings.Contains(p.Problem, "corrupt") {
		t.Errorf("corrupt packed record listed as %+v; want a Problem naming %s as corrupt", p, partKey(packed))
	}
	if p := got[2]; p.PartID != good || p.Problem != "" || p.Quantity != 2 || p.State != PartPending {
		t.Errorf("readable record listed as %+v; want o3's pending part of 2 units", p)
	}
	c.HSet(e.ctx, partKey(bad), "qty", "3")
	got, err = e.inv.StuckParts(e.ctx, "n1", 10)
	if err != nil || len(got) != 3 || got[0].Quantity != 3 || got[0].OrderID != "o1" || got[0].State != PartPending || got[0].Problem != "" {
		t.Fatalf("StuckParts after the repair = %+v, %v; want o1's part of 3 units", got, err)
	}
}

// TestScriptKilledIsNoScriptFailure: a script stopped by SCRIPT KILL
// (Redis 7.0's words, placed like a failing call's) could not be served
// this time: not ErrScriptFailed, whose retry meets it again.
func TestScriptKilledIsNoScriptFailure(t *testing.T) {
	for _, msg := range []string{
		"ERR Script killed by user with SCRIPT KILL... script: 653db1ceb7ef061910af88dc7ebf80737358169d, on @user_script:1.",
		"ERR Script killed by user with FUNCTION KILL... script: f, on @user_function:2.",
	} {
		if luaFailure(msg) {
			t.Errorf("luaFailure(%q) = true; want false", msg)
		}
	}
}
