package redisproc

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestSkewClockMovesTheServersClock: a server started with SkewEnv reads
// TIME as far off the machine's clock as its file says, from the file's
// next rewrite on, and a missing file means no skew; key expiry follows
// the same clock (a key set with a TTL of 2 s is gone after a 3 s step).
func TestSkewClockMovesTheServersClock(t *testing.T) {
	lib, err := BuildSkewClock(t.TempDir())
	if errors.Is(err, ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "skew")
	s := start(t, Options{Env: SkewEnv(lib, file)})
	c := client(t, s)
	ctx := context.Background()
	off := func() time.Duration {
		t.Helper()
		at, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return time.Until(at)
	}
	check := func(want time.Duration) {
		t.Helper()
		if d := off(); d < want-100*time.Millisecond || d > want+100*time.Millisecond {
			t.Errorf("TIME is %v off the machine's clock, want %v", d.Round(time.Millisecond), want)
		}
	}
	check(0) // no file yet
	if err := SetSkew(file, -1500); err != nil {
		t.Fatal(err)
	}
	check(-1500 * time.Millisecond)
	if err := c.Set(ctx, "k", "v", 2*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := SetSkew(file, 1500); err != nil {
		t.Fatal(err)
	}
	check(1500 * time.Millisecond)
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("a key with a TTL of 2 s after a 3 s step of the clock: EXISTS = %d, %v; want 0", n, err)
	}
}
