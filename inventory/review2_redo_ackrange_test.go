package inventory

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestReview2AckPastHeadNamesTheHead: AckRedoLog's doc (and the README,
// "AckRedoLog refuses (invalid_argument) an offset past the queue's last
// offset handed out, naming both"), and AckRedoBatch's: an offset past
// the head is refused with ErrInvalid naming both. Near 2^53 (offsets the
// API accepts up to 2^53) the head was named as Lua prints a number,
// %.14g: "9.007199254741e+15", neither the head nor an integer.
func TestReview2AckPastHeadNamesTheHead(t *testing.T) {
	e := newStagedEnv(t)
	c := e.clients["n1"]
	q := 5
	xk := RedoLogKey(q)
	head := int64(1<<53) - 10
	if err := c.HSet(e.ctx, RedoOffsetsKey, xk, head, xk+RedoFirstSuffix, head-2).Err(); err != nil {
		t.Fatal(err)
	}
	for off := head - 2; off <= head; off++ {
		if err := c.ZAdd(e.ctx, redoSegmentKey(xk, off), redis.Z{Score: float64(off), Member: "o" + strconv.FormatInt(off, 10) + "|t|0"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	past := head + 3
	inc := c.HGet(e.ctx, stampKey, "incarnation").Val()
	_, single := e.inv.AckRedoLog(e.ctx, "n1", q, past)
	_, batch := e.inv.AckRedoBatch(e.ctx, "n1", inc, []RedoCursor{{Queue: q, After: past}})
	for name, err := range map[string]error{"AckRedoLog": single, "AckRedoBatch": batch} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s(%d) past head %d: %v; want ErrInvalid", name, past, head, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, strconv.FormatInt(past, 10)) || !strings.Contains(msg, strconv.FormatInt(head, 10)) {
			t.Errorf("%s(%d) past head %d: %q; want both offsets named", name, past, head, msg)
		}
	}
	// the acknowledgement at the head itself goes through, exactly
	if a, err := e.inv.AckRedoLog(e.ctx, "n1", q, head); err != nil || a != head {
		t.Fatalf("AckRedoLog(head %d) = %d, %v", head, a, err)
	}
	if v := c.HGet(e.ctx, keyRedoAcked, xk).Val(); v != strconv.FormatInt(head, 10) {
		t.Errorf("acknowledged offset stored as %q, want %d", v, head)
	}
}
