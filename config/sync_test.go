package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// The sync section: each bad value is one problem at its key, and a DSN
// never reaches an error message.
func TestParseSyncProblems(t *testing.T) {
	tests := []struct {
		name, yaml, path, msg string
		bad                   string // must appear in the problem's value; "" = value is nil
	}{
		{"batch zero", "sync: {batch: 0}", "sync.batch", "1..10000", "0"},
		{"batch too large", "sync: {batch: 10001}", "sync.batch", "1..10000", "10001"},
		{"poll interval zero", "sync: {poll_interval: 0s}", "sync.poll_interval", "positive", "0s"},
		{"settle interval negative", "sync: {settle_interval: -1s}", "sync.settle_interval", "positive", "-1s"},
		{"retry backoff zero", "sync: {retry_backoff: 0s}", "sync.retry_backoff", "positive", "0s"},
		{"decide wait negative", "sync: {decide_wait: -1s}", "sync.decide_wait", "0s..1m", "-1s"},
		{"decide wait too long", "sync: {decide_wait: 2m}", "sync.decide_wait", "0s..1m", "2m0s"},
		{"listen without port", "sync: {listen: localhost}", "sync.listen", "host:port", "localhost"},
		{"unknown key", "sync: {dns: x}", "sync.dns", "unknown key", ""},
		{"DSN of another scheme", "sync: {dsn: 'mysql://root:hunter2@h/db'}", "sync.dsn", "postgres://", "<redacted>"},
		{"DSN URL without host", "sync: {dsn: 'postgres:///shardis'}", "sync.dsn", "no host", "<redacted>"},
		{"DSN words without =", "sync: {dsn: 'host=h hunter2'}", "sync.dsn", "key=value", "<redacted>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(minimalYAML+tt.yaml), nil)
			ps := problemsOf(t, err)
			if len(ps) != 1 {
				t.Fatalf("got %d problems, want 1 at %s:\n%v", len(ps), tt.path, err)
			}
			p := ps[0]
			if p.Path != tt.path || !strings.Contains(p.Msg, tt.msg) {
				t.Errorf("problem %q, want path %s with %q", p, tt.path, tt.msg)
			}
			if tt.bad == "" && p.Value != nil {
				t.Errorf("%s: value %v, want nil", p.Path, p.Value)
			}
			if tt.bad != "" && !strings.Contains(valueString(p.Value), tt.bad) {
				t.Errorf("%s: value %v, want it to hold %q", p.Path, p.Value, tt.bad)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the DSN's password: %v", err)
			}
		})
	}
}

// Good DSNs in both forms load; sync.listen "" turns the metrics
// listener off.
func TestParseSyncAccepts(t *testing.T) {
	for _, dsn := range []string{
		"postgres://shardis:pw@127.0.0.1:5432/shardis?sslmode=disable",
		"postgresql://shardis@db/shardis",
		"postgres:///shardis?host=/var/run/postgresql",
		"host=127.0.0.1 port=5432 user=shardis dbname=shardis sslmode=disable",
	} {
		cfg, err := Parse([]byte(minimalYAML+"sync: {listen: '', dsn: '"+dsn+"'}"), nil)
		if err != nil {
			t.Errorf("DSN %q: %v", dsn, err)
			continue
		}
		if cfg.Sync.DSN != dsn || cfg.Sync.Listen != "" {
			t.Errorf("DSN %q: got %+v", dsn, cfg.Sync)
		}
	}
}

// ValidateSync requires the DSN; Validate does not (the service runs
// without one).
func TestValidateSync(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate without sync.dsn: %v", err)
	}
	ps := problemsOf(t, c.ValidateSync())
	if got := paths(ps); !reflect.DeepEqual(got, []string{"sync.dsn"}) {
		t.Fatalf("ValidateSync without a DSN: %v, want one problem at sync.dsn", ps)
	}
	if !strings.Contains(ps[0].Msg, "SHARDIS_SYNC__DSN") {
		t.Errorf("the problem %q does not name the variable", ps[0])
	}
	c.Sync.DSN = "postgres://shardis@127.0.0.1/shardis"
	if err := c.ValidateSync(); err != nil {
		t.Fatalf("ValidateSync with a DSN: %v", err)
	}
	c.Inventory.RedoQueues = 0
	if got := paths(problemsOf(t, c.ValidateSync())); !reflect.DeepEqual(got, []string{"inventory.redo_queues"}) {
		t.Errorf("ValidateSync checks the rest too: got %v", got)
	}
}

// The DSN's password never shows in %v of the settings nor in RedactDSN.
func TestRedactDSN(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"postgres://shardis:hunter2@h:5432/db?sslmode=disable", "postgres://shardis:<redacted>@h:5432/db?sslmode=disable"},
		{"postgres://shardis@h/db", "postgres://shardis@h/db"},
		{"postgres://h/db?password=hunter2&user=u", "postgres://h/db?password=redacted&user=u"},
		{"host=h password=hunter2 user=u", "host=h password=<redacted> user=u"},
	}
	for _, tt := range tests {
		if got := RedactDSN(tt.in); got != tt.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	s := Sync{DSN: "postgres://u:hunter2@h/db"}
	for _, f := range []string{"%v", "%+v", "%s"} {
		if out := sprintf(f, s); strings.Contains(out, "hunter2") {
			t.Errorf("%s of Sync shows the password: %s", f, out)
		}
	}
}

func sprintf(format string, v any) string { return fmt.Sprintf(format, v) }
