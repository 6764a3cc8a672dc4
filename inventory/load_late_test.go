package inventory

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
)

// farLoadDeadline is a load call's deadline (ARGV 7 of loadScript) far
// enough ahead that no test's call reaches it.
func farLoadDeadline() int64 { return time.Now().Add(time.Hour).UnixMilli() }

// lateLoad loses the reply of the first "load" call on node at once and
// sends the call only once release is closed, reporting its error on
// landed: a call still on its way while the caller answers and the
// operator reads the stock back.
type lateLoad struct {
	node        string
	once        sync.Once
	releaseOnce sync.Once
	release     chan struct{}
	landed      chan error
}

func (l *lateLoad) Call(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if c.Script == "load" && c.Node == l.node {
		first := false
		l.once.Do(func() { first = true })
		if first {
			go func() {
				<-l.release
				_, err := send()
				l.landed <- err
			}()
			return nil, errors.New("connection reset by peer (injected: the call is still on its way)")
		}
	}
	return send()
}

func (l *lateLoad) Crash(context.Context, string) bool { return false }

// letLand lets the held call go (once).
func (l *lateLoad) letLand() { l.releaseOnce.Do(func() { close(l.release) }) }

// newLateLoadEnv is route d over n1 and n2 and an instance of it whose
// first load call on n2 is held back by a lateLoad (let go at the test's
// end at the latest).
func newLateLoadEnv(t *testing.T) (*stagedEnv, *Inventory, *lateLoad) {
	e := newStagedEnvConfig(t, Options{}, func(c *config.Config) {
		c.Servers["inventory"].Routes["d"] = []string{"n1", "n2"}
	})
	l := &lateLoad{node: "n2", release: make(chan struct{}), landed: make(chan error, 1)}
	inv, err := New(e.r, Options{Logger: slog.New(slog.DiscardHandler), AttemptLease: stagedLease, Faults: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.letLand()
		inv.Close()
	})
	return e, inv, l
}

// A load call whose reply was lost reaches its node after LoadStock
// answered: it adds nothing (SHARDIS_LATE), so the stock the operator
// reads back, as the error advises, is all the load added, and loading
// what is missing gives the units meant. Before, a load carried no
// deadline: the late share landed after that read, and 45 units were
// loaded where 30 were meant (found by a review).
func TestLoadShareArrivingLateAddsNothing(t *testing.T) {
	t.Parallel()
	e, inv, l := newLateLoadEnv(t)
	_, err := inv.LoadStock(e.ctx, "d", "u", 30, -1)
	if !errors.Is(err, ErrPartlyApplied) || !strings.Contains(err.Error(), "n2 may have added their share too") ||
		!strings.Contains(err.Error(), "which has passed") {
		t.Fatalf("LoadStock with n2's reply lost = %v; want ErrPartlyApplied saying n2's outcome is unknown and its deadline has passed", err)
	}
	// the operator reads what is missing
	level, err := e.inv.GetStock(e.ctx, "d", "u")
	if err != nil {
		t.Fatal(err)
	}
	missing := 30 - level.Loaded
	// the lost call reaches n2 now
	l.letLand()
	select {
	case lerr := <-l.landed:
		if lerr == nil || !strings.Contains(lerr.Error(), "SHARDIS_LATE") {
			t.Errorf("the late load call on n2 = %v; want a SHARDIS_LATE refusal", lerr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the late load call did not return")
	}
	if missing > 0 {
		if _, err := e.inv.LoadStock(e.ctx, "d", "u", missing, -1); err != nil {
			t.Fatal(err)
		}
	}
	after, err := e.inv.GetStock(e.ctx, "d", "u")
	if err != nil {
		t.Fatal(err)
	}
	if after.Loaded != 30 || after.Available != 30 {
		t.Fatalf("after loading the %d units read as missing: loaded %d, available %d; want 30 (the late share added twice)",
			missing, after.Loaded, after.Available)
	}
}

// A load whose caller's context ends before its calls are past their
// deadlines says until when a share whose outcome is unknown may still
// land, instead of inviting a read of the stock at once.
func TestLoadStoppedEarlySaysUntilWhenAShareMayLand(t *testing.T) {
	t.Parallel()
	e, inv, _ := newLateLoadEnv(t)
	ctx, cancel := context.WithTimeout(e.ctx, time.Second)
	defer cancel()
	began := time.Now()
	_, err := inv.LoadStock(ctx, "d", "u", 30, -1)
	if !errors.Is(err, ErrPartlyApplied) || !strings.Contains(err.Error(), "or may still add it until") {
		t.Fatalf("LoadStock stopped by its context = %v; want ErrPartlyApplied saying until when n2's share may land", err)
	}
	if waited := time.Since(began); waited > loadWindow+maxNodeSkew {
		t.Errorf("LoadStock waited %v past its context's end", waited)
	}
}
