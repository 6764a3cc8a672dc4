package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two nodes naming one master group through sentinel addresses spelled
// differently (host case, a leading zero in the port) are one group: they
// loaded, two ring members writing to one Redis master. A sentinel listed
// twice that way in one node is refused too.
func TestSentinelAddressesCompareNormalised(t *testing.T) {
	for name, yaml := range map[string]string{
		"two nodes": `
nodes:
  a: {sentinel: {master: m, addrs: [SENT:26379]}}
  b: {sentinel: {master: m, addrs: [sent:026379]}}
servers: {inventory: {routes: {r: [a, b]}}}
`,
		"one node": `
nodes:
  a: {sentinel: {master: m, addrs: [sent:26379, SENT:26379]}}
servers: {inventory: {routes: {r: [a]}}}
`,
	} {
		_, err := Parse([]byte(yaml), nil)
		if err == nil || !(strings.Contains(err.Error(), "same master group") || strings.Contains(err.Error(), "sentinel listed twice")) {
			t.Errorf("%s: Parse = %v, want the shared group or the repeated sentinel refused", name, err)
		}
	}
}

// A node given as a URL with a password (go-redis's habit) is refused
// without the password in the error: it was echoed, and the README's
// embedding example logs the error.
func TestNodeURLPasswordNotEchoed(t *testing.T) {
	_, err := Parse([]byte(`
nodes:
  n1: "redis://user:s3cret@127.0.0.1:7001"
servers: {inventory: {routes: {r: [n1]}}}
`), nil)
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "nodes.n1") {
		t.Fatalf("Parse = %v; want nodes.n1 refused, the password not in the error", err)
	}
}

// Load's errors name the file (a command may load two: topology apply
// --config NEW --from OLD); a duration too long for time.Duration says
// so rather than asking for a unit it has.
func TestLoadNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"syntax.yaml":  "nodes: [",
		"problem.yaml": minimalYAML + "health: {heartbeet: 1s}\n",
		"long.yaml":    minimalYAML + "health: {heartbeat: 100000000h}\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("Load(%s) = %v, want an error naming the file", name, err)
		}
		if name == "long.yaml" && (err == nil || !strings.Contains(err.Error(), "at most")) {
			t.Errorf("Load(%s) = %v, want it to say the duration is too long", name, err)
		}
	}
}
