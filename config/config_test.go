package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// exampleYAML is the documented example configuration.
const exampleYAML = `
service:
  listen: 127.0.0.1:7400
nodes:
  n1: {addr: 127.0.0.1:7001, password: "", username: "", db: 0, weight: 1}
  n2: {addr: 127.0.0.1:7002}
servers:
  inventory:
    on_node_down: fail
    routes:
      clothes: [n1, n2]
health:
  heartbeat: 500ms
  timeout: 300ms
  backoff: [500ms, 1s, 1.5s]
breaker:
  failures: 5
  open_timeout: 1s
`

// minimalYAML is the smallest valid configuration: everything else defaults.
const minimalYAML = `
nodes:
  n1: {addr: 127.0.0.1:7001}
  n2: {addr: 127.0.0.1:7002}
servers:
  inventory:
    routes:
      clothes: [n1, n2]
`

// Valid building blocks for the table tests below.
const (
	nodesOK = `
nodes:
  n1: {addr: 127.0.0.1:7001}
  n2: {addr: 127.0.0.1:7002}
`
	serversOK = `
servers:
  inventory:
    routes:
      clothes: [n1, n2]
`
)

// exampleConfig is the Config the documented example must resolve to,
// written out in full so that a changed default is caught.
func exampleConfig() Config {
	return Config{
		Service: Service{Listen: "127.0.0.1:7400", MaxBodyBytes: 1 << 20, ShutdownTimeout: 10 * time.Second},
		Nodes: map[string]Node{
			"n1": {Addr: "127.0.0.1:7001", Weight: 1},
			"n2": {Addr: "127.0.0.1:7002", Weight: 1},
		},
		Servers: map[string]Server{
			"inventory": {
				OnNodeDown: "fail",
				Routes:     map[string][]string{"clothes": {"n1", "n2"}},
			},
		},
		Health: Health{
			Heartbeat: 500 * time.Millisecond,
			Timeout:   300 * time.Millisecond,
			Backoff: []time.Duration{500 * time.Millisecond, time.Second,
				1500 * time.Millisecond},
		},
		Breaker:  Breaker{Failures: 5, OpenTimeout: time.Second},
		Client:   Client{CommandTimeout: time.Second},
		Pipeline: Pipeline{Enabled: true, MaxBatch: 200, From: 6, BusyFrom: 12, BusyMaxBatch: 16, BusyFlushDelay: 200 * time.Microsecond},
		Inventory: Inventory{
			Server:            "inventory",
			ReservationTTL:    10 * time.Minute,
			MaxReservationTTL: time.Hour,
			ReconcileInterval: time.Second,
			RedoQueues:        50,
			Retention:         168 * time.Hour,
			RedoMaxAge:        0,
			AttemptLease:      10 * time.Second,
			Durability:        DurabilityNone,
			DurabilityTimeout: 500 * time.Millisecond,
			GroupCommit:       32,
			CarryWait:         2 * time.Millisecond,
		},
		Sync: Sync{Listen: "127.0.0.1:7401", Batch: 1000, PollInterval: 100 * time.Millisecond,
			SettleInterval: time.Second, SettleWalkInterval: time.Minute, DecideWait: 250 * time.Millisecond, RetryBackoff: time.Second},
	}
}

// problemsOf asserts err is a Problems list and returns it.
func problemsOf(t *testing.T, err error) Problems {
	t.Helper()
	if err == nil {
		t.Fatal("got nil error, want Problems")
	}
	ps, ok := IsProblems(err)
	if !ok {
		t.Fatalf("got error %T %q, want Problems", err, err)
	}
	if len(ps) == 0 {
		t.Fatalf("got empty Problems returned as error %q", err)
	}
	return ps
}

func paths(ps Problems) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Path
	}
	sort.Strings(out)
	return out
}

func findProblem(ps Problems, path string) (Problem, bool) {
	for _, p := range ps {
		if p.Path == path {
			return p, true
		}
	}
	return Problem{}, false
}

