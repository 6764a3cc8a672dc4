package main

import (
	"context"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// stock -h, parts -h and node -h (and topology, functions, sync) list
// their subcommands and exit 0 however help is asked for; the
// group alone still exits 2, listing them; the top-level help names node
// accept and order-id.
func TestGroupHelpListsSubcommands(t *testing.T) {
	for group, subs := range map[string][]string{
		"stock": {"stock load", "stock get"},
		"parts": {"parts stuck", "parts retry"},
		"node":  {"node accept"},
	} {
		for _, h := range []string{"-h", "--help", "help"} {
			code, _, errOut := cli(t, group, h)
			if code != 0 {
				t.Errorf("shardis %s %s: exit %d, want 0\n%s", group, h, code, errOut)
			}
			mustContain(t, errOut, subs...)
		}
		code, _, errOut := cli(t, group)
		if code != 2 {
			t.Errorf("shardis %s: exit %d, want 2", group, code)
		}
		mustContain(t, errOut, subs...)
	}
	_, out, _ := cli(t, "help")
	mustContain(t, out, "node accept NODE", "order-id")
	// the groups that talk to the nodes or the database directly: help
	// asked for any way exits 0 (help exited 2 in these), the group alone 2
	for group, subs := range map[string][]string{
		"topology":  {"topology show", "topology apply"},
		"functions": {"functions show", "functions prune"},
		"sync":      {"sync status", "sync migrate"},
	} {
		for _, h := range []string{"-h", "-help", "--help", "help"} {
			code, _, errOut := cli(t, group, h)
			if code != 0 {
				t.Errorf("shardis %s %s: exit %d, want 0\n%s", group, h, code, errOut)
			}
			mustContain(t, errOut, subs...)
		}
		if group == "sync" {
			continue // sync alone lands the redo logs (it needs --config)
		}
		if code, _, _ := cli(t, group); code != 2 {
			t.Errorf("shardis %s: exit %d, want 2", group, code)
		}
	}
}

// `version` from a build without -ldflags prints something better than
// "(devel)": the VCS revision go build stamps, or why there is none.
func TestVersion(t *testing.T) {
	code, out, _ := cli(t, "version")
	if code != 0 || strings.Contains(out, "(devel)") || !strings.HasPrefix(out, "shardis ") {
		t.Fatalf("version: exit %d, %q; want no \"(devel)\"", code, out)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.24.1", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "3f2a9c1d0e4b5a6978"}, {Key: "vcs.time", Value: "2026-11-27T08:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := fromBuildInfo(bi), "devel-3f2a9c1d0e4b (2026-11-27T08:00:00Z, modified)"; got != want {
		t.Errorf("go build: %q, want %q", got, want)
	}
	bi.Main.Version = "v1.2.3"
	if got := fromBuildInfo(bi); got != "v1.2.3" {
		t.Errorf("go install m@v1.2.3: %q", got)
	}
	version = "v9.9.9-3-gabc"
	t.Cleanup(func() { version = "" })
	if _, out, _ := cli(t, "version"); out != "shardis v9.9.9-3-gabc\n" {
		t.Errorf("stamped: %q", out)
	}
}

// Flags are accepted after the arguments (confirm ID --json), "--" ends
// them; order-id mints an id that reserve takes.
func TestFlagsAnywhereAndOrderID(t *testing.T) {
	addr, _ := startService(t, "")
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "tee", "--qty", "5")
	code, idOut, errOut := cli(t, "order-id", "clothes", "--addr", addr)
	id := strings.TrimSpace(idOut)
	if code != 0 || id == "" || strings.Contains(id, "\n") || !strings.Contains(errOut, "its record goes to node n") {
		t.Fatalf("order-id: exit %d, stdout %q, stderr %q", code, idOut, errOut)
	}
	if code, out, errOut := cli(t, "reserve", "clothes:tee:1", "--order", id, "--addr", addr); code != 0 {
		t.Fatalf("reserve with flags after the item: exit %d %q %q", code, out, errOut)
	}
	code, out, errOut := cli(t, "confirm", id, "--json", "--addr", addr)
	if code != 0 {
		t.Fatalf("confirm ID --json: exit %d %q %q", code, out, errOut)
	}
	if res := decodeLine(t, out, &v1.ConfirmResponse{}); res.OrderId != id || res.Status != v1.OrderStatus_ORDER_STATUS_CONFIRMED {
		t.Fatalf("confirm ID --json: %v", res)
	}
	// After "--", "-x" is an argument (an order id), not a flag.
	if code, out, errOut := cli(t, "cancel", "--addr", addr, "--", "-x"); code != 0 || out != "order -x: cancelled (tombstone)\n" {
		t.Fatalf("cancel -- -x: exit %d %q %q", code, out, errOut)
	}
}

// Draining the last enabled node of a route is refused, naming the
// route, unless --force.
func TestDrainLastEnabledNode(t *testing.T) {
	t.Setenv(tokenEnv, "")
	nodes := redistest.StartN(t, 2, redistest.Options{})
	addr := startWith(t, nodes, map[string][]string{"clothes": {"n1", "n2"}, "caps": {"n2"}}, "")
	ok(t, addr, "drain", "n1", "inventory", "clothes")
	fails(t, 1, "last enabled node of the route inventory/clothes", "drain", "--addr", addr, "n2", "inventory", "clothes")
	fails(t, 1, "last enabled node of the route inventory/caps", "drain", "--addr", addr, "n2", "inventory", "caps")
	if out := ok(t, addr, "status"); strings.Count(out, "(drained)") != 1 {
		t.Fatalf("a refused drain drained:\n%s", out)
	}
	out := ok(t, addr, "drain", "n2", "inventory", "clothes", "--force")
	mustContain(t, out, "n2: inventory/clothes drained")
	// Draining an already drained node is not "the last one".
	ok(t, addr, "drain", "n1", "inventory", "clothes")
}

// A follower of an idle queue says on stderr that it waits.
func TestRedoFollowSaysWaiting(t *testing.T) {
	addr, _ := startService(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runClient(ctx, "redo-log", []string{"--addr", addr, "--node", "n1", "--queue", "0", "--follow"}, &out, &errOut)
	}()
	waitFor(t, &errOut, "inv:redo:0 on n1: no entries after offset 0; waiting for new ones")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("follow: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not stop")
	}
	if out.String() != "" {
		t.Fatalf("stdout %q: want nothing (no entries)", out.String())
	}
}
