package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
)

// `shardis serve` logs to the command's stderr, every line with
// component=serve (make run interleaves serve's and sync's lines, and both
// watch the same nodes), and one process logs each node event once. The
// service listen address is taken, so serve stops after opening the nodes.
func TestServeLogsComponentOnce(t *testing.T) {
	srvs := redistest.StartN(t, 2, redistest.Options{})
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var b strings.Builder
	b.WriteString("nodes:\n")
	for i, s := range srvs {
		fmt.Fprintf(&b, "  n%d: {addr: %q}\n", i+1, s.Addr())
	}
	b.WriteString("servers:\n  inventory:\n    routes:\n      clothes: [n1, n2]\n")
	fmt.Fprintf(&b, "service:\n  listen: %q\n", busy.Addr().String())
	p := filepath.Join(t.TempDir(), "serve.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "--config", p}, nil, &out, &errb); code != 1 {
		t.Fatalf("serve on a busy address: exit %d, want 1; stderr:\n%s", code, errb.String())
	}
	logs := errb.String()
	if !strings.Contains(logs, "address already in use") {
		t.Fatalf("serve on a busy address does not say so:\n%s", logs)
	}
	ups := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if !strings.Contains(line, "level=") { // the exit line "shardis: …" is not a log line
			continue
		}
		if !strings.Contains(line, "component=serve") {
			t.Errorf("log line without component=serve: %s", line)
		}
		if strings.Contains(line, `msg="node up"`) {
			for _, n := range []string{"n1", "n2"} {
				if strings.Contains(line, "node="+n) {
					ups[n]++
				}
			}
		}
	}
	for _, n := range []string{"n1", "n2"} {
		if ups[n] != 1 {
			t.Errorf("node %s: %d \"node up\" lines, want 1:\n%s", n, ups[n], logs)
		}
	}
}