func valueString(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func TestParseExample(t *testing.T) {
	tests := []struct {
		name string
		yaml string
	}{
		{"documented example", exampleYAML},
		// Every field the example spells out is a default: leaving them out
		// must give the same Config.
		{"minimal with defaults", minimalYAML},
		{"explicit nulls keep defaults", minimalYAML + `
service:
  listen:
health:
  heartbeat: ~
breaker:
inventory:
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.yaml), nil)
			if err != nil {
				t.Fatalf("Parse: got error %v, want nil", err)
			}
			if want := exampleConfig(); !reflect.DeepEqual(*got, want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", *got, want)
			}
		})
	}
}

func TestParseOverridesDefaults(t *testing.T) {
	got, err := Parse([]byte(`
service: {listen: "0.0.0.0:9000"}
nodes:
  n1: {addr: "[::1]:7001", username: app, password: "123", db: 3, weight: 100}
servers:
  order:
    on_node_down: next
    routes: {eu: [n1], us: [n1]}
health: {heartbeat: 1s, timeout: 2s, backoff: [3s]}
breaker: {failures: 1, open_timeout: 4s}
pipeline: {enabled: false, max_batch: 50, from: 3, busy_from: 16, busy_max_batch: 24, busy_flush_delay: 250us}
client: {command_timeout: 3s, pool_size: 7}
inventory:
  server: order
  reservation_ttl: 5m
  max_reservation_ttl: 5m
  reconcile_interval: 250ms
  redo_queues: 1024
  retention: 6m
sync:
  dsn: postgres://shardis@db.internal:5432/shardis?sslmode=require
  listen: ""
  batch: 10000
  poll_interval: 20ms
  settle_interval: 250ms
  settle_walk_interval: 30s
  decide_wait: 0s
  retry_backoff: 3s
`), nil)
	if err != nil {
		t.Fatalf("Parse: got error %v, want nil", err)
	}
	want := Config{
		Service: Service{Listen: "0.0.0.0:9000", MaxBodyBytes: 1 << 20, ShutdownTimeout: 10 * time.Second},
		Nodes: map[string]Node{
			"n1": {Addr: "[::1]:7001", Username: "app", Password: "123", DB: 3, Weight: 100},
		},
		Servers: map[string]Server{
			"order": {OnNodeDown: "next", Routes: map[string][]string{"eu": {"n1"}, "us": {"n1"}}},
		},
		Health:   Health{Heartbeat: time.Second, Timeout: 2 * time.Second, Backoff: []time.Duration{3 * time.Second}},
		Breaker:  Breaker{Failures: 1, OpenTimeout: 4 * time.Second},
		Client:   Client{CommandTimeout: 3 * time.Second, PoolSize: 7},
		Pipeline: Pipeline{Enabled: false, MaxBatch: 50, From: 3, BusyFrom: 16, BusyMaxBatch: 24, BusyFlushDelay: 250 * time.Microsecond},
		Inventory: Inventory{
			Server:            "order",
			ReservationTTL:    5 * time.Minute,
			MaxReservationTTL: 5 * time.Minute,
			ReconcileInterval: 250 * time.Millisecond,
			RedoQueues:        1024,
			Retention:         6 * time.Minute,
			RedoMaxAge:        0,
			AttemptLease:      10 * time.Second,
			Durability:        DurabilityNone,
			DurabilityTimeout: 500 * time.Millisecond,
			GroupCommit:       32,
			CarryWait:         2 * time.Millisecond,
		},
		Sync: Sync{DSN: "postgres://shardis@db.internal:5432/shardis?sslmode=require", Listen: "", Batch: 10000,
			PollInterval: 20 * time.Millisecond, SettleInterval: 250 * time.Millisecond, SettleWalkInterval: 30 * time.Second,
			DecideWait: 0, RetryBackoff: 3 * time.Second},
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", *got, want)
	}
}

func TestParseDoesNotShareDefaults(t *testing.T) {
	a, err := Parse([]byte(minimalYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Health.Backoff[0] = time.Hour
	a.Nodes["n1"] = Node{}
	b, err := Parse([]byte(minimalYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.Health.Backoff[0], 500*time.Millisecond; got != want {
		t.Errorf("second Parse: backoff[0] = %v, want %v (state shared between calls)", got, want)
	}
	if got := Default().Health.Backoff[0]; got != 500*time.Millisecond {
		t.Errorf("Default().Health.Backoff[0] = %v after mutating a parsed Config, want 500ms", got)
	}
	if got, want := b.Nodes["n1"].Addr, "127.0.0.1:7001"; got != want {
		t.Errorf("second Parse: n1 addr = %q, want %q", got, want)
	}
}

func TestParseProblems(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		// path is the problem under test; its Msg must contain msg, and
		// bad (the offending input) must appear in its Value or Msg. An
		// empty bad means the key itself is the problem: Value must be nil.
		path string
		msg  string
		bad  string
		// all is the exact set of problem paths, when the mistake has
		// knock-on problems; nil means just path.
		all []string
	}{
		{
			name: "route names unknown node",
			yaml: nodesOK + "servers: {inventory: {routes: {clothes: [n1, n9]}}}",
			path: "servers.inventory.routes.clothes[1]", msg: "unknown node", bad: "n9",
		},
		{
			name: "two nodes with the same addr",
			yaml: serversOK + `
nodes:
  n1: {addr: 127.0.0.1:7001}
  n2: {addr: 127.0.0.1:7001}
`,
			path: "nodes.n2.addr", msg: "same address as node n1", bad: "127.0.0.1:7001",
		},
		{
			name: "empty route list",
			yaml: nodesOK + "servers: {inventory: {routes: {clothes: []}}}",
			path: "servers.inventory.routes.clothes", msg: "empty route",
		},
		{
			name: "null route",
			yaml: nodesOK + "servers: {inventory: {routes: {clothes: }}}",
			path: "servers.inventory.routes.clothes", msg: "empty route",
		},
		{
			name: "server without routes",
			yaml: nodesOK + "servers: {inventory: {on_node_down: fail}}",
			path: "servers.inventory.routes", msg: "at least one route",
		},
		{
			name: "duration without unit word",
			yaml: nodesOK + serversOK + "health: {heartbeat: fast}",
			path: "health.heartbeat", msg: "duration", bad: "fast",
		},
		{
			name: "bare number duration",
			yaml: nodesOK + serversOK + "health: {timeout: 5}",
			path: "health.timeout", msg: "unit", bad: "5",
		},
		{
			name: "quoted bare number duration",
			yaml: nodesOK + serversOK + `health: {timeout: "5"}`,
			path: "health.timeout", msg: "unit", bad: "5",
		},
		{
			name: "bad duration in a list",
			yaml: nodesOK + serversOK + "health: {backoff: [1s, soon]}",
			path: "health.backoff[1]", msg: "duration", bad: "soon",
		},
		{
			name: "zero duration",
			yaml: nodesOK + serversOK + "breaker: {open_timeout: 0s}",
			path: "breaker.open_timeout", msg: "positive", bad: "0s",
		},
		{
			name: "negative duration in a list",
			yaml: nodesOK + serversOK + "health: {backoff: [1s, -2s]}",
			path: "health.backoff[1]", msg: "positive", bad: "-2s",
		},
		{
			name: "empty backoff",
			yaml: nodesOK + serversOK + "health: {backoff: []}",
			path: "health.backoff", msg: "at least one delay",
		},
		{
			name: "weight 0",
			yaml: serversOK + "nodes: {n1: {addr: 127.0.0.1:7001, weight: 0}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.weight", msg: "between 1 and 100", bad: "0",
		},
		{
			name: "weight -1",
			yaml: serversOK + "nodes: {n1: {addr: 127.0.0.1:7001}, n2: {addr: 127.0.0.1:7002, weight: -1}}",
			path: "nodes.n2.weight", msg: "between 1 and 100", bad: "-1",
		},
		{
			name: "weight too large",
			yaml: serversOK + "nodes: {n1: {addr: 127.0.0.1:7001, weight: 101}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.weight", msg: "between 1 and 100", bad: "101",
		},
		{
			name: "fractional weight",
			yaml: serversOK + "nodes: {n1: {addr: 127.0.0.1:7001, weight: 1.5}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.weight", msg: "integer", bad: "1.5",
		},
		{
			name: "negative db",
			yaml: serversOK + "nodes: {n1: {addr: 127.0.0.1:7001, db: -1}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.db", msg: ">= 0", bad: "-1",
		},
		{
			name: "unknown top-level key",
			yaml: nodesOK + `
servrs:
  inventory:
    routes:
      clothes: [n1, n2]
`,
			path: "servrs", msg: "unknown key",
			all: []string{"servers", "servrs"},
		},
		{
			name: "unknown health key",
			yaml: nodesOK + serversOK + "health: {heartbeet: 1s}",
			path: "health.heartbeet", msg: "unknown key (known: backoff, heartbeat, hold_back, timeout)",
		},
		{
			name: "unknown node key",
			yaml: serversOK + "nodes: {n1: {adr: 127.0.0.1:7001}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.adr", msg: "unknown key",
			all: []string{"nodes.n1.addr", "nodes.n1.adr"},
		},
		{
			name: "unknown server key",
			yaml: nodesOK + "servers: {inventory: {route: {clothes: [n1, n2]}}}",
			path: "servers.inventory.route", msg: "unknown key",
			all: []string{"servers.inventory.route", "servers.inventory.routes"},
		},
		{
			name: "bad on_node_down",
			yaml: nodesOK + "servers: {inventory: {on_node_down: retry, routes: {clothes: [n1]}}}",
			path: "servers.inventory.on_node_down", msg: `"fail" or "next"`, bad: "retry",
		},
		{
			name: "on_node_down is case-sensitive",
			yaml: nodesOK + "servers: {inventory: {on_node_down: Fail, routes: {clothes: [n1]}}}",
			path: "servers.inventory.on_node_down", msg: `"fail" or "next"`, bad: "Fail",
		},
		{
			name: "node listed twice in a route",
			yaml: nodesOK + "servers: {inventory: {routes: {clothes: [n1, n2, n1]}}}",
			path: "servers.inventory.routes.clothes[2]", msg: "listed twice", bad: "n1",
		},
		{
			name: "no nodes",
			yaml: "servers: {inventory: {routes: {clothes: [n1]}}}",
			path: "nodes", msg: "at least one node",
			all: []string{"nodes", "servers.inventory.routes.clothes[0]"},
		},
		{
			name: "empty nodes mapping",
			yaml: "nodes: {}\nservers: {inventory: {routes: {clothes: [n1]}}}",
			path: "nodes", msg: "at least one node",
			all: []string{"nodes", "servers.inventory.routes.clothes[0]"},
		},
		{
			name: "no servers",
			yaml: nodesOK,
			path: "servers", msg: "at least one server",
		},
		{
			name: "node without addr",
			yaml: serversOK + "nodes: {n1: {weight: 2}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.addr", msg: "required",
		},
		{
			name: "addr without port",
			yaml: serversOK + "nodes: {n1: {addr: x}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.addr", msg: "host:port", bad: "x",
		},
		{
			name: "addr with port 0",
			yaml: serversOK + "nodes: {n1: {addr: 'host:0'}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.addr", msg: "port", bad: "host:0",
		},
		{
			name: "addr with port too large",
			yaml: serversOK + "nodes: {n1: {addr: 'host:65536'}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.addr", msg: "port", bad: "host:65536",
		},
		{
			name: "addr with named port",
			yaml: serversOK + "nodes: {n1: {addr: 'host:redis'}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.addr", msg: "port", bad: "host:redis",
		},
		{
			name: "addr without host",
			yaml: serversOK + "nodes: {n1: {addr: ':7001'}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.addr", msg: "host:port", bad: ":7001",
		},
		{
			name: "bad service.listen",
			yaml: nodesOK + serversOK + "service: {listen: '7400'}",
			path: "service.listen", msg: "host:port", bad: "7400",
		},
		{
			name: "node name with a space",
			yaml: serversOK + "nodes: {n1: {addr: 127.0.0.1:7001}, n2: {addr: 127.0.0.1:7002}, 'n 3': {addr: 127.0.0.1:7003}}",
			path: "nodes.n 3", msg: "letters, digits", bad: "n 3",
		},
		{
			name: "node name with a slash",
			yaml: serversOK + "nodes: {n1: {addr: 127.0.0.1:7001}, n2: {addr: 127.0.0.1:7002}, n/3: {addr: 127.0.0.1:7003}}",
			path: "nodes.n/3", msg: "letters, digits", bad: "n/3",
		},
		{
			name: "server name with a colon",
			yaml: nodesOK + "servers: {'inv:entory': {routes: {clothes: [n1]}}}",
			path: "servers.inv:entory", msg: "letters, digits", bad: "inv:entory",
		},
		{
			name: "route name with a brace",
			yaml: nodesOK + "servers: {inventory: {routes: {'{clothes}': [n1]}}}",
			path: "servers.inventory.routes.{clothes}", msg: "letters, digits", bad: "{clothes}",
		},
		{
			name: "node name too long",
			yaml: serversOK + "nodes: {n1: {addr: 127.0.0.1:7001}, n2: {addr: 127.0.0.1:7002}, " +
				strings.Repeat("a", 65) + ": {addr: 127.0.0.1:7003}}",
			path: "nodes." + strings.Repeat("a", 65), msg: "1 to 64", bad: strings.Repeat("a", 65),
		},
		{
			name: "breaker.failures 0",
			yaml: nodesOK + serversOK + "breaker: {failures: 0}",
			path: "breaker.failures", msg: ">= 1", bad: "0",
		},
		{
			name: "redo_queues 0",
			yaml: nodesOK + serversOK + "inventory: {redo_queues: 0}",
			path: "inventory.redo_queues", msg: "between 1 and 1024", bad: "0",
		},
		{
			name: "redo_queues too large",
			yaml: nodesOK + serversOK + "inventory: {redo_queues: 1025}",
			path: "inventory.redo_queues", msg: "between 1 and 1024", bad: "1025",
		},
		{
			name: "empty inventory.server",
			yaml: nodesOK + serversOK + "inventory: {server: ''}",
			path: "inventory.server", msg: "required",
		},
		{
			name: "max_reservation_ttl below reservation_ttl",
			yaml: nodesOK + serversOK + "inventory: {reservation_ttl: 2h, retention: 3h}",
			path: "inventory.max_reservation_ttl", msg: "reservation_ttl (2h0m0s)", bad: "1h0m0s",
		},
		{
			name: "retention not above max_reservation_ttl",
			yaml: nodesOK + serversOK + "inventory: {retention: 1h}",
			path: "inventory.retention", msg: "max_reservation_ttl (1h0m0s)", bad: "1h0m0s",
		},
		{
			name: "retention below 3s",
			yaml: nodesOK + serversOK + "inventory: {reservation_ttl: 1s, max_reservation_ttl: 1s, retention: 2s}",
			path: "inventory.retention", msg: "at least 3s", bad: "2s",
		},
		{
			name: "number for a list",
			yaml: nodesOK + serversOK + "health: {backoff: 5}",
			path: "health.backoff", msg: "want a list", bad: "5",
		},
		{
			// A scalar string is read as a comma-separated list (the form
			// environment variables take), so its items are checked.
			name: "string for a list of durations",
			yaml: nodesOK + serversOK + "health: {backoff: often}",
			path: "health.backoff[0]", msg: "duration", bad: "often",
		},
		{
			name: "mapping for a list",
			yaml: nodesOK + "servers: {inventory: {routes: {clothes: {n1: 1}}}}",
			path: "servers.inventory.routes.clothes", msg: "want a list", bad: "n1",
		},
		{
			name: "list for a string",
			yaml: nodesOK + serversOK + "service: {listen: [127.0.0.1, 7400]}",
			path: "service.listen", msg: "want a string", bad: "127.0.0.1",
		},
		{
			name: "number for a string",
			yaml: serversOK + "nodes: {n1: {addr: 127.0.0.1:7001, password: 1234}, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1.password", msg: "quote the value", bad: "<redacted>",
		},
		{
			name: "list of lists for a route",
			yaml: nodesOK + "servers: {inventory: {routes: {clothes: [n1, [n2]]}}}",
			path: "servers.inventory.routes.clothes[1]", msg: "want a string", bad: "n2",
		},
		{
			name: "mapping for a duration",
			yaml: nodesOK + serversOK + "health: {heartbeat: {ms: 500}}",
			path: "health.heartbeat", msg: "duration", bad: "ms",
		},
		{
			name: "string for an integer",
			yaml: nodesOK + serversOK + "breaker: {failures: many}",
			path: "breaker.failures", msg: "integer", bad: "many",
		},
		{
			name: "scalar for a section",
			yaml: nodesOK + serversOK + "health: 5s",
			path: "health", msg: "mapping", bad: "5s",
		},
		{
			name: "list for the nodes mapping",
			yaml: serversOK + "nodes: [n1, n2]",
			path: "nodes", msg: "mapping", bad: "n1",
			all: []string{"nodes", "servers.inventory.routes.clothes[0]", "servers.inventory.routes.clothes[1]"},
		},
		{
			name: "scalar for a node",
			yaml: serversOK + "nodes: {n1: 127.0.0.1:7001, n2: {addr: 127.0.0.1:7002}}",
			path: "nodes.n1", msg: "mapping", bad: "127.0.0.1:7001",
			all: []string{"nodes.n1", "nodes.n1.addr"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.yaml), nil)
			if cfg != nil {
				t.Errorf("Parse: got Config %+v, want nil with an error", *cfg)
			}
			ps := problemsOf(t, err)
			want := tt.all
			if want == nil {
				want = []string{tt.path}
			}
			if got := paths(ps); !reflect.DeepEqual(got, want) {
				t.Errorf("problem paths:\n got %q\nwant %q\nerror: %v", got, want, err)
			}
			p, ok := findProblem(ps, tt.path)
			if !ok {
				t.Fatalf("no problem at %q; got %v", tt.path, err)
			}
			if !strings.Contains(p.Msg, tt.msg) {
				t.Errorf("%s: Msg = %q, want it to contain %q", p.Path, p.Msg, tt.msg)
			}
			if tt.bad == "" {
				if p.Value != nil {
					t.Errorf("%s: Value = %#v, want nil", p.Path, p.Value)
				}
			} else if v := valueString(p.Value); !strings.Contains(v, tt.bad) && !strings.Contains(p.Msg, tt.bad) {
				t.Errorf("%s: Value %q and Msg %q do not name the bad input %q", p.Path, v, p.Msg, tt.bad)
			}
			// The problem must also be visible in the error text.
			if s := err.Error(); !strings.Contains(s, p.String()) {
				t.Errorf("error text %q does not contain the problem %q", s, p.String())
			}
		})
	}
}

func TestParseReportsEveryProblemAtOnce(t *testing.T) {
	const yml = `
nodes:
  n1: {addr: 127.0.0.1:7001}
  n2: {addr: 127.0.0.1:7002, weight: 0}
servers:
  inventory:
    on_node_down: maybe
    routes:
      clothes: [n1, n9]
health:
  heartbeat: fast
breaker:
  failures: 0
inventory:
  retension: 200h
`
	_, err := Parse([]byte(yml), nil)
	ps := problemsOf(t, err)
	want := []string{
		"breaker.failures",
		"health.heartbeat",
		"inventory.retension",
		"nodes.n2.weight",
		"servers.inventory.on_node_down",
		"servers.inventory.routes.clothes[1]",
	}
	if got := paths(ps); !reflect.DeepEqual(got, want) {
		t.Errorf("problem paths:\n got %q\nwant %q", got, want)
	}
	if got, want := strings.Count(err.Error(), "\n"), len(want); got != want {
		t.Errorf("error text has %d problem lines, want %d:\n%v", got, want, err)
	}
}

func TestParseReportsAPathOnce(t *testing.T) {
	// Each input fails to decode; the value keeps its default (or zero),
	// which semantic validation would flag again at the same path.
	tests := []struct {
		name string
		yaml string
		path string
	}{
		{"route item of the wrong type", nodesOK + "servers: {inventory: {routes: {clothes: [n1, 7]}}}",
			"servers.inventory.routes.clothes[1]"},
		{"nodes of the wrong type", serversOK + "nodes: oops", "nodes"},
		{"servers of the wrong type", nodesOK + "servers: [inventory]", "servers"},
		{"addr of the wrong type", serversOK + "nodes: {n1: {addr: [a]}, n2: {addr: 127.0.0.1:7002}}", "nodes.n1.addr"},
		{"on_node_down of the wrong type", nodesOK + "servers: {inventory: {on_node_down: [fail], routes: {clothes: [n1]}}}",
			"servers.inventory.on_node_down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), nil)
			ps := problemsOf(t, err)
			n := 0
			for _, p := range ps {
				if p.Path == tt.path {
					n++
				}
			}
			if n != 1 {
				t.Errorf("path %q reported %d times, want once:\n%v", tt.path, n, err)
			}
		})
	}
}

func TestParseEnv(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		edit    func(c *Config) // applied to exampleConfig() to get the want
	}{
		{"no environment", nil, func(*Config) {}},
		{"heartbeat", []string{"SHARDIS_HEALTH__HEARTBEAT=250ms"},
			func(c *Config) { c.Health.Heartbeat = 250 * time.Millisecond }},
		{"underscore inside a key", []string{"SHARDIS_BREAKER__OPEN_TIMEOUT=2s"},
			func(c *Config) { c.Breaker.OpenTimeout = 2 * time.Second }},
		{"node password merges with the file's node", []string{"SHARDIS_NODES__N1__PASSWORD=s3cret"},
			func(c *Config) { c.Nodes["n1"] = Node{Addr: "127.0.0.1:7001", Password: "s3cret", Weight: 1} }},
		{"comma-separated list", []string{"SHARDIS_HEALTH__BACKOFF=1s,2s"},
			func(c *Config) { c.Health.Backoff = []time.Duration{time.Second, 2 * time.Second} }},
		{"list with spaces", []string{"SHARDIS_HEALTH__BACKOFF= 1s , 2s ,"},
			func(c *Config) { c.Health.Backoff = []time.Duration{time.Second, 2 * time.Second} }},
		{"route replaced", []string{"SHARDIS_SERVERS__INVENTORY__ROUTES__CLOTHES=n2"},
			func(c *Config) { c.Servers["inventory"].Routes["clothes"] = []string{"n2"} }},
		{"integer from a string", []string{"SHARDIS_INVENTORY__REDO_QUEUES=8", "SHARDIS_NODES__N2__WEIGHT=3"},
			func(c *Config) {
				c.Inventory.RedoQueues = 8
				c.Nodes["n2"] = Node{Addr: "127.0.0.1:7002", Weight: 3}
			}},
		{"new node and route", []string{
			"SHARDIS_NODES__N3__ADDR=127.0.0.1:7003",
			"SHARDIS_SERVERS__INVENTORY__ROUTES__SHOES=n3,n1",
		}, func(c *Config) {
			c.Nodes["n3"] = Node{Addr: "127.0.0.1:7003", Weight: 1}
			c.Servers["inventory"].Routes["shoes"] = []string{"n3", "n1"}
		}},
		{"new server gets default policy", []string{"SHARDIS_SERVERS__ORDER__ROUTES__EU=n1"},
			func(c *Config) {
				c.Servers["order"] = Server{OnNodeDown: "fail", Routes: map[string][]string{"eu": {"n1"}}}
			}},
		{"sync DSN with a password", []string{"SHARDIS_SYNC__DSN=postgres://shardis:Pa55@127.0.0.1:5432/shardis"},
			func(c *Config) { c.Sync.DSN = "postgres://shardis:Pa55@127.0.0.1:5432/shardis" }},
		{"sync durations", []string{"SHARDIS_SYNC__POLL_INTERVAL=50ms", "SHARDIS_SYNC__BATCH=200"},
			func(c *Config) { c.Sync.PollInterval, c.Sync.Batch = 50*time.Millisecond, 200 }},
		{"value containing '='", []string{"SHARDIS_NODES__N1__PASSWORD=a=b"},
			func(c *Config) { c.Nodes["n1"] = Node{Addr: "127.0.0.1:7001", Password: "a=b", Weight: 1} }},
		{"unrelated variables are ignored", []string{
			"PATH=/usr/bin:/bin",
			"HOME=/root",
			"SHARDIS=1",
			"SHARDIS_=1",
			"shardis_health__heartbeat=1s",
			"MY_SHARDIS_HEALTH__HEARTBEAT=1s",
			"NOEQUALS",
		}, func(*Config) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(exampleYAML), tt.environ)
			if err != nil {
				t.Fatalf("Parse: got error %v, want nil", err)
			}
			want := exampleConfig()
			tt.edit(&want)
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("Parse with %q:\n got %+v\nwant %+v", tt.environ, *got, want)
			}
		})
	}
}

func TestParseEnvOnly(t *testing.T) {
	// The whole configuration may come from the environment.
	got, err := Parse(nil, []string{
		"SHARDIS_NODES__N1__ADDR=127.0.0.1:7001",
		"SHARDIS_NODES__N2__ADDR=127.0.0.1:7002",
		"SHARDIS_SERVERS__INVENTORY__ROUTES__CLOTHES=n1,n2",
	})
	if err != nil {
		t.Fatalf("Parse: got error %v, want nil", err)
	}
	if want := exampleConfig(); !reflect.DeepEqual(*got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", *got, want)
	}
}

func TestParseEnvProblems(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		path    string
		bad     string // must appear in Value; "" means Value is nil
		emptyOK bool   // Value is the empty string as written
	}{
		{"typo in a key", []string{"SHARDIS_HEALTH__HEARTBEET=1s"}, "health.heartbeet", "", false},
		{"single underscore is not a level", []string{"SHARDIS_BREAKER_OPEN_TIMEOUT=2s"}, "breaker_open_timeout", "", false},
		{"unknown node key", []string{"SHARDIS_NODES__N1__PASS=x"}, "nodes.n1.pass", "", false},
		{"bad duration", []string{"SHARDIS_HEALTH__HEARTBEAT=fast"}, "health.heartbeat", "fast", false},
		{"empty duration", []string{"SHARDIS_HEALTH__TIMEOUT="}, "health.timeout", "", true},
		{"bad integer", []string{"SHARDIS_BREAKER__FAILURES=many"}, "breaker.failures", "many", false},
		{"bad weight", []string{"SHARDIS_NODES__N1__WEIGHT=0"}, "nodes.n1.weight", "0", false},
		{"bad list item", []string{"SHARDIS_HEALTH__BACKOFF=1s,x"}, "health.backoff[1]", "x", false},
		{"route naming an unknown node", []string{"SHARDIS_SERVERS__INVENTORY__ROUTES__CLOTHES=n1,n9"},
			"servers.inventory.routes.clothes[1]", "n9", false},
		{"bad policy", []string{"SHARDIS_SERVERS__INVENTORY__ON_NODE_DOWN=retry"}, "servers.inventory.on_node_down", "retry", false},
		{"sync key typo", []string{"SHARDIS_SYNC__DNS=postgres://x@h/db"}, "sync.dns", "", false},
		{"sync section without double underscore", []string{"SHARDIS_SYNC_DSN=postgres://x@h/db"}, "sync_dsn", "", false},
		{"bad sync batch", []string{"SHARDIS_SYNC__BATCH=0"}, "sync.batch", "0", false},
		{"scalar over a section", []string{"SHARDIS_HEALTH=1s"}, "health", "1s", false},
		{"CLI variables are not overrides but a bad key still is", []string{"SHARDIS_TOKEN=t", "SHARDIS_URL=http://x", "SHARDIS_HEALTH__HEARTBEET=1s"},
			"health.heartbeet", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(exampleYAML), tt.environ)
			if cfg != nil {
				t.Errorf("Parse: got Config, want nil with an error")
			}
			ps := problemsOf(t, err)
			p, ok := findProblem(ps, tt.path)
			if !ok {
				t.Fatalf("no problem at %q; got %v", tt.path, err)
			}
			if len(ps) != 1 {
				t.Errorf("got %d problems, want 1:\n%v", len(ps), err)
			}
			if want := tt.environ[len(tt.environ)-1][:strings.Index(tt.environ[len(tt.environ)-1], "=")]; p.Env != want ||
				!strings.Contains(err.Error(), want) {
				t.Errorf("%s: problem names variable %q (error %q), want %q", p.Path, p.Env, err, want)
			}
			switch {
			case tt.emptyOK:
				if p.Value != "" {
					t.Errorf("%s: Value = %#v, want \"\"", p.Path, p.Value)
				}
			case tt.bad == "":
				if p.Value != nil {
					t.Errorf("%s: Value = %#v, want nil", p.Path, p.Value)
				}
			default:
				if v := valueString(p.Value); !strings.Contains(v, tt.bad) {
					t.Errorf("%s: Value = %q, want it to name %q", p.Path, v, tt.bad)
				}
			}
		})
	}
}

// A router needs only nodes, servers, health, breaker, client and pipeline:
// ValidateRouter does not ask for the service or the inventory.
func TestValidateRouterOnlyChecksRouterSections(t *testing.T) {
	c := Config{
		Nodes:    map[string]Node{"n1": {Addr: "127.0.0.1:7001", Weight: 1}},
		Servers:  map[string]Server{"cache": {OnNodeDown: OnNodeDownNext, Routes: map[string][]string{"s": {"n1"}}}},
		Health:   Health{Heartbeat: time.Second, Timeout: time.Second, Backoff: []time.Duration{time.Second}},
		Breaker:  Breaker{Failures: 5, OpenTimeout: time.Second},
		Client:   Client{CommandTimeout: time.Second},
		Pipeline: Pipeline{Enabled: true, MaxBatch: 200},
	}
	if err := c.ValidateRouter(); err != nil {
		t.Fatalf("ValidateRouter of a router-only config: %v", err)
	}
	if err := c.Validate(); err == nil {
		t.Fatal("Validate of a config without service/inventory passed; want their problems")
	}
	c.Client.PoolSize = -1
	ps, ok := IsProblems(c.ValidateRouter())
	if !ok || len(ps) != 1 || ps[0].Path != "client.pool_size" {
		t.Fatalf("ValidateRouter with pool_size -1: %v, want one problem at client.pool_size", ps)
	}
}

// The CLI's own variables (SHARDIS_TOKEN, SHARDIS_URL) are not
// configuration overrides: a config loads with them set.
func TestParseIgnoresCLIVariables(t *testing.T) {
	cfg, err := Parse([]byte(exampleYAML), []string{"SHARDIS_TOKEN=secret", "SHARDIS_URL=http://127.0.0.1:7400", "SHARDIS_ADDR=x"})
	if err != nil {
		t.Fatalf("Parse with SHARDIS_TOKEN and SHARDIS_URL set: %v", err)
	}
	if cfg.Service.AuthToken != "" {
		t.Errorf("SHARDIS_TOKEN became service.auth_token %q", cfg.Service.AuthToken)
	}
}

func TestLoad(t *testing.T) {
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nope.yaml")
		cfg, err := Load(path)
		if err == nil {
			t.Fatalf("Load(%q): got Config %+v, want an error", path, cfg)
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("Load(%q): error %q does not name the path", path, err)
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Load(%q): error %v does not wrap os.ErrNotExist", path, err)
		}
		if _, ok := IsProblems(err); ok {
			t.Errorf("Load(%q): a missing file should not be reported as Problems", path)
		}
	})
	t.Run("file and environment", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "shardis.yaml")
		if err := os.WriteFile(path, []byte(exampleYAML), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("SHARDIS_BREAKER__FAILURES", "9")
		got, err := Load(path)
		if err != nil {
			t.Fatalf("Load: got error %v, want nil", err)
		}
		want := exampleConfig()
		want.Breaker.Failures = 9
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("Load:\n got %+v\nwant %+v", *got, want)
		}
	})
	t.Run("invalid file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "shardis.yaml")
		if err := os.WriteFile(path, []byte(nodesOK), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if got, want := paths(problemsOf(t, err)), []string{"servers"}; !reflect.DeepEqual(got, want) {
			t.Errorf("Load: problem paths %q, want %q", got, want)
		}
	})
}

func TestParseInvalidYAML(t *testing.T) {
	tests := []struct{ name, yaml string }{
		{"unclosed flow sequence", "nodes: [n1"},
		{"unclosed flow mapping", "nodes: {n1: {addr: x}"},
		{"tab indentation", "nodes:\n\tn1: {}"},
		{"top-level list", "- a\n- b"},
		{"top-level scalar", "just words"},
		{"duplicate key", "health: {}\nhealth: {}"},
		{"bad indentation", "nodes:\n  n1:\n addr: x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.yaml), nil)
			if err == nil {
				t.Fatalf("Parse(%q): got Config %+v, want an error", tt.yaml, cfg)
			}
			if _, ok := IsProblems(err); ok {
				t.Errorf("Parse(%q): got Problems %v, want a YAML syntax error", tt.yaml, err)
			}
			if !strings.Contains(err.Error(), "YAML") {
				t.Errorf("Parse(%q): error %q does not say it is YAML", tt.yaml, err)
			}
		})
	}
}

func TestParseEmpty(t *testing.T) {
	for _, yml := range []string{"", "\n", "# nothing here\n", "---\n", "{}"} {
		_, err := Parse([]byte(yml), nil)
		ps := problemsOf(t, err)
		if got, want := paths(ps), []string{"nodes", "servers"}; !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q): problem paths %q, want %q", yml, got, want)
		}
	}
}

func TestParseDottedNames(t *testing.T) {
	const yml = `
nodes:
  redis.a: {addr: 127.0.0.1:7001}
  redis.b: {addr: 127.0.0.1:7002, weight: 2}
servers:
  cache.v1:
    on_node_down: next
    routes:
      user.profile: [redis.a, redis.b]
`
	got, err := Parse([]byte(yml), []string{"SHARDIS_NODES__REDIS.A__PASSWORD=pw"})
	if err != nil {
		t.Fatalf("Parse: got error %v, want nil", err)
	}
	wantNodes := map[string]Node{
		"redis.a": {Addr: "127.0.0.1:7001", Password: "pw", Weight: 1},
		"redis.b": {Addr: "127.0.0.1:7002", Weight: 2},
	}
	if !reflect.DeepEqual(got.Nodes, wantNodes) {
		t.Errorf("Nodes:\n got %+v\nwant %+v", got.Nodes, wantNodes)
	}
	wantServers := map[string]Server{
		"cache.v1": {OnNodeDown: "next", Routes: map[string][]string{"user.profile": {"redis.a", "redis.b"}}},
	}
	if !reflect.DeepEqual(got.Servers, wantServers) {
		t.Errorf("Servers:\n got %+v\nwant %+v", got.Servers, wantServers)
	}

	// A problem inside a dotted name is reported under the full name.
	_, err = Parse([]byte(yml+"\n"), []string{"SHARDIS_NODES__REDIS.B__WEIGHT=0"})
	ps := problemsOf(t, err)
	if got, want := paths(ps), []string{"nodes.redis.b.weight"}; !reflect.DeepEqual(got, want) {
		t.Errorf("problem paths %q, want %q", got, want)
	}
}

// validConfig is a hand-built valid Config.
func validConfig() Config {
	c := Default()
	c.Nodes = map[string]Node{
		"n1": {Addr: "127.0.0.1:7001", Weight: 1},
		"n2": {Addr: "127.0.0.1:7002", Weight: 1},
	}
	c.Servers = map[string]Server{
		"inventory": {OnNodeDown: OnNodeDownFail, Routes: map[string][]string{"clothes": {"n1", "n2"}}},
	}
	return c
}

func TestValidate(t *testing.T) {
	manyNodes := func(n int) (map[string]Node, []string) {
		nodes := map[string]Node{}
		var names []string
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("n%d", i)
			nodes[name] = Node{Addr: fmt.Sprintf("10.0.%d.%d:6379", i/256, i%256), Weight: 1}
			names = append(names, name)
		}
		return nodes, names
	}
	tests := []struct {
		name string
		edit func(c *Config)
		want []string // problem paths; nil means valid
	}{
		{"valid", func(*Config) {}, nil},
		{"next policy", func(c *Config) {
			c.Servers["inventory"] = Server{OnNodeDown: OnNodeDownNext, Routes: c.Servers["inventory"].Routes}
		}, nil},
		{"defaults alone", func(c *Config) { *c = Default() }, []string{"nodes", "servers"}},
		{"zero Config", func(c *Config) { *c = Config{} }, []string{
			"breaker.failures", "breaker.open_timeout", "client.command_timeout", "health.backoff", "health.heartbeat",
			"health.timeout", "inventory.attempt_lease", "inventory.max_reservation_ttl", "inventory.reconcile_interval",
			"inventory.redo_queues", "inventory.reservation_ttl", "inventory.retention",
			"inventory.server", "nodes", "pipeline.max_batch", "servers", "service.listen", "service.max_body_bytes", "service.shutdown_timeout",
			"sync.batch", "sync.poll_interval", "sync.retry_backoff", "sync.settle_interval", "sync.settle_walk_interval",
		}},
		{"empty policy", func(c *Config) {
			c.Servers["inventory"] = Server{Routes: c.Servers["inventory"].Routes}
		}, []string{"servers.inventory.on_node_down"}},
		{"nil backoff", func(c *Config) { c.Health.Backoff = nil }, []string{"health.backoff"}},
		{"negative hold_back", func(c *Config) { c.Health.HoldBack = -time.Second }, []string{"health.hold_back"}},
		{"busy_from 1", func(c *Config) { c.Pipeline.BusyFrom = 1 }, []string{"pipeline.busy_from"}},
		{"busy_from 0 (default)", func(c *Config) { c.Pipeline.BusyFrom = 0 }, nil},
		{"negative from", func(c *Config) { c.Pipeline.From = -1 }, []string{"pipeline.from"}},
		{"from 0 (default)", func(c *Config) { c.Pipeline.From = 0 }, nil},
		{"from 1 (every command)", func(c *Config) { c.Pipeline.From = 1 }, nil},
		{"negative busy_max_batch", func(c *Config) { c.Pipeline.BusyMaxBatch = -1 }, []string{"pipeline.busy_max_batch"}},
		{"busy_max_batch over 10000", func(c *Config) { c.Pipeline.BusyMaxBatch = 10001 }, []string{"pipeline.busy_max_batch"}},
		{"negative busy_flush_delay", func(c *Config) { c.Pipeline.BusyFlushDelay = -time.Microsecond },
			[]string{"pipeline.busy_flush_delay"}},
		{"busy_flush_delay over 10ms", func(c *Config) { c.Pipeline.BusyFlushDelay = 11 * time.Millisecond },
			[]string{"pipeline.busy_flush_delay"}},
		{"busy pipeline off", func(c *Config) { c.Pipeline.BusyFlushDelay = 0 }, nil},
		{"carry_wait over 1m", func(c *Config) { c.Inventory.CarryWait = time.Minute + time.Millisecond },
			[]string{"inventory.carry_wait"}},
		{"negative carry_wait (never carry)", func(c *Config) { c.Inventory.CarryWait = -time.Millisecond }, nil},
		{"carry_wait 0 (default)", func(c *Config) { c.Inventory.CarryWait = 0 }, nil},
		{"zero backoff item", func(c *Config) { c.Health.Backoff = []time.Duration{time.Second, 0} },
			[]string{"health.backoff[1]"}},
		{"route at the member limit", func(c *Config) {
			nodes, names := manyNodes(MaxRouteNodes)
			c.Nodes = nodes
			c.Servers["inventory"].Routes["clothes"] = names
		}, nil},
		{"route over the member limit", func(c *Config) {
			nodes, names := manyNodes(MaxRouteNodes + 1)
			c.Nodes = nodes
			c.Servers["inventory"].Routes["clothes"] = names
		}, []string{"servers.inventory.routes.clothes"}},
		{"empty node name", func(c *Config) {
			c.Nodes[""] = Node{Addr: "127.0.0.1:7003", Weight: 1}
		}, []string{"nodes."}},
		{"max weight", func(c *Config) { c.Nodes["n1"] = Node{Addr: "127.0.0.1:7001", Weight: MaxWeight} }, nil},
		{"ipv6 addr", func(c *Config) { c.Nodes["n1"] = Node{Addr: "[::1]:7001", Weight: 1} }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.edit(&c)
			err := c.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate: got %v, want nil", err)
				}
				return
			}
			if got := paths(problemsOf(t, err)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Validate: problem paths\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestValidateReturnsUntypedNil(t *testing.T) {
	c := validConfig()
	// A typed nil Problems inside the error interface would be non-nil.
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: got %#v, want untyped nil", err)
	}
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{Path: "health.heartbeet", Msg: "unknown key"}, "health.heartbeet: unknown key"},
		{Problem{Path: "nodes.n1.weight", Value: 0, Msg: "must be between 1 and 100"},
			`nodes.n1.weight: must be between 1 and 100 (got "0")`},
		{Problem{Path: "health.timeout", Value: "", Msg: "want a duration"},
			`health.timeout: want a duration (got "")`},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.p, got, tt.want)
		}
	}
}

func TestProblemsError(t *testing.T) {
	ps := Problems{
		{Path: "nodes", Msg: "at least one node is required"},
		{Path: "health.heartbeat", Value: "fast", Msg: "want a duration with a unit, like 500ms or 2s"},
		{Path: "servers.inventory.routes.clothes[1]", Value: "n9", Msg: "unknown node"},
	}
	got := ps.Error()
	lines := strings.Split(got, "\n")
	if len(lines) != 1+len(ps) {
		t.Fatalf("Error() has %d lines, want %d:\n%s", len(lines), 1+len(ps), got)
	}
	if !strings.Contains(lines[0], "3 problems") {
		t.Errorf("first line %q does not give the count", lines[0])
	}
	for i, p := range ps {
		if want := "  " + p.String(); lines[i+1] != want {
			t.Errorf("line %d = %q, want %q", i+1, lines[i+1], want)
		}
	}
}

func TestIsProblems(t *testing.T) {
	ps := Problems{{Path: "nodes", Msg: "at least one node is required"}}
	tests := []struct {
		name   string
		err    error
		wantOK bool
	}{
		{"bare", ps, true},
		{"wrapped", fmt.Errorf("startup: %w", ps), true},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", ps)), true},
		{"joined", errors.Join(errors.New("other"), ps), true},
		{"other error", errors.New("nodes: at least one node is required"), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := IsProblems(tt.err)
			if ok != tt.wantOK {
				t.Fatalf("IsProblems(%v): ok = %v, want %v", tt.err, ok, tt.wantOK)
			}
			if tt.wantOK && !reflect.DeepEqual(got, ps) {
				t.Errorf("IsProblems(%v) = %v, want %v", tt.err, got, ps)
			}
			if !tt.wantOK && got != nil {
				t.Errorf("IsProblems(%v) = %v, want nil", tt.err, got)
			}
		})
	}
}

// The shipped example configuration (make run, README) loads as it is.
func TestExampleFileLoads(t *testing.T) {
	if _, err := Load("example.yaml"); err != nil {
		t.Fatalf("config/example.yaml: %v", err)
	}
}

// The configuration docker/compose.yaml mounts loads as it is.
func TestDockerConfigLoads(t *testing.T) {
	if _, err := Load("../docker/shardis.yaml"); err != nil {
		t.Fatalf("docker/shardis.yaml: %v", err)
	}
}
