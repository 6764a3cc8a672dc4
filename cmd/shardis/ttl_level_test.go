package main

import (
	"log/slog"
	"strings"
	"testing"
)

// reserve refuses a --ttl over the largest TTL the service takes (2^31-1
// seconds) naming that bound, before calling the service. Found by a
// review: it said "want whole seconds, not negative" of a positive whole
// number of seconds, which did not say what was wrong.
func TestReserveTTLOverMaxNamesTheBound(t *testing.T) {
	t.Setenv(tokenEnv, "")
	code, _, errOut := cli(t, "reserve", "--order", "o", "--ttl", "600000h", "c:s:1")
	if code != 2 || !strings.Contains(errOut, "596523h14m7s") || !strings.Contains(errOut, "2^31-1") {
		t.Fatalf("reserve --ttl 600000h: exit %d, stderr %q; want 2 naming the bound 596523h14m7s (2^31-1 s)", code, errOut)
	}
}

// --log-level takes debug, info, warn or error, in any case, as its help
// and error say; anything else, slog's offsets (info+2) too, is a usage
// mistake naming it. Found by a review: parseLevel took whatever
// slog.Level.UnmarshalText takes, INFO+2 and the like, while its doc said
// only the four names.
func TestLogLevelTakesTheFourNamesOnly(t *testing.T) {
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "Warn": slog.LevelWarn, "error": slog.LevelError} {
		if got, err := parseLevel(in); err != nil || got != want {
			t.Errorf("parseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"info+2", "ERROR-4", "", "trace"} {
		code, _, errOut := cli(t, "serve", "--config", "/nonexistent.yaml", "--log-level", in)
		if code != 2 || !strings.Contains(errOut, `--log-level "`+in+`"`) {
			t.Errorf("serve --log-level %q: exit %d, stderr %q; want 2 naming it", in, code, errOut)
		}
	}
}
