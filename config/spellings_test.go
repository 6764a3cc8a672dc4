package config

import (
	"strings"
	"testing"
	"time"
)

// A bare 0 is a duration (the README's reference writes `hold_back: 0`,
// "0 = heartbeat + timeout"); any other bare number is refused, its unit
// a guess. A bare 0 used to be refused like the others.
func TestBareZeroIsADuration(t *testing.T) {
	base := "nodes: {n1: {addr: 127.0.0.1:7001}}\nservers: {inventory: {routes: {clothes: [n1]}}}\n"
	cfg, err := Parse([]byte(base+"health:\n  hold_back: 0\ninventory:\n  carry_wait: 0\n"), nil)
	if err != nil {
		t.Fatalf("`hold_back: 0` and `carry_wait: 0` refused:\n%v", err)
	}
	if cfg.Health.HoldBack != 0 {
		t.Fatalf("hold_back = %v, want 0", cfg.Health.HoldBack)
	}
	_, err = Parse([]byte(base+"health:\n  hold_back: 5\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "health.hold_back") || !strings.Contains(err.Error(), "with a unit") {
		t.Fatalf("`hold_back: 5` = %v, want a problem naming health.hold_back and asking for a unit", err)
	}
	if cfg, err := Parse([]byte(base+"health:\n  hold_back: 2s\n"), nil); err != nil || cfg.Health.HoldBack != 2*time.Second {
		t.Fatalf("`hold_back: 2s` = %v, %v", cfg.Health.HoldBack, err)
	}
}

// The key=value DSN is read by libpq's rules (pgx's): spaces around '=',
// single-quoted values with spaces, backslash escapes. RedactDSN used to
// split on spaces, so `password = x` and `password='a b'` leaked, and
// validation refused a valid quoted value.
func TestKeyValueDSNForms(t *testing.T) {
	for dsn, want := range map[string]string{
		"host=db user=shardis password = hunter2 dbname=shardis":     "host=db user=shardis password = <redacted> dbname=shardis",
		"host=db user=shardis password='hunter2 x' dbname=shardis":   "host=db user=shardis password=<redacted> dbname=shardis",
		`host=db password='it\'s hunter2' dbname=shardis`:            "host=db password=<redacted> dbname=shardis",
		`host=db password=hunter2\ x dbname=shardis`:                 "host=db password=<redacted> dbname=shardis",
		"host=db user=shardis dbname=shardis":                        "host=db user=shardis dbname=shardis",
		"  password=hunter2  ":                                       "  password=<redacted>  ",
		"host=db password='unterminated hunter2":                     "<unparsable DSN redacted>",
		"postgres://shardis:hunter2@db:5432/shardis?sslmode=disable": "postgres://shardis:<redacted>@db:5432/shardis?sslmode=disable",
	} {
		if got := RedactDSN(dsn); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", dsn, got, want)
		}
	}
	base := "nodes: {n1: {addr: 127.0.0.1:7001}}\nservers: {inventory: {routes: {clothes: [n1]}}}\n"
	for _, dsn := range []string{
		"host=db user=shardis password='two words' dbname=shardis",
		"host = db user=shardis password = x dbname=shardis",
	} {
		if _, err := Parse([]byte(base), []string{"SHARDIS_SYNC__DSN=" + dsn}); err != nil {
			t.Errorf("valid key=value DSN %q refused:\n%v", dsn, err)
		}
	}
	for _, dsn := range []string{"host=db password", "host db", "host=db password='open"} {
		_, err := Parse([]byte(base), []string{"SHARDIS_SYNC__DSN=" + dsn})
		if err == nil || !strings.Contains(err.Error(), "sync.dsn") {
			t.Errorf("malformed DSN %q = %v, want a problem naming sync.dsn", dsn, err)
		}
		if err != nil && strings.Contains(err.Error(), "open") {
			t.Errorf("the problem with DSN %q shows it:\n%v", dsn, err)
		}
	}
}

// A DSN given to the sync section itself (SHARDIS_SYNC=… or `sync: …` in
// the file) is a problem that does not print it: the problems printed it
// whole, password and all.
func TestMisplacedDSNDoesNotLeak(t *testing.T) {
	base := "nodes: {n1: {addr: 127.0.0.1:7001}}\nservers: {inventory: {routes: {clothes: [n1]}}}\n"
	dsn := "postgres://shardis:hunter2@db:5432/shardis"
	for name, in := range map[string]struct {
		yml string
		env []string
	}{
		"env SHARDIS_SYNC": {base, []string{"SHARDIS_SYNC=" + dsn}},
		"file sync: <dsn>": {base + "sync: " + dsn + "\n", nil},
	} {
		_, err := Parse([]byte(in.yml), in.env)
		if err == nil || !strings.Contains(err.Error(), "sync") {
			t.Errorf("%s: %v, want a problem naming sync", name, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the problem prints the DSN's password:\n%v", name, err)
		}
	}
}

// "two nodes may not share an address" (README) holds for two spellings
// of one server: a host name in another case, a port with leading zeros.
// The check compared the strings.
func TestDuplicateAddressSpellings(t *testing.T) {
	for _, pair := range [][2]string{
		{"redis-1.internal:6379", "REDIS-1.internal:6379"},
		{"127.0.0.1:7001", "127.0.0.1:07001"},
		{"[::1]:7001", "[::1]:7001"},
	} {
		yml := "nodes:\n  n1: {addr: '" + pair[0] + "'}\n  n2: {addr: '" + pair[1] + "'}\nservers: {inventory: {routes: {clothes: [n1, n2]}}}\n"
		_, err := Parse([]byte(yml), nil)
		if err == nil || !strings.Contains(err.Error(), "same address as node n1") {
			t.Errorf("nodes at %q and %q (the same server): %v, want a problem naming node n1", pair[0], pair[1], err)
		}
	}
}
