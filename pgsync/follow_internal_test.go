package pgsync

import (
	"testing"
	"time"
)

// A follower's second looks come due in the order they were read, are
// dropped once looked at, and are bounded: past maxAgain ids the oldest
// batches go and a walk is due instead.
func TestFollowerSecondLooks(t *testing.T) {
	var f follower
	t0 := time.Unix(1000, 0)
	f.looked(0, []string{"a", "b"}, t0.Add(time.Second))
	f.looked(0, []string{"c"}, t0.Add(2*time.Second))
	if got := f.dueAt(t0); got != 0 {
		t.Fatalf("due before any: %d", got)
	}
	if got := f.dueAt(t0.Add(time.Second)); got != 1 {
		t.Fatalf("due at the first's time: %d, want 1", got)
	}
	f.looked(1, nil, t0.Add(3*time.Second))
	if f.againN != 1 || len(f.again) != 1 || f.again[0].ids[0] != "c" || f.walkDue {
		t.Fatalf("after looking at the first: %+v", f)
	}
	big := make([]string, maxAgain)
	f.looked(0, big, t0.Add(4*time.Second))
	if !f.walkDue || f.againN != maxAgain || len(f.again) != 1 {
		t.Fatalf("past maxAgain: walkDue %v, %d ids in %d batches; want a walk due and the newest batch kept", f.walkDue, f.againN, len(f.again))
	}
}
