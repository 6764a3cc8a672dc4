package rollback

import (
	"errors"
	"testing"

	"github.com/shardis/shardis/inventory"
)

// TestLeaseReplyStrict: the lease scripts' replies are the integer 0 or 1;
// anything else is a malformed-reply error naming the node and the
// script, never a lease taken or held (takeScript's reply was read with
// Int64 and compared to 1).
func TestLeaseReplyStrict(t *testing.T) {
	for _, v := range []any{int64(0), int64(1)} {
		if got, err := leaseReply("n1", "lease-take", v); err != nil || got != (v == int64(1)) {
			t.Errorf("leaseReply(%v) = %v, %v", v, got, err)
		}
	}
	for _, v := range []any{int64(2), "1", nil, []any{int64(1)}} {
		got, err := leaseReply("n1", "lease-take", v)
		var re *inventory.ReplyError
		if got || !errors.As(err, &re) || !errors.Is(err, inventory.ErrMalformedReply) || re.Node != "n1" || re.Script != "lease-take" {
			t.Errorf("leaseReply(%#v) = %v, %v; want a ReplyError of n1's lease-take", v, got, err)
		}
	}
}
