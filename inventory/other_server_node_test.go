package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
)

// TestNodeOfAnotherServerRefused checks that every method that takes a
// node's name from its caller takes only a node of the inventory server
// (Inventory.Nodes): n4, configured for server "cache" only, is refused
// with ErrInvalid and router.ErrUnknownNode, naming n4 and saying it is
// not a node of the inventory server, as n9, a name the configuration
// does not give at all, is refused. Found by a review: the names were
// resolved among every node of the router, so these ran their scripts
// on n4, which answered that it was at no topology (unavailable, as a
// transient state) or read as holding nothing (StuckParts listed none);
// and TrimRedoLog, RedoLogLen, AuditStock and ConvergeLimits refused
// even an unknown name without ErrInvalid.
func TestNodeOfAnotherServerRefused(t *testing.T) {
	e := newStagedEnvOn(t, redistest.StartN(t, 4, redistest.Options{}), Options{}, func(cfg *config.Config) {
		cfg.Servers["cache"] = config.Server{OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"k": {"n4"}}}
	})
	inv, ctx := e.inv, e.ctx
	calls := map[string]func(name string) error{
		"SetAside": func(name string) error {
			_, err := inv.SetAside(ctx, PendingPart{Node: name, PartID: "o|a|0"}, "why", time.Second, time.Second)
			return err
		},
		"RetryStuck":     func(name string) error { _, err := inv.RetryStuck(ctx, name, "o|a|0"); return err },
		"RetryDueStuck":  func(name string) error { _, err := inv.RetryDueStuck(ctx, name, 10, time.Second); return err },
		"RetryStuckSKU":  func(name string) error { _, err := inv.RetryStuckSKU(ctx, name, "a", "s"); return err },
		"StuckParts":     func(name string) error { _, err := inv.StuckParts(ctx, name, 10); return err },
		"StuckCount":     func(name string) error { _, err := inv.StuckCount(ctx, name); return err },
		"RedoUnacked":    func(name string) error { _, err := inv.RedoUnacked(ctx, name); return err },
		"TrimRedoLog":    func(name string) error { _, err := inv.TrimRedoLog(ctx, name, 0, 10); return err },
		"RedoLogLen":     func(name string) error { _, err := inv.RedoLogLen(ctx, name); return err },
		"RedoQueuesHeld": func(name string) error { _, err := inv.RedoQueuesHeld(ctx, name); return err },
		"ReadRedoPageFrom": func(name string) error {
			_, err := inv.ReadRedoPageFrom(ctx, name, RedoCursor{}, 10)
			return err
		},
		"AckRedoLogAt": func(name string) error { _, err := inv.AckRedoLogAt(ctx, name, "", RedoCursor{}); return err },
		"ReadRedoBatch": func(name string) error {
			_, err := inv.ReadRedoBatch(ctx, name, "", []RedoCursor{{}}, 10, 0)
			return err
		},
		"AckRedoBatch": func(name string) error {
			_, err := inv.AckRedoBatch(ctx, name, "inc", []RedoCursor{{}})
			return err
		},
		"PartStates": func(name string) error {
			_, _, err := inv.PartStates(ctx, name, []string{"o|a|0"})
			return err
		},
		"ReadSettled": func(name string) error {
			_, err := inv.ReadSettled(ctx, name, SettledCursor{}, 10)
			return err
		},
		"AuditStock":     func(name string) error { _, err := inv.AuditStock(ctx, name); return err },
		"ConvergeLimits": func(name string) error { _, err := inv.ConvergeLimits(ctx, name); return err },
	}
	for call, f := range calls {
		for _, name := range []string{"n4", "n9"} {
			err := f(name)
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, router.ErrUnknownNode) || err == nil || !strings.Contains(err.Error(), `"`+name+`"`) {
				t.Errorf("%s(%s): %v; want ErrInvalid and router.ErrUnknownNode naming %s", call, name, err, name)
				continue
			}
			if name == "n4" && !strings.Contains(err.Error(), "not a node of the inventory server") {
				t.Errorf("%s(n4): %v; want it to say n4 is not a node of the inventory server", call, err)
			}
		}
		if err := f("n1"); errors.Is(err, router.ErrUnknownNode) {
			t.Errorf("%s(n1), a node of the inventory: %v", call, err)
		}
	}
}
