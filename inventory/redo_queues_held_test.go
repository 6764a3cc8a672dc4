package inventory

import (
	"errors"
	"strings"
	"testing"
)

// TestRedoQueuesOfCountsEveryQueueHeld checks RedoQueuesHeld's count of
// the offsets hash's fields: one more than the highest queue with a head
// (the first-offset fields and the pad are no queues), whatever
// inventory.redo_queues is now, and ErrCorrupt naming a field that is no
// queue. Found by a review: nothing read which queues a node holds, so a
// sync configured with fewer queues than the node was written with never
// landed the others.
func TestRedoQueuesOfCountsEveryQueueHeld(t *testing.T) {
	for _, c := range []struct {
		fields []string
		want   int
	}{
		{nil, 0},
		{[]string{RedoOffsetsPad}, 0},
		{[]string{RedoLogKey(0), RedoLogKey(0) + RedoFirstSuffix, RedoOffsetsPad}, 1},
		{[]string{RedoLogKey(3), RedoLogKey(7), RedoLogKey(7) + RedoFirstSuffix}, 8},
		{[]string{RedoLogKey(MaxRedoQueues - 1)}, MaxRedoQueues},
	} {
		got, err := redoQueuesOf("n1", c.fields)
		if err != nil || got != c.want {
			t.Errorf("redoQueuesOf(%q) = %d, %v; want %d", c.fields, got, err, c.want)
		}
	}
	for _, f := range []string{RedoLogKey(MaxRedoQueues), "inv:redo:x", "inv:redo:-1", "inv:redo:07", "other"} {
		_, err := redoQueuesOf("n1", []string{RedoLogKey(1), f})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"`+f+`"`) || !strings.Contains(err.Error(), "node n1") {
			t.Errorf("redoQueuesOf with field %q: %v; want ErrCorrupt naming the node and the field", f, err)
		}
	}
}
