package inventory

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/shardis/shardis/node"
)

// replyErr is an error reply from Redis, as go-redis reports one.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

func TestUnsettleable(t *testing.T) {
	n, err := node.New(node.Options{Name: "n1", Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("%w: node n1: inv:stock:r:x reserved holds x", ErrCorrupt), true},
		{nodeErr(n, replyErr("SHARDIS_CORRUPT inv:stock:r:x reserved is 0, part p holds 1")), true},
		{nodeErr(n, replyErr("SHARDIS_NOSTOCK stock hash inv:stock:r:x is missing (deleted?) while part p holds 1 of it")), true},
		{nodeErr(n, replyErr("WRONGTYPE Operation against a key holding the wrong kind of value")), true},
		{nodeErr(n, replyErr("ERR user_script:12: attempt to compare nil with number")), true},
		{nodeErr(n, replyErr("ERR Error running script (call to f_x): @user_script:1: oops")), true},
		{nodeErr(n, replyErr("SHARDIS_BADOP frobnicate")), true},
		{nodeErr(n, replyErr("LOADING Redis is loading the dataset in memory")), false},
		{nodeErr(n, replyErr("BUSY Redis is busy running a script")), false},
		{nodeErr(n, replyErr("OOM command not allowed when used memory > 'maxmemory'")), false},
		{nodeErr(n, replyErr("ERR max number of clients reached")), false},
		{nodeErr(n, replyErr("SHARDIS_IDENTITY node stamp is n2, expected n1")), false},
		{nodeErr(n, replyErr("SHARDIS_EPOCH node epoch 3, caller 2")), false},
		{nodeErr(n, context.DeadlineExceeded), false},
		{nodeErr(n, errors.New("dial tcp: connection refused")), false},
	} {
		if got := Unsettleable(c.err); got != c.want {
			t.Errorf("Unsettleable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
