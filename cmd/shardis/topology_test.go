package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
)

// writeTopoConfig writes a configuration with every node of addrs and
// route clothes over members.
func writeTopoConfig(t *testing.T, name string, addrs []string, members ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("nodes:\n")
	for i, a := range addrs {
		fmt.Fprintf(&b, "  n%d: {addr: %q}\n", i+1, a)
	}
	b.WriteString("servers:\n  inventory:\n    routes:\n      clothes: [" + strings.Join(members, ", ") + "]\n")
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTopologyCLI(t *testing.T) {
	srvs := redistest.StartN(t, 4, redistest.Options{})
	var addrs []string
	for _, s := range srvs {
		addrs = append(addrs, s.Addr())
	}
	oldCfg := writeTopoConfig(t, "old.yaml", addrs[:3], "n1", "n2", "n3")
	newCfg := writeTopoConfig(t, "new.yaml", addrs, "n1", "n2", "n3", "n4")
	sh := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(args, strings.NewReader(""), &out, &errb)
		return out.String() + errb.String(), code
	}
	out, code := sh("topology", "show", "--config", oldCfg)
	if code != 0 || !strings.Contains(out, "no node has a topology record") {
		t.Fatalf("show before anything = %d:\n%s", code, out)
	}
	// Without --from the current topology is unknown: refused.
	if out, code = sh("topology", "apply", "--config", newCfg); code != 1 || !strings.Contains(out, "no topology record yet") {
		t.Fatalf("apply with no record and no --from = %d:\n%s", code, out)
	}
	if out, code = sh("topology", "apply", "--config", newCfg, "--from", oldCfg, "--dry-run"); code != 0 || !strings.Contains(out, "dry run: epoch 1 → 2") || !strings.Contains(out, "joined: n4") {
		t.Fatalf("dry run = %d:\n%s", code, out)
	}
	if out, code = sh("topology", "apply", "--config", newCfg); code != 0 || !strings.Contains(out, "applied: epoch 1 → 2 (stable)") {
		t.Fatalf("apply = %d:\n%s", code, out)
	}
	if out, code = sh("topology", "show", "--config", oldCfg); code != 0 || !strings.Contains(out, "NOT the applied topology (epoch 2") {
		t.Fatalf("show with the old config = %d:\n%s", code, out)
	}
	if out, code = sh("topology", "show", "--config", newCfg); code != 0 || !strings.Contains(out, "is the applied topology (epoch 2, stable)") ||
		strings.Count(out, "epoch 2 stable") != 4 {
		t.Fatalf("show with the new config = %d:\n%s", code, out)
	}
	if out, code = sh("topology", "apply", "--config", newCfg); code != 0 || !strings.Contains(out, "already applied at epoch 2") {
		t.Fatalf("second apply = %d:\n%s", code, out)
	}
	if out, code = sh("topology", "bogus"); code != 2 {
		t.Fatalf("topology bogus = %d:\n%s", code, out)
	}
}
