package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// sentinelYAML is a valid configuration with one standalone node and one
// Sentinel master group that reads from replicas, with durability replica.
const sentinelYAML = `
nodes:
  n1: {addr: 127.0.0.1:7001}
  n2:
    sentinel:
      master: shard-2
      addrs: [127.0.0.1:26379, 127.0.0.1:26380, 127.0.0.1:26381]
      username: sentinel-user
      password: sentinel-secret
    read_from: replica_preferred
    password: data-secret
    weight: 2
servers:
  inventory:
    routes:
      clothes: [n1, n2]
inventory:
  durability: replica
  durability_timeout: 250ms
`

func TestParseSentinelNode(t *testing.T) {
	cfg, err := Parse([]byte(sentinelYAML), nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	n2 := cfg.Nodes["n2"]
	want := Node{
		Sentinel: Sentinel{
			Master:   "shard-2",
			Addrs:    []string{"127.0.0.1:26379", "127.0.0.1:26380", "127.0.0.1:26381"},
			Username: "sentinel-user", Password: "sentinel-secret",
		},
		ReadFrom: ReadFromReplicaPreferred, Password: "data-secret", Weight: 2,
	}
	if !reflect.DeepEqual(n2, want) {
		t.Errorf("n2 = %+v\nwant %+v", n2, want)
	}
	if !n2.Sentinel.On() || cfg.Nodes["n1"].Sentinel.On() {
		t.Errorf("Sentinel.On: n2 %v, n1 %v; want true, false", n2.Sentinel.On(), cfg.Nodes["n1"].Sentinel.On())
	}
	if cfg.Inventory.Durability != DurabilityReplica || cfg.Inventory.DurabilityTimeout != 250*time.Millisecond {
		t.Errorf("inventory durability = %q %v, want replica 250ms", cfg.Inventory.Durability, cfg.Inventory.DurabilityTimeout)
	}
	// Neither password reaches a formatted node.
	for _, s := range []string{n2.String(), (&n2).String()} {
		if strings.Contains(s, "secret") {
			t.Errorf("formatted node leaks a password: %s", s)
		}
	}
}

func TestParseSentinelEnv(t *testing.T) {
	env := []string{
		"SHARDIS_NODES__N2__SENTINEL__ADDRS=10.0.0.1:26379,10.0.0.2:26379",
		"SHARDIS_INVENTORY__DURABILITY=none",
	}
	cfg, err := Parse([]byte(sentinelYAML), env)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := cfg.Nodes["n2"].Sentinel.Addrs, []string{"10.0.0.1:26379", "10.0.0.2:26379"}; !reflect.DeepEqual(got, want) {
		t.Errorf("sentinel addrs = %v, want %v", got, want)
	}
	if cfg.Inventory.Durability != DurabilityNone {
		t.Errorf("durability = %q, want none", cfg.Inventory.Durability)
	}
	_, err = Parse([]byte(sentinelYAML), []string{"SHARDIS_INVENTORY__DURABILITY=quorum"})
	p, ok := findProblem(problemsOf(t, err), "inventory.durability")
	if !ok || p.Env != "SHARDIS_INVENTORY__DURABILITY" {
		t.Errorf("bad durability from the environment: %v, want a problem naming the variable", err)
	}
}

func TestParseSentinelProblems(t *testing.T) {
	const servers2 = "servers: {inventory: {routes: {clothes: [n1, n2]}}}\n"
	const n1 = "  n1: {addr: 127.0.0.1:7001}\n"
	tests := []struct {
		name string
		yaml string
		path string // the problem under test
		msg  string // its Msg contains this
		bad  string // its Value or Msg names this ("" = the key itself: Value nil)
		all  []string
	}{
		{
			name: "addr and sentinel both",
			yaml: "nodes:\n" + n1 + "  n2: {addr: 127.0.0.1:7002, sentinel: {master: m, addrs: [127.0.0.1:26379]}}\n",
			path: "nodes.n2", msg: "not both",
		},
		{
			name: "neither addr nor sentinel",
			yaml: "nodes:\n" + n1 + "  n2: {weight: 2}\n",
			path: "nodes.n2.addr", msg: "or a sentinel block",
		},
		{
			name: "sentinel without master",
			yaml: "nodes:\n" + n1 + "  n2: {sentinel: {addrs: [127.0.0.1:26379]}}\n",
			path: "nodes.n2.sentinel.master", msg: "required",
		},
		{
			name: "sentinel without addrs",
			yaml: "nodes:\n" + n1 + "  n2: {sentinel: {master: m}}\n",
			path: "nodes.n2.sentinel.addrs", msg: "at least one sentinel",
		},
		{
			name: "sentinel addr without port",
			yaml: "nodes:\n" + n1 + "  n2: {sentinel: {master: m, addrs: [127.0.0.1:26379, sentinel-b]}}\n",
			path: "nodes.n2.sentinel.addrs[1]", msg: "host:port", bad: "sentinel-b",
		},
		{
			name: "sentinel listed twice",
			yaml: "nodes:\n" + n1 + "  n2: {sentinel: {master: m, addrs: [127.0.0.1:26379, 127.0.0.1:26379]}}\n",
			path: "nodes.n2.sentinel.addrs[1]", msg: "twice", bad: "127.0.0.1:26379",
		},
		{
			name: "master name with a space",
			yaml: "nodes:\n" + n1 + "  n2: {sentinel: {master: 'my master', addrs: [127.0.0.1:26379]}}\n",
			path: "nodes.n2.sentinel.master", msg: "letters, digits", bad: "my master",
		},
		{
			name: "two nodes on one master group",
			yaml: "nodes:\n  n1: {sentinel: {master: m, addrs: [127.0.0.1:26379]}}\n" +
				"  n2: {sentinel: {master: m, addrs: [127.0.0.1:26380, 127.0.0.1:26379]}}\n",
			path: "nodes.n2.sentinel.master", msg: "same master group (same sentinel 127.0.0.1:26379) as node n1", bad: "m",
		},
		{
			name: "unknown sentinel key",
			yaml: "nodes:\n" + n1 + "  n2: {sentinel: {master: m, addrs: [127.0.0.1:26379], adress: x}}\n",
			path: "nodes.n2.sentinel.adress", msg: "unknown key",
		},
		{
			name: "addrs not a list",
			yaml: "nodes:\n" + n1 + "  n2: {sentinel: {master: m, addrs: {a: 1}}}\n",
			path: "nodes.n2.sentinel.addrs", msg: "want a list", bad: "map",
			all: []string{"nodes.n2.sentinel.addrs"},
		},
		{
			name: "node tls with sentinel",
			yaml: "nodes:\n" + n1 + "  n2: {sentinel: {master: m, addrs: [127.0.0.1:26379]}, tls: {enabled: true}}\n",
			path: "nodes.n2.tls", msg: "set sentinel.tls",
		},
		{
			name: "sentinel tls cert without key",
			yaml: "nodes:\n" + n1 + "  n2: {sentinel: {master: m, addrs: [127.0.0.1:26379], tls: {cert_file: /nonexistent/c.pem}}}\n",
			path: "nodes.n2.sentinel.tls", msg: "go together",
			all: []string{"nodes.n2.sentinel.tls", "nodes.n2.sentinel.tls.cert_file"},
		},
		{
			name: "replica reads on a standalone node",
			yaml: "nodes:\n" + n1 + "  n2: {addr: 127.0.0.1:7002, read_from: replica_preferred}\n",
			path: "nodes.n2.read_from", msg: "needs a sentinel block", bad: "replica_preferred",
		},
		{
			name: "unknown read_from",
			yaml: "nodes:\n" + n1 + "  n2: {sentinel: {master: m, addrs: [127.0.0.1:26379]}, read_from: replica}\n",
			path: "nodes.n2.read_from", msg: `"master" or "replica_preferred"`, bad: "replica",
		},
		{
			name: "unknown durability",
			yaml: "nodes:\n" + n1 + "  n2: {addr: 127.0.0.1:7002}\ninventory: {durability: quorum}\n",
			path: "inventory.durability", msg: `"none", "replica" or "aof"`, bad: "quorum",
		},
		{
			name: "durability timeout not below the command timeout",
			yaml: "nodes:\n" + n1 + "  n2: {addr: 127.0.0.1:7002}\nclient: {command_timeout: 1s}\n" +
				"inventory: {durability: replica, durability_timeout: 1s}\n",
			path: "inventory.durability_timeout", msg: "below client.command_timeout (1s)", bad: "1s",
		},
		{
			name: "durability timeout zero",
			yaml: "nodes:\n" + n1 + "  n2: {addr: 127.0.0.1:7002}\ninventory: {durability: aof, durability_timeout: 0s}\n",
			path: "inventory.durability_timeout", msg: "positive", bad: "0s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.yaml+servers2), nil)
			if cfg != nil {
				t.Fatalf("Parse: got a Config, want an error")
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
		})
	}
}

// A sentinel password in a problem is redacted like a node password.
func TestSentinelPasswordRedactedInProblems(t *testing.T) {
	yml := "nodes:\n  n1: {addr: 127.0.0.1:7001}\n  n2: {sentinel: {master: m, addrs: [127.0.0.1:26379], password: [s3cret]}}\n" +
		"servers: {inventory: {routes: {clothes: [n1, n2]}}}\n"
	_, err := Parse([]byte(yml), nil)
	p, ok := findProblem(problemsOf(t, err), "nodes.n2.sentinel.password")
	if !ok {
		t.Fatalf("no problem at nodes.n2.sentinel.password: %v", err)
	}
	if strings.Contains(err.Error(), "s3cret") || valueString(p.Value) != "<redacted>" {
		t.Errorf("sentinel password not redacted: %v", err)
	}
}

// The Sentinel configuration the compose file's "sentinel" profile mounts
// loads as it is.
func TestDockerSentinelConfigLoads(t *testing.T) {
	cfg, err := Load("../docker/shardis-sentinel.yaml")
	if err != nil {
		t.Fatalf("docker/shardis-sentinel.yaml: %v", err)
	}
	if !cfg.Nodes["a"].Sentinel.On() || cfg.Inventory.Durability != DurabilityReplica {
		t.Errorf("docker/shardis-sentinel.yaml: node a %+v, durability %q; want a Sentinel node, replica", cfg.Nodes["a"], cfg.Inventory.Durability)
	}
}
