package rollback

import (
	"log/slog"
	"testing"
	"time"
)

// TestSettingsFilled pins the reconciler's defaults, the stuck-part
// backoff included (it moved here from package inventory).
func TestSettingsFilled(t *testing.T) {
	got := Settings{}.filled()
	want := Settings{Interval: time.Second, Batch: 200, Nodes: 4, Workers: 16, Lease: 3 * time.Second,
		TrimEvery: 30, StuckRetry: 5 * time.Second, StuckRetryMax: 5 * time.Minute, Logger: slog.Default()}
	if got != want {
		t.Errorf("Settings{}.filled() = %+v, want %+v", got, want)
	}
	for _, c := range []struct {
		in, out Settings
	}{
		// a cap below the first wait is raised to it
		{Settings{StuckRetry: time.Minute, StuckRetryMax: time.Second}, Settings{StuckRetry: time.Minute, StuckRetryMax: time.Minute}},
		// negative is the default
		{Settings{StuckRetry: -1, StuckRetryMax: -1}, Settings{StuckRetry: DefaultStuckRetry, StuckRetryMax: DefaultStuckRetryMax}},
		// under a millisecond is a millisecond (the node keeps ms)
		{Settings{StuckRetry: time.Microsecond, StuckRetryMax: time.Microsecond}, Settings{StuckRetry: time.Millisecond, StuckRetryMax: time.Millisecond}},
		{Settings{StuckRetry: 2 * time.Second}, Settings{StuckRetry: 2 * time.Second, StuckRetryMax: DefaultStuckRetryMax}},
	} {
		f := c.in.filled()
		if f.StuckRetry != c.out.StuckRetry || f.StuckRetryMax != c.out.StuckRetryMax {
			t.Errorf("%v/%v filled: %v/%v, want %v/%v", c.in.StuckRetry, c.in.StuckRetryMax, f.StuckRetry, f.StuckRetryMax, c.out.StuckRetry, c.out.StuckRetryMax)
		}
	}
}
