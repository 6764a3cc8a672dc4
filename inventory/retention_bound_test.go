package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
)

// TestRetentionBelowTheSkewBoundIsRefused: the move out moves an
// undecided copy marked at the apply's token no more once now + two part
// graces reaches the order's due plus the retention, in whole seconds
// (order_move_out.lua), by the clock of the copy's node, which may run up
// to two seconds ahead of the order's new home's (each node within a
// second of true time). Order st is reserved on n3 for 1 s, and n3
// leaves; the apply's install of st on n2 fails (the copy on n3 marked
// moved, the only record). n3 runs 0.9 s fast, n2 0.9 s slow. The
// client confirms st while n2, its new home, says it is before its
// deadline; the Confirm's touch moves st from n3. With a retention of
// 3 s the copy is moved and st confirmed. With 2 s (valid before: above
// max_reservation_ttl) n3 reads the copy as past its record's retention,
// moves it no more, and the acknowledged reservation is lost before its
// deadline; so the configuration is refused below 3 s.
func TestRetentionBelowTheSkewBoundIsRefused(t *testing.T) {
	t.Parallel()
	for _, retention := range []time.Duration{3 * time.Second, 2 * time.Second} {
		t.Run(retention.String(), func(t *testing.T) {
			t.Parallel()
			err := confirmAfterAFailedInstallSkewed(t, retention)
			if retention >= 3*time.Second {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Logf("the Confirm found st's record (the window was missed)")
			} else {
				t.Logf("with a retention of %v: %v", retention, err)
			}
			cfg := envConfig()
			cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"a": {"n1"}}}}
			cfg.Nodes = map[string]config.Node{"n1": {Addr: "127.0.0.1:1", Weight: 1}}
			cfg.Inventory.Retention, cfg.Inventory.MaxReservationTTL, cfg.Inventory.ReservationTTL = retention, time.Second, time.Second
			if cfg.Validate() == nil {
				t.Errorf("a retention of %v validates: the move out's rule may lose an acknowledged reservation before its deadline", retention)
			}
		})
	}
}

// confirmAfterAFailedInstallSkewed is TestRetentionBelowTheSkewBoundIsRefused's
// scenario at retention; it returns what went wrong for the client: nil
// when st ended confirmed.
func confirmAfterAFailedInstallSkewed(t *testing.T, retention time.Duration) error {
	e := newSkewEnv(t)
	addrs := map[string]string{}
	for i, s := range e.srvs {
		addrs[fmt.Sprintf("n%d", i+1)] = s.Addr()
	}
	three := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}})
	two := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n2"}})
	for _, c := range []*config.Config{three, two} {
		c.Inventory.Retention, c.Inventory.MaxReservationTTL, c.Inventory.ReservationTTL = retention, time.Second, time.Second
	}
	ctx, id, n3 := e.ctx, movedN3ToN2(t, three, two), e.clients["n3"]
	e.skew("n3", 900)
	e.skew("n2", -900)
	inv := openInv(t, three, Options{})
	if _, err := inv.LoadStock(ctx, "a", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, id, []Item{{Route: "a", SKU: "s", Quantity: 2}}, "", time.Second); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	noInstall := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == orderInstallScript.name && c.Node == "n2" {
			return nil, errors.New("n2 unreachable (injected)")
		}
		return send()
	}}
	if _, err := ApplyTopology(ctx, ApplyOptions{To: two, From: three, Wait: time.Second, Logger: slog.New(slog.DiscardHandler), Faults: noInstall}); err == nil {
		t.Fatal("the removal of n3 ended though st's install failed")
	}
	f := orderFieldsOn(t, ctx, n3, id)
	if f["moved"] == "" || f["status"] != string(OrderReserved) {
		t.Fatalf("order %s on n3 after the failed install: %v; want its copy marked moved, reserved", id, f)
	}
	deadline, err := strconv.ParseInt(f["deadline"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// n3's clock 200 ms past deadline + 1 s: n2's 1.6 s behind it, before
	// the deadline
	for {
		now, err := n3.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if now.UnixMilli() >= deadline+1200 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if now, err := e.clients["n2"].Time(ctx).Result(); err != nil || now.UnixMilli() >= deadline-100 {
		t.Fatalf("n2's clock %v, %v; want before st's deadline %d", now.UnixMilli(), err, deadline)
	}
	out, err := openInv(t, three, Options{}).Confirm(ctx, id) // configured with n3: the nodes migrate from it
	if err != nil || out.Status != StatusConfirmed {
		return fmt.Errorf("Confirm of %s before its deadline by its new home's clock = %+v, %v; want confirmed", id, out, err)
	}
	return nil
}
