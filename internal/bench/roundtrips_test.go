package bench

import "testing"

func TestSequentialRoundTrips(t *testing.T) {
	iv := func(pairs ...int64) []Interval {
		out := make([]Interval, 0, len(pairs)/2)
		for i := 0; i+1 < len(pairs); i += 2 {
			out = append(out, Interval{Start: pairs[i], End: pairs[i+1]})
		}
		return out
	}
	for _, c := range []struct {
		name string
		in   []Interval
		want int
	}{
		{"none", nil, 0},
		{"one script", iv(0, 100), 1},
		{"three in a row", iv(0, 10, 10, 20, 25, 40), 3},
		{"given out of order", iv(25, 40, 0, 10, 12, 20), 3},
		{"three in parallel", iv(0, 100, 5, 90, 10, 120), 1},
		// begin → three item scripts in parallel → commit: the general path.
		{"general path", iv(0, 50, 60, 150, 62, 170, 65, 140, 180, 220), 3},
		// The same with the third item's script sent after the first's
		// reply (a late goroutine): four sequential round trips.
		{"general path, late item", iv(0, 50, 60, 150, 62, 170, 155, 200, 210, 250), 4},
		// A long interval overlapping a chain of short ones: the chain counts.
		{"long beside short", iv(0, 1000, 10, 20, 30, 40, 50, 60), 3},
		{"touching ends are sequential", iv(0, 10, 10, 20), 2},
		{"equal intervals overlap", iv(5, 9, 5, 9), 1},
	} {
		in := append([]Interval(nil), c.in...)
		if got := SequentialRoundTrips(c.in); got != c.want {
			t.Errorf("%s: SequentialRoundTrips(%v) = %d, want %d", c.name, c.in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Errorf("%s: input modified", c.name)
			}
		}
	}
}

func TestOutageShare(t *testing.T) {
	if got := (&OutageResult{}).Share(); got != 0 {
		t.Errorf("no orders: share %v, want 0", got)
	}
	if got := (&OutageResult{Minted: OutageOrders{Started: 4, OK: 3}, Own: OutageOrders{Started: 4, OK: 1}}).Share(); got != 0.75 {
		t.Errorf("3 of 4: share %v, want 0.75", got)
	}
}
