package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
)

// TestRetentionBelowTheSkewBoundIsRefused: the move out moves an
// undecided copy marked at the apply's token no more once now + two part
// graces reaches the order's due plus the retention, in whole seconds
// (order_move_out.lua), by the clock of the copy's node, which may run up
// to two seconds ahead of the order's new home's (each node within a
// second of true time). Order st is reserved on n3, and n3 leaves; the
// apply's install of st on n2 fails (the copy on n3 marked moved, the
// only record). n3 runs 0.95 s fast, n2 0.95 s slow. The client confirms
// st; the Confirm's touch moves st from n3 once n3's clock is 1.1 s past
// st's deadline, when n2, its new home, still reads it 0.8 s before it.
// With a retention of 3 s the copy is moved and st confirmed. With 2 s
// (valid before: above max_reservation_ttl) n3 reads the copy as past its
// record's retention, moves it no more, and the acknowledged reservation
// is lost before its deadline; so the configuration is refused below 3 s.
func TestRetentionBelowTheSkewBoundIsRefused(t *testing.T) {
	t.Parallel()
	for _, retention := range []time.Duration{3 * time.Second, 2 * time.Second} {
		t.Run(retention.String(), func(t *testing.T) {
			t.Parallel()
			if retention >= 3*time.Second {
				confirmsWithinTheWindow(t, retention)
				return
			}
			got := confirmAfterAFailedInstallSkewed(t, retention)
			t.Logf("with a retention of %v: %v", retention, got)
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

// confirmsWithinTheWindow runs the scenario at retention until a run
// meets its window (up to 3 runs) and wants st confirmed in it: a run
// whose Confirm failed while its clocks say it ran within the window
// fails the test; one whose clocks say it missed the window proves
// nothing either way (n2 past the deadline may answer an expiry, n3
// past the skew bound may move the copy no more) and is run again.
func confirmsWithinTheWindow(t *testing.T, retention time.Duration) {
	for run := 1; run <= 3; run++ {
		got := confirmAfterAFailedInstallSkewed(t, retention)
		switch {
		case got.err == nil:
			t.Logf("st confirmed: %v", got)
			return
		case got.inWindow():
			t.Fatalf("%v (within the window: %v)", got.err, got)
		}
		t.Logf("run %d missed the window, run again: %v", run, got)
	}
	t.Fatal("3 runs missed the window (their clocks are logged above): the machine too loaded to run the Confirm's install and decision within 0.8 s")
}

// skewedConfirm is how the Confirm of
// TestRetentionBelowTheSkewBoundIsRefused's scenario went, the clocks in
// ms since the epoch.
type skewedConfirm struct {
	err      error // nil: st confirmed
	deadline int64 // st's deadline
	moveOut  int64 // n3's clock once its move out answered (0: none sent)
	n2       int64 // n2's clock once its last script of the Confirm answered
}

// inWindow says whether the Confirm ran where its answer is the rule's:
// the move out read n3's clock under the deadline plus the skew bound
// (the 2 s the rule allows), and n2 decided before the deadline. A
// machine too loaded to run the Confirm's install and decision within
// the 0.8 s between those misses it: then an expiry is n2's right answer.
func (c skewedConfirm) inWindow() bool {
	return c.moveOut > 0 && c.moveOut < c.deadline+2000 && c.n2 > 0 && c.n2 < c.deadline
}

func (c skewedConfirm) String() string {
	return fmt.Sprintf("err %v; n3's clock after its move out deadline%+dms, n2's after its last script deadline%+dms",
		c.err, c.moveOut-c.deadline, c.n2-c.deadline)
}

// confirmAfterAFailedInstallSkewed is TestRetentionBelowTheSkewBoundIsRefused's
// scenario at retention; it returns how the client's Confirm went.
func confirmAfterAFailedInstallSkewed(t *testing.T, retention time.Duration) skewedConfirm {
	e := newSkewEnv(t)
	addrs := map[string]string{}
	for i, s := range e.srvs {
		addrs[fmt.Sprintf("n%d", i+1)] = s.Addr()
	}
	three := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}})
	two := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n2"}})
	// st held for the longest hold below the retention: the apply runs
	// before its deadline; a command timeout that a loaded machine does
	// not trip
	hold := retention - time.Second
	for _, c := range []*config.Config{three, two} {
		c.Inventory.Retention, c.Inventory.MaxReservationTTL, c.Inventory.ReservationTTL = retention, hold, hold
		c.Client.CommandTimeout = 5 * time.Second
	}
	ctx, id, n3, n2 := e.ctx, movedN3ToN2(t, three, two), e.clients["n3"], e.clients["n2"]
	e.skew("n3", 950)
	e.skew("n2", -950)
	inv := openInv(t, three, Options{})
	if _, err := inv.LoadStock(ctx, "a", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, id, []Item{{Route: "a", SKU: "s", Quantity: 2}}, "", hold); err != nil {
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
	got := skewedConfirm{}
	var err error
	if got.deadline, err = strconv.ParseInt(f["deadline"], 10, 64); err != nil {
		t.Fatal(err)
	}
	clock := func(c *redis.Client) int64 {
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Error(err)
			return 0
		}
		return now.UnixMilli()
	}
	// the Confirm's move out reaches n3 once n3's clock is 1.1 s past the
	// deadline (the 2 s retention's copy is past it), n2's 0.8 s before
	// it; the clocks of its scripts read after they answer
	var mu sync.Mutex
	window := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Node == "n3" && c.Script == orderMoveOutScript.name {
			for now := clock(n3); now > 0 && now < got.deadline+1100; now = clock(n3) {
				time.Sleep(5 * time.Millisecond)
			}
			out, err := send()
			now := clock(n3)
			mu.Lock()
			defer mu.Unlock()
			got.moveOut = now
			return out, err
		}
		out, err := send()
		if c.Node == "n2" {
			now := clock(n2)
			mu.Lock()
			defer mu.Unlock()
			if got.moveOut > 0 {
				got.n2 = now
			}
		}
		return out, err
	}}
	out, err := openInv(t, three, Options{Faults: window}).Confirm(ctx, id) // configured with n3: the nodes migrate from it
	if err == nil && out.Status != StatusConfirmed {
		err = fmt.Errorf("status %s", out.Status)
	}
	if err != nil {
		err = fmt.Errorf("Confirm of %s before its deadline by its new home's clock = %+v, %w; want confirmed", id, out, err)
	}
	mu.Lock()
	defer mu.Unlock()
	got.err = err
	return got
}
