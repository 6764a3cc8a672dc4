package drill

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// flakyInventory reserves every other order and fails every other
// Confirm and Cancel, as calls to a killed node do; it mints ids.
type flakyInventory struct {
	shardisv1connect.InventoryServiceClient
	mu       sync.Mutex
	calls    int
	reserves int
	minted   int
}

func (f *flakyInventory) fail(n *int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	*n++
	return *n%2 == 0
}

func (f *flakyInventory) NewOrderId(context.Context, *connect.Request[v1.NewOrderIdRequest]) (*connect.Response[v1.NewOrderIdResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.minted++
	return connect.NewResponse(&v1.NewOrderIdResponse{OrderId: "minted-" + strconv.Itoa(f.minted)}), nil
}

func (f *flakyInventory) Reserve(context.Context, *connect.Request[v1.ReserveRequest]) (*connect.Response[v1.ReserveResponse], error) {
	if f.fail(&f.reserves) {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("node n1 is down"))
	}
	return connect.NewResponse(&v1.ReserveResponse{}), nil
}

func (f *flakyInventory) Confirm(context.Context, *connect.Request[v1.ConfirmRequest]) (*connect.Response[v1.ConfirmResponse], error) {
	if f.fail(&f.calls) {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("node n1 is down"))
	}
	return connect.NewResponse(&v1.ConfirmResponse{}), nil
}

func (f *flakyInventory) Cancel(context.Context, *connect.Request[v1.CancelRequest]) (*connect.Response[v1.CancelResponse], error) {
	if f.fail(&f.calls) {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("node n1 is down"))
	}
	return connect.NewResponse(&v1.CancelResponse{}), nil
}

// TestOrdersAddUp: every order is counted once, ok or failed (minted ids
// apart too), and every ok order once more by how it ended: confirmed,
// cancelled, left, or unknown when its Confirm or Cancel failed; the
// report finds the accounting adds up.
func TestOrdersAddUp(t *testing.T) {
	out := newOutcomes(true)
	inv := &flakyInventory{}
	rng := rand.New(rand.NewPCG(1, 2))
	l := Load{TTL: time.Second, Minted: true}
	for i := range 200 {
		order(context.Background(), inv, "o"+strconv.Itoa(i), rng, l, out)
	}
	ok, failed := out.ok[Before], out.failed[Before]
	if ok != 100 || failed != 100 || out.codes["unavailable"] != 100 {
		t.Fatalf("ok %d, failed %d (codes %v): want 100 each, all unavailable", ok, failed, out.codes)
	}
	if out.okMinted+out.failedMinted != int64(inv.minted) || inv.minted == 0 || inv.minted == 200 {
		t.Fatalf("minted ok %d + failed %d, ids minted %d: want them equal, some ids minted and some not", out.okMinted, out.failedMinted, inv.minted)
	}
	if len(out.acks) != 100 || out.unknown == 0 || out.left == 0 || len(out.confirmed) == 0 || len(out.cancelled) == 0 {
		t.Fatalf("acknowledged %d, unknown %d, left %d, confirmed %d, cancelled %d: want 100 acknowledged and each ending seen",
			len(out.acks), out.unknown, out.left, len(out.confirmed), len(out.cancelled))
	}
	if p := out.Report(); len(p) != 0 {
		t.Fatalf("report problems %q, want none", p)
	}
}

// TestReportAccounting: the report's problems are an accounting of the ok
// orders that does not add up, and no order acknowledged in the last
// phase the drill reached.
func TestReportAccounting(t *testing.T) {
	o := newOutcomes(false)
	o.ok = [phases]int64{2, 1, 1}
	o.confirmed["x"], o.cancelled["y"] = true, true
	o.left, o.unknown = 1, 1
	o.SetPhase(After)
	if p := o.Report(); len(p) != 0 {
		t.Fatalf("2+1+1 ok = 1 confirmed + 1 cancelled + 1 left + 1 unknown, one ok after recovery: got problems %q", p)
	}
	o.left = 0
	if p := o.Report(); len(p) != 1 || !strings.Contains(p[0], "add up to 3, not 4") {
		t.Fatalf("one ok order unaccounted for: got problems %q", p)
	}
	o.left = 1
	o.SetPhase(Rejoined) // no order after the old master rejoined
	if p := o.Report(); len(p) != 1 || !strings.Contains(p[0], "after the old master rejoined") {
		t.Fatalf("no order acknowledged in the last phase: got problems %q", p)
	}
}
