package health

import (
	"testing"
	"time"
)

// New owns its backoff list: a caller that reuses its slice after New
// changes nothing (before, the scheduler read the caller's slice: a data
// race, and delays changed under it), and an entry of zero or less takes
// DefaultBackoff's at its place instead of probing a DOWN target in a
// tight loop.
func TestBackoffIsOwnedAndPositive(t *testing.T) {
	b := []time.Duration{0, -time.Second, 2 * time.Second, 0, 0}
	s := New(nil, Settings{Backoff: b})
	defer s.Close()
	b[2] = time.Millisecond
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond}
	for i, w := range want {
		d := s.backoff(i + 1)
		if d < w*9/10 || d > w*11/10 {
			t.Errorf("delay after %d failures %v, want %v ±10%%", i+1, d, w)
		}
	}
}
