package inventory

import (
	"errors"
	"strings"
	"testing"
)

// AckRedoLogAt with the part the consumer landed at its offset refuses,
// acknowledging nothing, when the entry there now holds another part (the
// queue went back under the consumer and handed the offset out again):
// ErrRewound, as AckRedoBatch. The part landed, no part id, or an entry
// gone since acknowledge; a negative offset is ErrInvalid.
func TestAckRedoLogAtChecksThePartLanded(t *testing.T) {
	e := newStagedEnv(t)
	rs := reserveOneEach(t, e, "ak-a", "ak-b")
	nn, q := rs[0].Node, invQueue(t, rs[0].RedoLog)
	p, err := e.inv.ReadRedoPage(e.ctx, nn, q, 0, 10)
	if err != nil || len(p.Entries) != 2 {
		t.Fatalf("ReadRedoPage = %+v, %v; want 2 entries", p, err)
	}
	first, second := p.Entries[0], p.Entries[1]
	if a, err := e.inv.AckRedoLogAt(e.ctx, nn, p.Incarnation, RedoCursor{Queue: q, After: first.Offset, PartID: first.PartID}); err != nil || a != first.Offset {
		t.Fatalf("ack of the part landed = %d, %v; want %d", a, err, first.Offset)
	}
	handOutAgain(t, e, nn, rs[0].RedoLog, second, "other|part")
	_, err = e.inv.AckRedoLogAt(e.ctx, nn, p.Incarnation, RedoCursor{Queue: q, After: second.Offset, PartID: second.PartID})
	if !errors.Is(err, ErrRewound) || !strings.Contains(err.Error(), "other|part") {
		t.Fatalf("ack with another part at the offset: %v; want ErrRewound naming it", err)
	}
	if n, err := e.inv.RedoUnacked(e.ctx, nn); err != nil || n < 1 {
		t.Fatalf("RedoUnacked after a refused ack = %d, %v; want the second entry still unacknowledged", n, err)
	}
	if a, err := e.inv.AckRedoLogAt(e.ctx, nn, p.Incarnation, RedoCursor{Queue: q, After: second.Offset}); err != nil || a != second.Offset {
		t.Fatalf("ack without a part id = %d, %v; want %d (unchecked)", a, err, second.Offset)
	}
	if _, err := e.inv.AckRedoLogAt(e.ctx, nn, "", RedoCursor{Queue: q, After: -1}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "offset -1") {
		t.Fatalf("ack of offset -1: %v; want ErrInvalid naming it", err)
	}
}
