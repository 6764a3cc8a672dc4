package service

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/inventory"
)

// The gRPC code of each inventory error class, as gRPC's rules have it:
// a bad argument is invalid_argument whatever the system's state; a
// route of the configuration not yet applied on the nodes is a state the
// call needs (failed_precondition), though it also wraps ErrInvalid.
func TestRPCErrorCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want connect.Code
	}{
		{fmt.Errorf("%w: route_key %q is not a route of server %q", inventory.ErrInvalid, "nope", "inventory"), connect.CodeInvalidArgument},
		{fmt.Errorf("%w: %w: route %q is not in the applied topology (epoch 3)", inventory.ErrInvalid, inventory.ErrNotApplied, "x"), connect.CodeFailedPrecondition},
		{fmt.Errorf("%w: sku s", inventory.ErrInsufficientStock), connect.CodeFailedPrecondition},
		{fmt.Errorf("%w: order o", inventory.ErrInProgress), connect.CodeAborted},
		{fmt.Errorf("%w: part p", inventory.ErrDataLoss), connect.CodeDataLoss},
	} {
		var ce *connect.Error
		if got := rpcError(c.err); !errors.As(got, &ce) || ce.Code() != c.want {
			t.Errorf("rpcError(%v) = %v, want code %v", c.err, got, c.want)
		}
	}
}
