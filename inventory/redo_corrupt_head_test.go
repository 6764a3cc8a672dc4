package inventory

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// redoTwoQueues settles n orders of SKU s and n of another SKU of route a
// (node n1) whose entries go to another queue, acknowledges both queues,
// and returns the two queue keys.
func redoTwoQueues(t *testing.T, e *stagedEnv, n int) (q1, q2 string) {
	t.Helper()
	q1 = e.inv.redoQueue("a", "s")
	other := ""
	for i := range 100 {
		if sku := fmt.Sprintf("o%d", i); e.inv.redoQueue("a", sku) != q1 {
			other, q2 = sku, e.inv.redoQueue("a", sku)
			break
		}
	}
	if other == "" {
		t.Fatal("no SKU of route a found whose entries go to another queue than s's")
	}
	if _, err := e.inv.LoadStock(e.ctx, "a", other, 100, 0); err != nil {
		t.Fatal(err)
	}
	for _, sku := range []string{"s", other} {
		for i := range n {
			id := fmt.Sprintf("rch-%s-%d", sku, i)
			if _, err := e.inv.Reserve(e.ctx, id, []Item{{Route: "a", SKU: sku, Quantity: 1}}, "", time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, err := e.inv.Cancel(e.ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, q := range []string{q1, q2} {
		var num int
		if _, err := fmt.Sscanf(q, "inv:redo:%d", &num); err != nil {
			t.Fatal(err)
		}
		if _, err := e.inv.AckRedoLog(e.ctx, "n1", num, int64(n)); err != nil {
			t.Fatal(err)
		}
	}
	return q1, q2
}

// wantCorruptHead fails t unless err wraps ErrCorrupt naming node n1, the
// offsets hash and queue q.
func wantCorruptHead(t *testing.T, what string, err error, q string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "node n1") ||
		!strings.Contains(err.Error(), RedoOffsetsKey+" "+q) {
		t.Errorf("%s: %v; want ErrCorrupt naming node n1 and %s %s", what, err, RedoOffsetsKey, q)
	}
}

// RedoLogLen of a node where a queue's head is not an integer is
// ErrCorrupt naming the node and the field, as ReadRedoPage and
// RedoUnacked answer. Found by a review: redo_len.lua read the head with
// tonumber(...) or 0, and RedoLogLen counted that queue's entries as
// none (0, nil for 5 entries), against ErrCorrupt's contract that an
// unreadable value is never read as missing.
func TestRedoLogLenCorruptHead(t *testing.T) {
	e := newStagedEnv(t)
	q, _ := redoTwoQueues(t, e, 5)
	if got, err := e.inv.RedoLogLen(e.ctx, "n1"); err != nil || got != 10 {
		t.Fatalf("RedoLogLen = %d, %v; want 10", got, err)
	}
	if err := e.clients["n1"].HSet(e.ctx, RedoOffsetsKey, q, "x5").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := e.inv.RedoLogLen(e.ctx, "n1")
	wantCorruptHead(t, fmt.Sprintf("RedoLogLen (= %d)", got), err, q)
	_, err = e.inv.RedoUnacked(e.ctx, "n1")
	wantCorruptHead(t, "RedoUnacked", err, q)
}

// A redo-log trim on a node where a queue's head, or its acknowledged
// offset, is not an integer is ErrCorrupt naming the node and the field,
// and removes nothing, from that queue or any other. Found by a review:
// redo_write.lua's trim read both with tonumber(...) or 0, trimmed the
// queue's entries in its own key with no error, and left its segments
// (and, for an acknowledged offset, every acknowledged entry) untrimmed
// with nothing said.
func TestTrimRedoLogCorruptHead(t *testing.T) {
	for _, field := range []string{RedoOffsetsKey, keyRedoAcked} {
		t.Run(field, func(t *testing.T) {
			e := newStagedEnv(t)
			q1, q2 := redoTwoQueues(t, e, 5)
			c := e.clients["n1"]
			if err := c.HSet(e.ctx, field, q2, "x5").Err(); err != nil {
				t.Fatal(err)
			}
			step, err := e.inv.TrimRedoLogStep(e.ctx, "n1", 0, 100)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "node n1") || !strings.Contains(err.Error(), field+" "+q2) {
				t.Errorf("TrimRedoLogStep = %+v, %v; want ErrCorrupt naming node n1 and %s %s", step, err, field, q2)
			}
			removed, err := e.inv.TrimRedoLog(e.ctx, "n1", time.Millisecond, 100)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), field+" "+q2) {
				t.Errorf("TrimRedoLog = %d, %v; want ErrCorrupt naming %s %s", removed, err, field, q2)
			}
			// repaired, both queues hold their 5 entries, and the trim
			// removes every one (settled, acknowledged)
			if err := c.HSet(e.ctx, field, q2, "5").Err(); err != nil {
				t.Fatal(err)
			}
			if n, err := e.inv.RedoLogLen(e.ctx, "n1"); err != nil || n != 10 {
				t.Errorf("RedoLogLen after the refused trims = %d, %v; want 10: %s's and %s's 5 entries each", n, err, q1, q2)
			}
			if removed, err := e.inv.TrimRedoLog(e.ctx, "n1", 0, 100); err != nil || removed != 10 {
				t.Errorf("TrimRedoLog after the repair = %d, %v; want 10", removed, err)
			}
		})
	}
}
