package tests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// TestSwappedPortsAreRefused: two servers stamped by a first router are
// configured the other way round in a second one: both nodes are refused
// with ErrIdentity naming both names, and stay DOWN.
func TestSwappedPortsAreRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.StartN(t, 2, redistest.Options{})
	routes := map[string]config.Server{"order": server(config.OnNodeDownFail, map[string][]string{"eu": {"n1", "n2"}})}

	first, fev := startRouter(t, newConfig(t, map[string]string{"n1": srv[0].Addr(), "n2": srv[1].Addr()}, routes, &quickHealth))
	waitUp(t, first, fev, "n1", "n2")
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	r, ev := startRouter(t, newConfig(t, map[string]string{"n1": srv[1].Addr(), "n2": srv[0].Addr()}, routes, &quickHealth))
	for _, name := range []string{"n1", "n2"} {
		st := status(t, r, name)
		t.Logf("%s (%s): state %v, reason: %v", name, st.Addr, st.State, st.DownReason)
		if st.State != node.StateDown {
			t.Errorf("%s on the other node's port: state %v, want down", name, st.State)
		}
		if !errors.Is(st.DownReason, node.ErrIdentity) {
			t.Errorf("%s DownReason = %v, want ErrIdentity", name, st.DownReason)
		} else if msg := st.DownReason.Error(); !strings.Contains(msg, `"n1"`) || !strings.Contains(msg, `"n2"`) {
			t.Errorf("%s DownReason %q does not name both n1 and n2", name, msg)
		}
	}
	// Several reconnect probes later nothing changed.
	ev.none("n1", 500*time.Millisecond)
	requireState(t, r, node.StateDown, "n1", "n2")
	if st := status(t, r, "n1"); st.FailedProbes < 2 {
		t.Errorf("n1 failed probes after 500ms = %d, want >= 2 (it is still probed)", st.FailedProbes)
	}
	if _, err := r.Client("order", "eu", "k"); !errors.Is(err, router.ErrUnavailable) || !errors.Is(err, node.ErrDown) {
		t.Errorf("Client with both nodes refused: err = %v, want ErrUnavailable and node.ErrDown", err)
	}
	// The stamps were not overwritten.
	ctx := context.Background()
	for i, want := range []string{"n1", "n2"} {
		if got, err := srv[i].Client(t).HGet(ctx, node.StampKey, "name").Result(); err != nil || got != want {
			t.Errorf("server %d stamp name = %q, %v; want %q", i, got, err, want)
		}
	}
}

// TestForeignStampIsRefused: a server pre-stamped as another node keeps
// its node DOWN while the other node is UP; removing the stamp lets the
// node stamp it and come UP.
func TestForeignStampIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartN(t, 2, redistest.Options{})
	other := srv[1].Client(t)
	if err := other.HSet(ctx, node.StampKey, "name", "other", "incarnation", "feedface").Err(); err != nil {
		t.Fatal(err)
	}
	cfg := newConfig(t,
		map[string]string{"n1": srv[0].Addr(), "n2": srv[1].Addr()},
		map[string]config.Server{"order": server(config.OnNodeDownFail, map[string][]string{"eu": {"n1", "n2"}})},
		&quickHealth)
	r, ev := startRouter(t, cfg)
	waitUp(t, r, ev, "n1")
	st := status(t, r, "n2")
	t.Logf("n2: state %v, reason: %v", st.State, st.DownReason)
	if st.State != node.StateDown || !errors.Is(st.DownReason, node.ErrIdentity) {
		t.Fatalf("n2 on a server stamped \"other\": state %v reason %v, want down with ErrIdentity", st.State, st.DownReason)
	}
	if msg := st.DownReason.Error(); !strings.Contains(msg, `"other"`) || !strings.Contains(msg, `"n2"`) {
		t.Errorf("n2 DownReason %q does not name both other and n2", msg)
	}
	if st.Incarnation != "" {
		t.Errorf("n2 incarnation = %q, want empty: the foreign stamp must not be adopted", st.Incarnation)
	}
	ev.none("n2", 400*time.Millisecond)
	requireState(t, r, node.StateDown, "n2")
	requireState(t, r, node.StateUp, "n1")

	set, _ := r.Set("order", "eu")
	k := keysHomedOn(t, set, "n2", "order", 1)[0]
	if _, err := r.Pick("order", "eu", k); !errors.Is(err, router.ErrUnavailable) {
		t.Errorf("Pick of a key homed on refused n2: err = %v, want ErrUnavailable", err)
	}

	// The operator removes the wrong stamp: n2 stamps itself and is UP.
	if err := other.Del(ctx, node.StampKey).Err(); err != nil {
		t.Fatal(err)
	}
	ev.wait("n2", true, 2*time.Second)
	if got, err := other.HGet(ctx, node.StampKey, "name").Result(); err != nil || got != "n2" {
		t.Errorf("stamp name after recovery = %q, %v; want n2", got, err)
	}
	if _, err := r.Pick("order", "eu", k); err != nil {
		t.Errorf("Pick of %s after n2 came up: %v", k, err)
	}
}

// TestDataLossNewIncarnation: a node without persistence is killed and
// comes back empty: it is UP again with a new incarnation, re-stamped with
// its own name.
func TestDataLossNewIncarnation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartN(t, 2, redistest.Options{})
	cfg := newConfig(t,
		map[string]string{"n1": srv[0].Addr(), "n2": srv[1].Addr()},
		map[string]config.Server{"order": server(config.OnNodeDownFail, map[string][]string{"eu": {"n1", "n2"}})},
		&quickHealth)
	r, ev := startRouter(t, cfg)
	waitUp(t, r, ev, "n1", "n2")
	direct := srv[0].Client(t)
	before, err := direct.HGetAll(ctx, node.StampKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	inc := status(t, r, "n1").Incarnation
	if before["name"] != "n1" || before["incarnation"] == "" || before["incarnation"] != inc {
		t.Fatalf("stamp %v, router incarnation %q: want name n1 and the same incarnation", before, inc)
	}
	set, _ := r.Set("order", "eu")
	k := keysHomedOn(t, set, "n1", "order", 1)[0]
	c, err := r.Client("order", "eu", k)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, k, "lost", 0).Err(); err != nil {
		t.Fatal(err)
	}
	inc2 := status(t, r, "n2").Incarnation

	srv[0].Kill()
	ev.wait("n1", false, 2*time.Second)
	srv[0].Restart()
	ev.wait("n1", true, 2*time.Second)

	after := status(t, r, "n1").Incarnation
	t.Logf("n1 incarnation %s → %s", inc, after)
	if after == "" || after == inc {
		t.Errorf("incarnation after restart without persistence = %q, want a new one (was %q)", after, inc)
	}
	stamp, err := direct.HGetAll(ctx, node.StampKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	if stamp["name"] != "n1" || stamp["incarnation"] != after {
		t.Errorf("stamp after data loss = %v, want name n1 incarnation %s", stamp, after)
	}
	if err := direct.Get(ctx, k).Err(); err == nil {
		t.Errorf("key %s survived a restart without persistence: test is broken", k)
	}
	if got := status(t, r, "n2").Incarnation; got != inc2 {
		t.Errorf("n2 incarnation changed %q → %q; only n1 lost data", inc2, got)
	}
	c, err = r.Client("order", "eu", k)
	if err != nil {
		t.Fatalf("Client after recovery: %v", err)
	}
	if err := c.Set(ctx, k, "new", 0).Err(); err != nil {
		t.Errorf("SET after recovery: %v", err)
	}
}
