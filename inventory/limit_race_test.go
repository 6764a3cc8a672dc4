package inventory

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"
)

// holdLoad holds back the first "load" call of one instance on node n
// until release is closed.
type holdLoad struct {
	node    string
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (h *holdLoad) Call(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if c.Script == "load" && c.Node == h.node {
		first := false
		h.once.Do(func() { first = true; close(h.held) })
		if first {
			select {
			case <-h.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return send()
}

func (h *holdLoad) Crash(context.Context, string) bool { return false }

// TestRacingLimitChangesEndAtTheLater: two LoadStock limit changes of
// one SKU race (two instances, an operator script and a retry, two
// admins): the older change's call, arriving last on n1, must not undo
// the newer one there (load.lua replaces a limit only for a newer
// version, limits.go). Before, each node's load script wrote its limit
// whatever the version it held, so the route ended with n1 at the older
// limit (5) and n2 at the newer (1), both calls answered success, no
// pending change was recorded and ConvergeLimits never mended it; a user
// whose quota node is n1 then held 5 units of a SKU whose limit was set
// to 1 last (found by a review).
func TestRacingLimitChangesEndAtTheLater(t *testing.T) {
	e := newLimitRouteEnv(t)
	h := &holdLoad{node: "n1", held: make(chan struct{}), release: make(chan struct{})}
	first, err := New(e.r, Options{Logger: slog.New(slog.DiscardHandler), AttemptLease: stagedLease, Faults: h})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	done := make(chan error, 1)
	go func() {
		_, err := first.LoadStock(e.ctx, "d", "t", 0, 5) // version v1
		done <- err
	}()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first change's load on n1 was not held")
	}
	time.Sleep(5 * time.Millisecond)                                  // the versions are ms clocks: make v2 > v1
	if _, err := e.inv.LoadStock(e.ctx, "d", "t", 0, 1); err != nil { // version v2 > v1
		t.Fatal(err)
	}
	close(h.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2"} {
		if left, err := e.inv.ConvergeLimits(e.ctx, n); err != nil || left != 0 {
			t.Fatalf("ConvergeLimits %s = %d, %v", n, left, err)
		}
	}
	limits := map[string]string{}
	for _, n := range []string{"n1", "n2"} {
		f, err := e.clients[n].HMGet(e.ctx, stockKey("d", "t"), "limit", "limit_ver").Result()
		if err != nil {
			t.Fatal(err)
		}
		limits[n] = f[0].(string)
		t.Logf("%s: limit %v, limit_ver %v", n, f[0], f[1])
	}
	if limits["n1"] != limits["n2"] {
		t.Errorf("after two racing limit changes (5 at v1, then 1 at v2 > v1) and ConvergeLimits the route's nodes disagree: %v", limits)
	}
	// A user whose quota node in route d is n1.
	set, _ := e.inv.set(e.ctx, "d")
	user := ""
	for i := 0; ; i++ {
		u := "u" + strconv.Itoa(i)
		if quotaNode(set, u).Name() == "n1" {
			user = u
			break
		}
	}
	var got int64
	for i := range 5 {
		_, err := e.inv.Reserve(e.ctx, "o"+strconv.Itoa(i), []Item{{Route: "d", SKU: "t", Quantity: 1}}, user, time.Minute)
		if err == nil {
			got++
		} else if !errors.Is(err, ErrLimitExceeded) {
			t.Fatal(err)
		}
	}
	if got > 1 {
		t.Errorf("user %s holds %d units of d/t, whose per-user limit the later LoadStock set to 1", user, got)
	}
}
