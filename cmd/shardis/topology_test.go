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
	// The dry run wrote nothing: without --from the apply is still refused.
	if out, code = sh("topology", "apply", "--config", newCfg); code != 1 || !strings.Contains(out, "no topology record yet") {
		t.Fatalf("apply with no --from after a dry run = %d:\n%s", code, out)
	}
	if out, code = sh("topology", "apply", "--config", newCfg, "--from", oldCfg); code != 0 || !strings.Contains(out, "applied: epoch 1 → 2 (stable)") {
		t.Fatalf("apply = %d:\n%s", code, out)
	}
	if out, code = sh("topology", "show", "--config", oldCfg); code != 0 || !strings.Contains(out, "NOT the applied topology (epoch 2") {
		t.Fatalf("show with the old config = %d:\n%s", code, out)
	}
	if out, code = sh("topology", "show", "--config", newCfg); code != 0 || !strings.Contains(out, "is the applied topology (epoch 2, stable)") ||
		strings.Count(out, "epoch 2 stable") != 4 || strings.Contains(out, "behind epoch") || strings.Contains(out, "has not finished") {
		t.Fatalf("show with the new config = %d:\n%s", code, out)
	}
	if out, code = sh("topology", "apply", "--config", newCfg); code != 0 || !strings.Contains(out, "already applied at epoch 2") {
		t.Fatalf("second apply = %d:\n%s", code, out)
	}

	// n2 goes back to its epoch-2 record after the removal of n4 (as a
	// copy older than the last apply, accepted, would): show names it,
	// and the apply of the current topology brings it forward.
	ctx := t.Context()
	c2 := srvs[1].Client(t)
	token2 := c2.HGet(ctx, "shardis:node", "epoch").Val()
	record2 := c2.Dump(ctx, "shardis:topology").Val()
	if out, code = sh("topology", "apply", "--config", oldCfg, "--from", newCfg); code != 0 || !strings.Contains(out, "applied: epoch 2 → 3 (stable)") {
		t.Fatalf("apply of the removal = %d:\n%s", code, out)
	}
	if err := c2.HSet(ctx, "shardis:node", "epoch", token2).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c2.RestoreReplace(ctx, "shardis:topology", 0, record2).Err(); err != nil {
		t.Fatal(err)
	}
	out, code = sh("topology", "show", "--config", oldCfg)
	if code != 0 || !strings.Contains(out, "behind epoch 3: n2 (epoch 2)") || !strings.Contains(out, "shardis topology apply") {
		t.Fatalf("show with n2 behind = %d:\n%s", code, out)
	}
	// n4 left with the last apply: the apply of the current topology
	// needs neither its address (no --from) nor an answer from it.
	srvs[3].Stop()
	if out, code = sh("topology", "apply", "--config", oldCfg); code != 0 || !strings.Contains(out, "brought forward to epoch 3: n2") {
		t.Fatalf("apply bringing n2 forward = %d:\n%s", code, out)
	}
	out, code = sh("topology", "show", "--config", oldCfg)
	if code != 0 || strings.Contains(out, "behind epoch") || strings.Count(out, "epoch 3 stable") != 3 {
		t.Fatalf("show after n2 was brought forward = %d:\n%s", code, out)
	}
	if out, code = sh("topology", "bogus"); code != 2 {
		t.Fatalf("topology bogus = %d:\n%s", code, out)
	}
}
