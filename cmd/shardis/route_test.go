package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// shardis route prints, from the configuration alone, the node of each key
// of a route, and with --orders the node holding each order's record.
func TestRouteCLI(t *testing.T) {
	p, cfg := routeConfig(t)
	sh := func(stdin string, args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(args, strings.NewReader(stdin), &out, &errb)
		return out.String(), errb.String(), code
	}

	homes, _ := inventory.NewHomes(cfg)
	ids := []string{"o-1", "o-2", "o-3", "o-4", "o-5", "o-6"}
	out, errs, code := sh("", append([]string{"route", "--config", p, "--orders"}, ids...)...)
	if code != 0 {
		t.Fatalf("route --orders = %d: %s", code, errs)
	}
	var want strings.Builder
	seen := map[string]bool{}
	for _, id := range ids {
		h := homes.Home(id)
		seen[h] = true
		want.WriteString(id + "\t" + h + "\n")
	}
	if out != want.String() {
		t.Fatalf("route --orders printed\n%s\nwant\n%s", out, want.String())
	}
	if len(seen) < 2 {
		t.Fatalf("six orders all homed on %v: the test does not tell nodes apart", seen)
	}
	// From stdin, and the key mode of a one-node route.
	if out, _, code = sh("o-1\n\no-2\n", "route", "--config", p, "--orders"); code != 0 || out != strings.Join(strings.SplitAfter(want.String(), "\n")[:2], "") {
		t.Fatalf("route --orders from stdin = %d %q", code, out)
	}
	layout, _ := router.NewLayout(cfg)
	k, _ := layout.Home("inventory", "shoes", "k")
	if out, _, code = sh("", "route", "--config", p, "--server", "inventory", "--route", "shoes", "k"); code != 0 || out != "k\t"+k+"\n" || k != "n2" {
		t.Fatalf("route of a key = %d %q, want k on n2", code, out)
	}
	// An id no order can have has no home: a usage error naming it and
	// what is wrong (it printed a node for the empty id).
	for id, why := range map[string]string{"": "is empty", strings.Repeat("x", inventory.MaxIDLen+1): "bytes, at most", "a\x01": "control byte"} {
		if out, errs, code = sh("", "route", "--config", p, "--orders", id); code != 2 || out != "" || !strings.Contains(errs, why) {
			t.Errorf("route --orders %q = %d %q %q, want a usage error saying %q", id, code, out, errs, why)
		}
	}
	// --orders with a route is a usage error naming the flags.
	if _, errs, code = sh("", "route", "--config", p, "--orders", "--route", "shoes", "o-1"); code != 2 || !strings.Contains(errs, "--orders") {
		t.Fatalf("route --orders --route = %d %q, want a usage error", code, errs)
	}
}

// routeConfig writes a configuration of three nodes (unreachable
// addresses: route reads the configuration only) and an inventory with
// routes clothes (n1, n2, n3) and shoes (n2), and returns its path and
// what it loads as.
func routeConfig(t *testing.T) (string, *config.Config) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	yaml := "nodes:\n  n1: {addr: 127.0.0.1:1}\n  n2: {addr: 127.0.0.1:2}\n  n3: {addr: 127.0.0.1:3}\n" +
		"servers:\n  inventory:\n    routes:\n      clothes: [n1, n2, n3]\n      shoes: [n2]\n"
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, cfg
}
