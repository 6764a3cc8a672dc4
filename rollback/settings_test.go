package rollback

import (
	"log/slog"
	"math"
	"testing"
	"time"
)

// TestSettingsFilled pins the reconciler's defaults, the stuck-part
// backoff included (it moved here from package inventory).
func TestSettingsFilled(t *testing.T) {
	got := Settings{}.filled()
	want := Settings{Interval: time.Second, Batch: 200, Nodes: 4, Workers: 16, Lease: 3 * time.Second,
		TrimEvery: 30, TrimCalls: 50, StuckRetry: 5 * time.Second, StuckRetryMax: 5 * time.Minute, Logger: slog.Default()}
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

// TestSettingsFilledInRange: filled() brings every field out of range
// into the range of what a pass hands it to, as each field's doc says. A
// Batch above 10000 used to reach RetryDueStuck (which refuses it) and a
// Lease or TrimAge under 1ms went to the node as 0 ms (PX 0, refused; a
// trim age 0, "never"); a huge Interval made the default Lease (3 ×
// Interval) overflow.
func TestSettingsFilledInRange(t *testing.T) {
	maxDur := time.Duration(math.MaxInt64)
	for _, c := range []struct {
		name  string
		in    Settings
		field func(Settings) any
		want  any
	}{
		{"Batch above 10000", Settings{Batch: 20000}, func(s Settings) any { return s.Batch }, 10000},
		{"Batch 10000", Settings{Batch: 10000}, func(s Settings) any { return s.Batch }, 10000},
		{"Batch negative", Settings{Batch: -1}, func(s Settings) any { return s.Batch }, 200},
		{"Lease under 1ms", Settings{Lease: 500 * time.Microsecond}, func(s Settings) any { return s.Lease }, time.Millisecond},
		{"Lease 1ns", Settings{Lease: 1}, func(s Settings) any { return s.Lease }, time.Millisecond},
		{"Lease 2ms", Settings{Lease: 2 * time.Millisecond}, func(s Settings) any { return s.Lease }, 2 * time.Millisecond},
		{"Lease default, short Interval", Settings{Interval: time.Millisecond}, func(s Settings) any { return s.Lease }, time.Second},
		{"Lease default, Interval 1m", Settings{Interval: time.Minute}, func(s Settings) any { return s.Lease }, 3 * time.Minute},
		{"Lease default, Interval that overflows ×3", Settings{Interval: maxDur / 2}, func(s Settings) any { return s.Lease }, maxDur},
		{"Lease default, largest Interval", Settings{Interval: maxDur}, func(s Settings) any { return s.Lease }, maxDur},
		{"TrimAge under 1ms", Settings{TrimAge: 500 * time.Microsecond}, func(s Settings) any { return s.TrimAge }, time.Millisecond},
		{"TrimAge 0", Settings{}, func(s Settings) any { return s.TrimAge }, time.Duration(0)},
		{"TrimAge negative", Settings{TrimAge: -time.Second}, func(s Settings) any { return s.TrimAge }, time.Duration(0)},
	} {
		if got := c.field(c.in.filled()); got != c.want {
			t.Errorf("%s: filled %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSettingsWithinRetention: the stuck-part backoff is capped at a
// quarter of the inventory's retention (StuckRetry with it), so a part
// set aside is retried, and its order's record relied on again, within
// the retention (stuck_retention_test.go shows why).
func TestSettingsWithinRetention(t *testing.T) {
	for _, c := range []struct {
		in        Settings
		retention time.Duration
		retry     time.Duration
		most      time.Duration
	}{
		{Settings{}, 7 * 24 * time.Hour, DefaultStuckRetry, DefaultStuckRetryMax},
		{Settings{}, 8 * time.Minute, DefaultStuckRetry, 2 * time.Minute},
		{Settings{StuckRetry: time.Minute, StuckRetryMax: time.Hour}, 2 * time.Minute, 30 * time.Second, 30 * time.Second},
		{Settings{}, time.Millisecond, time.Millisecond, time.Millisecond},
	} {
		f := c.in.filled().within(c.retention)
		if f.StuckRetry != c.retry || f.StuckRetryMax != c.most {
			t.Errorf("%+v within %v: StuckRetry %v, StuckRetryMax %v; want %v, %v", c.in, c.retention, f.StuckRetry,
				f.StuckRetryMax, c.retry, c.most)
		}
	}
}
