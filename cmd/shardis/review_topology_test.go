package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
)

// An apply that stops while still migrating (counters held by pending
// parts past --wait) has not finished: it exits non-zero and says to run
// it again; with --json too (the report on stdout, the error on stderr).
// Once the orders are decided, the rerun finishes it and exits 0.
func TestReviewTopologyApplyUnfinishedFails(t *testing.T) {
	srvs := redistest.StartN(t, 4, redistest.Options{})
	addr := startWith(t, srvs[:3], map[string][]string{"clothes": {"n1", "n2", "n3"}}, "")
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "cap", "--qty", "100", "--limit", "2")
	// Pending reservations of 30 users: the quota counters of those whose
	// home moves to n4 wait for them.
	var orders []string
	for i := range 30 {
		id := fmt.Sprintf("o-%d", i)
		ok(t, addr, "reserve", "--order", id, "--user", fmt.Sprintf("u-%d", i), "--ttl", "60s", "clothes:cap:1")
		orders = append(orders, id)
	}
	var addrs []string
	for _, s := range srvs {
		addrs = append(addrs, s.Addr())
	}
	newCfg := writeTopoConfig(t, "new.yaml", addrs, "n1", "n2", "n3", "n4")

	code, out, errOut := cli(t, "topology", "apply", "--config", newCfg, "--wait", "200ms")
	if !strings.Contains(out, "still migrating") {
		t.Fatalf("apply: exit %d; want it to stop still migrating\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if code != 1 || !strings.Contains(errOut, "run it again") {
		t.Errorf("apply stopped still migrating: exit %d, stderr %q; want exit 1 and an error saying to run it again", code, lastLine(errOut))
	}

	// --json: the report alone on stdout, valid JSON, and still exit 1.
	code, out, errOut = cli(t, "topology", "apply", "--config", newCfg, "--wait", "200ms", "--json")
	var rep struct {
		Phase   string
		Waiting int
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Phase != "migrating" || rep.Waiting == 0 {
		t.Fatalf("apply --json: %v, report %+v from %q", err, rep, out)
	}
	if code != 1 || !strings.Contains(errOut, "run it again") {
		t.Errorf("apply --json stopped still migrating: exit %d, stderr %q; want exit 1 and an error saying to run it again", code, lastLine(errOut))
	}

	// A service at the new topology confirms the orders; the rerun finishes.
	addr4 := startWith(t, srvs, map[string][]string{"clothes": {"n1", "n2", "n3", "n4"}}, "")
	for _, id := range orders {
		ok(t, addr4, "confirm", id)
	}
	code, out, errOut = cli(t, "topology", "apply", "--config", newCfg, "--wait", "10s")
	if code != 0 || !strings.Contains(out, "(stable)") {
		t.Fatalf("rerun after the orders were confirmed: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
