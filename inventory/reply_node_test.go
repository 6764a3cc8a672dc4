package inventory

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestScriptFailureTyped: against a real node, a script that fails at run
// time (a Lua error, as Redis 7.0 words it) and one that refuses an
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
	for what, err := range map[string]error{"Lua runtime error": nodeErr(n, raw), "SHARDIS_BADOP": err} {
		if !errors.Is(err, ErrScriptFailed) || !Unsettleable(err) || errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v; want ErrScriptFailed (Unsettleable), not ErrUnavailable", what, err)
		}
		if !strings.Contains(err.Error(), "node n1") {
			t.Errorf("%s: %v does not name the node", what, err)
		}
	}
}

// TestStuckPartsUnreadableRecord: a set-aside part whose record holds a
// quantity that is not an integer is a malformed-reply error naming the
// node, the record and the field, not a part of 0 units.
func TestStuckPartsUnreadableRecord(t *testing.T) {
	e := newStagedEnv(t)
	c := e.clients["n1"]
	id := "o1|t1|0"
	if err := c.ZAdd(e.ctx, keyStuck, redis.Z{Score: 1, Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
	c.HSet(e.ctx, keyStuckWhy, id, "why")
	c.HSet(e.ctx, partKey(id), "state", "pending", "order", "o1", "sku", "s", "qty", "many")
	got, err := e.inv.StuckParts(e.ctx, "n1", 10)
	var re *ReplyError
	if !errors.As(err, &re) || re.Node != "n1" || re.At != "reply[3]" || !strings.Contains(re.Script, partKey(id)) {
		t.Fatalf("StuckParts = %+v, %v; want a *ReplyError of n1 at reply[3] naming %s", got, err, partKey(id))
	}
	c.HSet(e.ctx, partKey(id), "qty", "3")
	got, err = e.inv.StuckParts(e.ctx, "n1", 10)
	if err != nil || len(got) != 1 || got[0].Quantity != 3 || got[0].OrderID != "o1" || got[0].State != PartPending {
		t.Fatalf("StuckParts after the repair = %+v, %v; want o1's part of 3 units", got, err)
	}
}
