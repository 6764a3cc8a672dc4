package config_test

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/shardis/shardis/config"
)

// documentedYAML is the configuration reference of README.md, every key
// with its documented default or example value.
const documentedYAML = `
service:
  listen: 127.0.0.1:7400
  auth_token: ""
  tls: {cert_file: "", key_file: "", client_ca_file: ""}
  max_body_bytes: 1048576
  shutdown_timeout: 10s
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
  backoff: [500ms, 1s, 2s, 4s, 8s]
breaker:
  failures: 5
  open_timeout: 1s
inventory:
  server: inventory
  reservation_ttl: 10m
  max_reservation_ttl: 1h
  reconcile_interval: 1s
  redo_queues: 50
  retention: 168h
`

// documentedEnv is the environment override table of README.md.
const documentedEnv = `SHARDIS_SERVICE__LISTEN=0.0.0.0:7400
SHARDIS_SERVICE__AUTH_TOKEN=secret
SHARDIS_BREAKER__OPEN_TIMEOUT=2s
SHARDIS_NODES__N1__PASSWORD=pw
SHARDIS_HEALTH__BACKOFF=500ms,1s,5s
SHARDIS_SERVERS__INVENTORY__ROUTES__CLOTHES=n1,n2`

// parseRuns is how many times FuzzParse parses each input: Parse must give
// the same result every time, whatever the order in which Go iterates maps.
// Environment overrides go through maps whose iteration order is random
// (and, for small maps, far from even), so inputs with several of them are
// parsed many more times.
const (
	parseRuns    = 4
	parseRunsEnv = 100
)

// FuzzParse feeds arbitrary YAML and an environment (one KEY=VALUE per
// line) to Parse. Parse never panics and never half-succeeds: it returns a
// Config that passes Validate, or a non-empty Problems list whose entries
// all name a path and say what is wrong, or a plain "config: ..." error
// (unreadable YAML). The same input always gives the same result.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	minimal := "nodes:\n  n1: {addr: 127.0.0.1:7001}\nservers:\n  inventory:\n    routes:\n      clothes: [n1]\n"
	seeds := []struct{ yaml, env string }{
		{documentedYAML, ""},
		{documentedYAML, documentedEnv},
		{string(example), ""},
		{string(example), "SHARDIS_HEALTH__HEARTBEAT=250ms\nSHARDIS_NODES__N3__WEIGHT=3\nPATH=/usr/bin"},
		{minimal, ""},
		{minimal, "SHARDIS_SERVERS__INVENTORY__ON_NODE_DOWN=next\nSHARDIS_SERVICE__MAX_BODY_BYTES=2048"},
		{"", documentedEnv + "\nSHARDIS_NODES__N1__ADDR=127.0.0.1:7001\nSHARDIS_NODES__N2__ADDR=127.0.0.1:7002"},
		{"", ""},
		// typos and wrong types
		{strings.Replace(string(example), "servers:", "servrs:", 1), ""},
		{strings.Replace(string(example), "heartbeat:", "heartbeet:", 1), ""},
		{strings.Replace(minimal, "127.0.0.1:7001", "127.0.0.1", 1), ""},
		{minimal + "health: {heartbeat: 500, backoff: 1s}\nbreaker: {failures: two}\n", ""},
		{minimal + "inventory: {redo_queues: 0, retention: 1m, max_reservation_ttl: 2h}\n", ""},
		{"nodes:\n  n1: {addr: 127.0.0.1:7001, weight: 101, db: -1}\n  n2: {addr: 127.0.0.1:7001}\nservers:\n  s:\n    on_node_down: maybe\n    routes:\n      r: [n1, n1, n9]\n", ""},
		{"nodes: [n1, n2]\nservers: 3\n", "SHARDIS_NODES__N1__ADDR=x"},
		{"service:\n  tls: {cert_file: /nonexistent}\n" + minimal, "SHARDIS_SERVICE__TLS__KEY_FILE=/nonexistent"},
		{"nodes:\n  n1: {addr: 127.0.0.1:7001, tls: {enabled: yes, ca_file: /nonexistent}}\n", ""},
		{"nodes: {n1: {addr: [1, 2]}}\n", ""},
		{"\t- broken: [\n", ""},
		{"a: &a [*a]\n", ""},
	}
	for _, s := range seeds {
		f.Add([]byte(s.yaml), s.env)
	}
	f.Fuzz(func(t *testing.T, yamlData []byte, env string) {
		var environ []string
		if env != "" {
			environ = strings.Split(env, "\n")
		}
		cfg, err := config.Parse(yamlData, environ)
		checkParseResult(t, cfg, err)
		runs := parseRuns
		if strings.Count(env, config.EnvPrefix) >= 2 {
			runs = parseRunsEnv
		}
		for range runs - 1 {
			cfg2, err2 := config.Parse(yamlData, environ)
			if errString(err) != errString(err2) {
				t.Fatalf("Parse is not deterministic:\nfirst:  %v\nsecond: %v", err, err2)
			}
			if !reflect.DeepEqual(cfg, cfg2) {
				t.Fatalf("Parse is not deterministic:\nfirst:  %+v\nsecond: %+v", cfg, cfg2)
			}
		}
	})
}

func checkParseResult(t *testing.T, cfg *config.Config, err error) {
	t.Helper()
	if err == nil {
		if cfg == nil {
			t.Fatal("Parse returned a nil Config and a nil error")
		}
		if verr := cfg.Validate(); verr != nil {
			t.Fatalf("Parse returned a Config that fails Validate: %v", verr)
		}
		return
	}
	if cfg != nil {
		t.Fatalf("Parse returned both a Config and an error: %v", err)
	}
	if ps, ok := config.IsProblems(err); ok {
		if len(ps) == 0 {
			t.Fatal("Parse returned an empty Problems list as its error")
		}
		for i, p := range ps {
			if p.Path == "" || p.Msg == "" {
				t.Errorf("problem %d has an empty path or message: %#v (all: %v)", i, p, err)
			}
		}
		return
	}
	var ps config.Problems
	if errors.As(err, &ps) {
		t.Fatalf("error %v holds Problems but IsProblems missed it", err)
	}
	if !strings.HasPrefix(err.Error(), "config: ") || len(err.Error()) == len("config: ") {
		t.Fatalf("plain Parse error %q does not say what failed", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
