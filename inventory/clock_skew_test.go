package inventory

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
)

// Clock skew between nodes, and a node's clock stepped by NTP, against
// real redis-servers whose wall clock (TIME, key expiry) is moved by
// redistest.SkewClock. SECURITY.md ("Clock skew"): decisions are taken on
// the order's home with the home's clock; a part's node's clock only says
// when the reconciler first looks at it. Each test checks that an order
// ends decided once, its parts following the decision, and the stock adds
// up, whatever the clocks say.

// skewEnv is a staged env (routes a, b, c on n1, n2, n3) whose servers'
// clocks are moved by the files in skew (by node name).
type skewEnv struct {
	*stagedEnv
	files map[string]string
}

func newSkewEnv(t *testing.T) *skewEnv { return newSkewEnvWith(t, nil) }

// newSkewEnvWith is newSkewEnv with edit applied to the configuration
// (nil: none).
func newSkewEnvWith(t *testing.T, edit func(*config.Config)) *skewEnv {
	dir := t.TempDir()
	files := map[string]string{}
	srvs := make([]*redistest.Server, 3)
	for i := range srvs {
		name := fmt.Sprintf("n%d", i+1)
		files[name] = filepath.Join(dir, name+".skew")
		redistest.SetSkew(t, files[name], 0)
		srvs[i] = redistest.Start(t, redistest.Options{Env: redistest.SkewClock(t, files[name])})
	}
	return &skewEnv{stagedEnv: newStagedEnvOn(t, srvs, Options{}, edit), files: files}
}

// skew moves node name's clock to ms off the real one and checks the
// node's TIME says so, within 200 ms of the real clock read before and
// after it (a loaded machine may take longer to answer).
func (e *skewEnv) skew(name string, ms int64) {
	e.t.Helper()
	redistest.SetSkew(e.t, e.files[name], ms)
	before := time.Now()
	got, err := e.clients[name].Time(e.ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	after := time.Now()
	if got.Before(before.Add(time.Duration(ms-200)*time.Millisecond)) || got.After(after.Add(time.Duration(ms+200)*time.Millisecond)) {
		e.t.Fatalf("node %s's TIME is %dms off the real clock, want %d", name, time.Until(got).Milliseconds(), ms)
	}
}

// pass runs the reconciler's expiry step once on every node and counts
// what it did by resolution.
func (e *skewEnv) pass() map[Resolution]int {
	e.t.Helper()
	out := map[Resolution]int{}
	for _, n := range e.inv.Nodes() {
		due, err := e.inv.DueParts(e.ctx, n, 100)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, p := range due {
			r, err := e.inv.ResolveExpired(e.ctx, p)
			if err != nil {
				e.t.Fatalf("ResolveExpired %+v: %v", p, err)
			}
			out[r]++
		}
	}
	return out
}

// passFor runs passes for d and returns what they did in all.
func (e *skewEnv) passFor(d time.Duration) map[Resolution]int {
	e.t.Helper()
	out := map[Resolution]int{}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for r, k := range e.pass() {
			out[r] += k
		}
	}
	return out
}

// A part's node ahead of the order's home (the general path sends the
// home's deadline as the parts' due time): the parts come due early by
// their clocks and are postponed, never cancelled, while the home says
// the order may be confirmed; Confirm then confirms every part.
func TestSkewPartNodesAheadOfHome(t *testing.T) {
	t.Parallel()
	e := newSkewEnv(t)
	e.skew("n2", 5000)
	e.skew("n3", 5000)
	id := e.homedOn("ahead", "n1")
	home, err := e.inv.homeFor(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.reserveGeneral(e.ctx, home, id, stagedItems(), "", 3*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	did := e.passFor(1500 * time.Millisecond)
	t.Logf("reconciler passes while the home says reserved: %v", did)
	if did[Cancelled] > 0 || did[Confirmed] > 0 {
		t.Errorf("parts settled before the order was decided: %v", did)
	}
	out, err := e.inv.Confirm(e.ctx, id)
	if err != nil || out.Status != StatusConfirmed || out.PendingParts != 0 {
		t.Fatalf("Confirm = %+v, %v", out, err)
	}
	e.verify(id, "confirmed")
	e.stock()
}

// A part's node behind the order's home: the order expires at the home
// on time; its parts come due later by their clocks and are cancelled
// then (only when, not whether: SECURITY.md), and Confirm after the
// deadline reports expiry.
func TestSkewPartNodesBehindHome(t *testing.T) {
	t.Parallel()
	e := newSkewEnv(t)
	e.skew("n2", -3000)
	e.skew("n3", -3000)
	id := e.homedOn("behind", "n1")
	home, _ := e.inv.homeFor(e.ctx, id)
	if _, err := e.inv.reserveGeneral(e.ctx, home, id, stagedItems(), "", time.Second, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := e.inv.Confirm(e.ctx, id); !errors.Is(err, ErrExpired) {
		t.Fatalf("Confirm after the home's deadline: %v, want ErrExpired", err)
	}
	e.expireAll()
	e.verify(id, "cancelled")
	e.stock()
}

// The home's clock stepped back (NTP) while the order is reserved: the
// reservation lives longer by the step; its parts, due by their own
// clocks, are postponed, not cancelled, and Confirm confirms them all.
// Stepped forward: the order expires early at the home, Confirm reports
// expiry, and every part is cancelled.
func TestSkewHomeClockSteps(t *testing.T) {
	t.Parallel()
	e := newSkewEnv(t)
	for _, step := range []int64{-10000, 10000} {
		t.Run(strconv.FormatInt(step, 10), func(t *testing.T) {
			e.t = t
			e.skew("n1", 0)
			id := e.homedOn("step"+strconv.FormatInt(step, 10), "n1")
			if _, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", 2*time.Second); err != nil {
				t.Fatal(err)
			}
			e.skew("n1", step)
			did := e.passFor(3500 * time.Millisecond) // past the parts' due (ttl + 1s) by their clocks
			t.Logf("reconciler after the step: %v", did)
			out, err := e.inv.Confirm(e.ctx, id)
			if step < 0 {
				if err != nil || out.Status != StatusConfirmed {
					t.Fatalf("Confirm = %+v, %v", out, err)
				}
				e.verify(id, "confirmed")
			} else {
				if !errors.Is(err, ErrExpired) {
					t.Fatalf("Confirm = %+v, %v; want ErrExpired", out, err)
				}
				e.skew("n1", 0)
				e.expireAll()
				e.verify(id, "cancelled")
			}
			e.stock()
		})
	}
}
