package config

import (
	"strings"
	"testing"
)

// reviewProblem parses yml with environ, wants it refused, and returns the
// problem at path with the whole error text.
func reviewProblem(t *testing.T, yml string, environ []string, path string) (Problem, string) {
	t.Helper()
	cfg, err := Parse([]byte(yml), environ)
	if err == nil {
		t.Fatalf("Parse with %q: got %+v, want an error at %s", environ, cfg, path)
	}
	ps := problemsOf(t, err)
	p, ok := findProblem(ps, path)
	if !ok {
		t.Fatalf("Parse with %q: no problem at %q; got %v", environ, path, err)
	}
	return p, err.Error()
}

// README: "A problem with a value from the environment names the
// variable". A variable whose section is misspelt (SHARDIS_NODE__… for
// SHARDIS_NODES__…), or that gives a scalar key sub-keys, was refused at a
// path above its own key, and the problem named no variable: the operator
// was left to guess which of the environment's variables it was.
func TestReviewEnvProblemAboveTheKeyNamesVariable(t *testing.T) {
	for _, tt := range []struct {
		env, path string
	}{
		{"SHARDIS_NODE__N1__ADDR=127.0.0.1:7003", "node"},
		{"SHARDIS_HEALTHH__HEARTBEAT=1s", "healthh"},
		{"SHARDIS_HEALTH__HEARTBEAT__X=1s", "health.heartbeat"},
		{"SHARDIS_SERVICES__AUTH_TOKEN=review-token-secret", "services"},
	} {
		name := tt.env[:strings.Index(tt.env, "=")]
		p, msg := reviewProblem(t, exampleYAML, []string{"SHARDIS_TOKEN=t", tt.env}, tt.path)
		if p.Env != name || !strings.Contains(msg, name) {
			t.Errorf("%s: problem %q names variable %q; want %s", tt.env, p, p.Env, name)
		}
		if strings.Contains(msg, "review-token-secret") {
			t.Errorf("%s: the error shows the value: %s", tt.env, msg)
		}
	}
}

// A node the environment alone adds (a map entry the file does not have)
// and leaves incomplete is refused, naming the variable that made it; a
// file's own incomplete node is not blamed on a variable that only adds
// its password.
func TestReviewEnvNewEntryProblemNamesVariable(t *testing.T) {
	p, msg := reviewProblem(t, exampleYAML, []string{"SHARDIS_NODES__N3__WEIGHT=2"}, "nodes.n3.addr")
	if p.Env != "SHARDIS_NODES__N3__WEIGHT" {
		t.Errorf("problem %q names variable %q; want SHARDIS_NODES__N3__WEIGHT (error %s)", p, p.Env, msg)
	}
	noAddr := strings.Replace(exampleYAML, "n2: {addr: 127.0.0.1:7002}", "n2: {weight: 1}", 1)
	p, msg = reviewProblem(t, noAddr, []string{"SHARDIS_NODES__N2__PASSWORD=pw"}, "nodes.n2.addr")
	if p.Env != "" {
		t.Errorf("the file's node n2 without addr: problem names %q; want none (error %s)", p.Env, msg)
	}
}

const reviewMixedCaseYAML = `
nodes:
  N1: {addr: 127.0.0.1:7001}
  n2: {addr: 127.0.0.1:7002}
servers:
  inventory:
    routes:
      Clothes: [N1, n2]
      shoes: [n2]
`

// Names reached through the environment are lower-case (README). A
// variable meant for a map entry the file spells in another case (node
// N1, route Clothes) did not override it: it silently added a second,
// lower-case entry beside it (a node n1 at the new address while N1 kept
// the old one; a route clothes beside Clothes), and the file's entry was
// served unchanged. It must be refused, naming the variable and the
// file's spelling.
func TestReviewEnvMixedCaseEntryRefused(t *testing.T) {
	for _, tt := range []struct {
		env, path, file string
	}{
		{"SHARDIS_NODES__N1__ADDR=127.0.0.1:7009", "nodes.n1", "N1"},
		{"SHARDIS_NODES__N1__PASSWORD=review-pw-secret", "nodes.n1", "N1"},
		{"SHARDIS_SERVERS__INVENTORY__ROUTES__CLOTHES=n2", "servers.inventory.routes.clothes", "Clothes"},
	} {
		name := tt.env[:strings.Index(tt.env, "=")]
		p, msg := reviewProblem(t, reviewMixedCaseYAML, []string{tt.env}, tt.path)
		if p.Env != name || !strings.Contains(msg, name) || !strings.Contains(msg, `"`+tt.file+`"`) {
			t.Errorf("%s: problem %q (variable %q); want it to name %s and the file's %q", tt.env, p, p.Env, name, tt.file)
		}
		if strings.Contains(msg, "review-pw-secret") {
			t.Errorf("%s: the error shows the value: %s", tt.env, msg)
		}
	}
	// Entries the file spells in lower case are overridden as before.
	cfg, err := Parse([]byte(reviewMixedCaseYAML), []string{"SHARDIS_NODES__N2__WEIGHT=3", "SHARDIS_SERVERS__INVENTORY__ROUTES__SHOES=n2,N1"})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if cfg.Nodes["n2"].Weight != 3 || len(cfg.Servers["inventory"].Routes["shoes"]) != 2 || len(cfg.Nodes) != 2 {
		t.Errorf("lower-case overrides: nodes %v, routes %v", cfg.Nodes, cfg.Servers["inventory"].Routes)
	}
}
