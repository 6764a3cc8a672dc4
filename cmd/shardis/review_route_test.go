package main

import (
	"strings"
	"testing"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// "flags may come before or after the arguments (\"--\" ends them)"
// (shardis help): route takes its flags after the keys too, rather than
// routing "--server" as a key or saying --config is missing.
func TestReviewRouteFlagsAfterKeys(t *testing.T) {
	p, cfg := routeConfig(t)
	layout, _ := router.NewLayout(cfg)
	homes, _ := inventory.NewHomes(cfg)
	var wantKeys, wantOrders strings.Builder
	for _, k := range []string{"k1", "k2"} {
		n, _ := layout.Home("inventory", "clothes", k)
		wantKeys.WriteString(k + "\t" + n + "\n")
		wantOrders.WriteString(k + "\t" + homes.Home(k) + "\n")
	}
	code, out, errOut := cli(t, "route", "k1", "k2", "--config", p, "--server", "inventory", "--route", "clothes")
	if code != 0 || out != wantKeys.String() {
		t.Errorf("route KEYS --config F --server S --route R: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, out, lastLine(errOut), wantKeys.String())
	}
	code, out, errOut = cli(t, "route", "--orders", "k1", "k2", "--config", p)
	if code != 0 || out != wantOrders.String() {
		t.Errorf("route --orders IDS --config F: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, out, lastLine(errOut), wantOrders.String())
	}
	// A flag after the keys is a flag, not a key: here a usage error.
	code, out, errOut = cli(t, "route", "--config", p, "--orders", "k1", "--server", "inventory")
	if code != 2 || strings.Contains(out, "--server") {
		t.Errorf("route --orders ID --server S: exit %d, stdout %q, stderr %q; want exit 2 and no key \"--server\" routed", code, out, lastLine(errOut))
	}
	// After "--", "-k" is a key.
	n, _ := layout.Home("inventory", "clothes", "-k")
	code, out, _ = cli(t, "route", "--config", p, "--server", "inventory", "--route", "clothes", "--", "-k")
	if code != 0 || out != "-k\t"+n+"\n" {
		t.Errorf("route -- -k: exit %d, stdout %q", code, out)
	}
}
