package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// A client's operations: Reserve with its retries, Confirm and Cancel with
// their loops, and what each answer says of the order.

// refused reports whether code is an answer that refuses the order for
// good: nothing of it was taken.
func refused(code string) bool { return code == "failed_precondition" || code == "invalid_argument" }

// reserve runs n concurrent Reserve calls of o and returns "ok" if one
// succeeded, "refused" if every one was refused, else "unknown".
func (cl *client) reserve(_ context.Context, o *order, op string, n int) string {
	req := &v1.ReserveRequest{OrderId: o.ID, UserId: o.User, TtlSeconds: o.TTL}
	for _, it := range o.Items {
		req.Items = append(req.Items, &v1.Item{RouteKey: it.Route, SkuId: it.SKU, Quantity: it.Qty})
	}
	inv, _ := cl.w.c.rpc()
	o.touch()
	defer o.touch()
	o.mu.Lock()
	o.notHeld = ""
	o.mu.Unlock()
	type result struct {
		code string
		res  *v1.ReserveResponse
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	var countMu sync.Mutex
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), cl.w.opts.ClientTimeout)
			defer cancel()
			res, err := inv.Reserve(ctx, connect.NewRequest(req))
			code := "ok"
			if err != nil {
				code = connect.CodeOf(err).String()
			}
			countMu.Lock()
			opName := op
			if i > 0 {
				opName = op + "-dup"
			}
			cl.count(opName, code)
			if code == "internal" || code == "unknown" || (code == "invalid_argument" && op != "reserve-invalid") {
				if len(cl.errs) < 5 {
					cl.errs = append(cl.errs, fmt.Sprintf("%s answered %s: %v", opName, code, err))
				}
			}
			countMu.Unlock()
			results[i] = result{code: code}
			if err == nil {
				results[i].res = res.Msg
			}
		}()
	}
	wg.Wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reserveCalls += n
	anyOK, allRefused := false, true
	for _, r := range results {
		switch {
		case r.code == "ok":
			anyOK = true
			allRefused = false
			o.reserveOK++
			got := receiptsOf(r.res)
			if o.receipts == nil {
				o.receipts = got
			} else if !slices.Equal(o.receipts, got) {
				o.contradict("Reserve returned receipts %v, an earlier Reserve %v", got, o.receipts)
			}
			if o.cancelledBy != "" {
				o.contradict("Reserve was ok after %s", o.cancelledBy)
			}
		case refused(r.code):
			if o.confirmedBy != "" {
				o.contradict("Reserve answered %s after %s", r.code, o.confirmedBy)
			}
		default:
			allRefused = false
		}
	}
	switch {
	case anyOK:
		return "ok"
	case allRefused:
		o.notHeld = "every Reserve of its last round was refused"
		return "refused"
	}
	return "unknown"
}

func receiptsOf(res *v1.ReserveResponse) []receipt {
	out := make([]receipt, 0, len(res.Receipts))
	for _, r := range res.Receipts {
		out = append(out, receipt{Item: int(r.ItemIndex), SKU: r.SkuId, Qty: r.Quantity, Node: r.Node, Redo: r.RedoLog, Offset: r.Offset})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Item != out[j].Item {
			return out[i].Item < out[j].Item
		}
		return out[i].Node < out[j].Node
	})
	return out
}

func (cl *client) confirm(o *order, op string) (string, error) {
	inv, _ := cl.w.c.rpc()
	o.touch()
	defer o.touch()
	o.confirmIssued = true
	return cl.call(op, func(ctx context.Context) error {
		_, err := inv.Confirm(ctx, connect.NewRequest(&v1.ConfirmRequest{OrderId: o.ID}))
		return err
	})
}

func (cl *client) cancel(o *order, op string) (string, error) {
	inv, _ := cl.w.c.rpc()
	o.touch()
	defer o.touch()
	return cl.call(op, func(ctx context.Context) error {
		_, err := inv.Cancel(ctx, connect.NewRequest(&v1.CancelRequest{OrderId: o.ID}))
		return err
	})
}

// confirmLoop confirms until the answer is definite (up to 4 tries) and
// reports whether the order was confirmed.
func (cl *client) confirmLoop(ctx context.Context, o *order) bool {
	op := "confirm"
	for try := 0; try < 4; try++ {
		code, err := cl.confirm(o, op)
		switch code {
		case "ok":
			o.claimConfirmed("Confirm was ok")
			return true
		case "failed_precondition":
			o.claimCancelled("Confirm refused (" + shortErr(err) + ")")
			return false
		case "not_found":
			if o.reserveOK > 0 {
				o.contradict("Confirm answered not_found after Reserve was ok")
			} else {
				o.notHeld = "Confirm answered not_found"
			}
			return false
		}
		if ctx.Err() != nil {
			return false
		}
		op = "confirm-retry"
		time.Sleep(time.Duration(50+cl.rng.IntN(150)) * time.Millisecond)
	}
	return false
}

// cancelLoop cancels until the answer is definite (up to 4 tries).
func (cl *client) cancelLoop(ctx context.Context, o *order, op string) {
	for try := 0; try < 4; try++ {
		code, _ := cl.cancel(o, op)
		switch code {
		case "ok":
			o.claimCancelled("Cancel was ok")
			return
		case "failed_precondition":
			o.claimConfirmed("Cancel refused: already confirmed")
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !strings.HasSuffix(op, "-retry") {
			op += "-retry"
		}
		time.Sleep(time.Duration(50+cl.rng.IntN(150)) * time.Millisecond)
	}
}

func shortErr(err error) string {
	if err == nil {
		return ""
	}
	var ce *connect.Error
	if e, ok := err.(*connect.Error); ok {
		ce = e
		return ce.Message()
	}
	return err.Error()
}
