package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A failure to reach or talk to a node is told from what the node
// answered: an operator's call that meets it (Accept, a drain) wraps it
// in ErrUnreachable, which the service answers unavailable, as for a DOWN
// node. Before, Accept and PersistRouteEnabled returned the raw dial or
// i/o error, and the service answered it internal, the code of corrupt
// data and failed scripts.
func TestUnreachableWrapsTransportErrorsOnly(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("read: %w", io.EOF), true},
		{io.ErrUnexpectedEOF, true},
		{syscall.ECONNRESET, true},
		{os.ErrDeadlineExceeded, true}, // a net.Error timeout
		{redis.Nil, false},
		{errors.New("unexpected reply [1]"), false},
		{&Error{Node: "n1", Addr: "a", Err: ErrDown}, false},
		{context.Canceled, false},
	} {
		err := unreachable(context.Background(), c.err)
		if got := errors.Is(err, ErrUnreachable); got != c.want {
			t.Errorf("unreachable(%v) = %v: wraps ErrUnreachable %v, want %v", c.err, err, got, c.want)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("unreachable(%v) = %v: lost the cause", c.err, err)
		}
		if IsTransport(c.err) != c.want {
			t.Errorf("IsTransport(%v) = %v, want %v", c.err, !c.want, c.want)
		}
	}
	if err := unreachable(context.Background(), unreachable(context.Background(), refused)); err.Error() != unreachable(context.Background(), refused).Error() {
		t.Errorf("wrapped twice: %v", err)
	}
}
