package drill

import (
	"context"
	"testing"
)

// A node shown UP on the promoted master counts whether the sentinels
// name it by IP or by a host name that resolves to it; another server, or
// an address without "(master …)", does not.
func TestOnPromoted(t *testing.T) {
	ctx := context.Background()
	shown := "sentinel:shard-a (master 127.0.0.1:26312)"
	for _, c := range []struct {
		promoted string
		want     bool
	}{
		{"127.0.0.1:26312", true},
		{"localhost:26312", true},
		{"localhost:26313", false},
		{"127.0.0.2:26312", false},
	} {
		if got := OnPromoted(ctx, shown, c.promoted); got != c.want {
			t.Errorf("OnPromoted(%q, %q) = %v, want %v", shown, c.promoted, got, c.want)
		}
	}
	if OnPromoted(ctx, "127.0.0.1:26312", "127.0.0.1:26312") {
		t.Error("an address without (master …) counted as on the promoted master")
	}
}
