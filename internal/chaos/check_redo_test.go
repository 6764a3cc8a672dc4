package chaos

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// The redo-log comparison allows the service's read, taken first, to
// start earlier than the node's by acknowledged entries only: the
// reconciler's trim of a prefix between the two reads (seed 447).
func TestCheckRedoReadAllowsAnAcknowledgedPrefix(t *testing.T) {
	ns := newNodeState("n1")
	ns.redoAcked = map[string]string{"inv:redo:5": "2"}
	for i := int64(1); i <= 4; i++ {
		id := fmt.Sprintf("o%d|t|0", i)
		ns.addPart(id, map[string]string{"state": "confirmed", "kind": "s", "order": fmt.Sprintf("o%d", i), "token": "t", "sku": "s",
			"qty": "1", "item": "0", "counter": "inv:stock:a:s", "redo": "inv:redo:5", "offset": fmt.Sprint(i)})
	}
	entry := func(i int64) *v1.RedoEntry {
		return &v1.RedoEntry{Offset: i, PartId: fmt.Sprintf("o%d|t|0", i), OrderId: fmt.Sprintf("o%d", i), SkuId: "s", Quantity: 1, State: "confirmed"}
	}
	for _, c := range []struct {
		name       string
		held, read []int64
		violations int
	}{
		{"same entries", []int64{1, 2, 3, 4}, []int64{1, 2, 3, 4}, 0},
		{"acknowledged prefix trimmed between the reads", []int64{3, 4}, []int64{1, 2, 3, 4}, 0},
		{"an unacknowledged entry gone", []int64{4}, []int64{1, 2, 3, 4}, 1},
		{"the service missed one", []int64{1, 2, 3, 4}, []int64{1, 2, 3}, 1},
		{"the service's last entry differs", []int64{3, 4}, []int64{2, 3, 3}, 1},
	} {
		ns.redo = map[string][]redis.Z{"inv:redo:5": nil}
		for _, i := range c.held {
			ns.redo["inv:redo:5"] = append(ns.redo["inv:redo:5"], redis.Z{Score: float64(i), Member: fmt.Sprintf("o%d|t|0", i)})
		}
		var read []*v1.RedoEntry
		for _, i := range c.read {
			read = append(read, entry(i))
		}
		rep := newReport(Options{})
		checkRedoRead(rep, ns, map[string][]*v1.RedoEntry{"inv:redo:5": read})
		if len(rep.Violations) != c.violations {
			t.Errorf("%s: violations %v; want %d", c.name, rep.Violations, c.violations)
		}
	}
}

// A ReadRedoLog comparison the service could not answer after healing is
// read again; one it still cannot answer is a violation. Before, it was
// a note and the run passed without the comparison.
func TestReadRedoToCompare(t *testing.T) {
	unavailable := connect.NewError(connect.CodeUnavailable, errors.New("node n2 is down"))
	logs := map[string]map[string][]*v1.RedoEntry{"n1": {"inv:redo:5": nil}}
	for _, tc := range []struct {
		name     string
		failures int // reads that fail before one succeeds
		err      error
		ok       bool
	}{
		{"answered", 0, nil, true},
		{"answered on a later read", 2, unavailable, true},
		{"never answered", 10, unavailable, false},
		{"a wrong answer", 1, connect.NewError(connect.CodeInternal, errors.New("bad entry")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			read := func() (map[string]map[string][]*v1.RedoEntry, error) {
				if reads++; reads <= tc.failures {
					return nil, tc.err
				}
				return logs, nil
			}
			rep := newReport(Options{})
			got := readRedoToCompare(rep, read, 4, 0)
			if compared := got != nil; compared != tc.ok {
				t.Errorf("compared = %v, want %v (%d reads)", compared, tc.ok, reads)
			}
			if violated := rep.ViolationCounts["redo-read"] > 0; violated == tc.ok {
				t.Errorf("redo-read violated = %v, want %v (%d reads): %+v", violated, !tc.ok, reads, rep.Violations)
			}
		})
	}
}
