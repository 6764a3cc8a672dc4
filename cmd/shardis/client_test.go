package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/service"
	"github.com/shardis/shardis/internal/syncbuf"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// startService starts 3 redis nodes (n1..n3) and a service routing
// inventory/clothes over them; it returns the service's address and the
// nodes.
func startService(t *testing.T, token string) (string, []*redistest.Server) {
	t.Helper()
	t.Setenv(tokenEnv, "")
	redis := redistest.StartN(t, 3, redistest.Options{})
	var names []string
	for i := range redis {
		names = append(names, fmt.Sprintf("n%d", i+1))
	}
	return startWith(t, redis, map[string][]string{"clothes": names}, token), redis
}

// startWith starts a service over nodes (named n1, n2, …) with the given
// inventory routes and auth token ("" for none) and returns its address;
// it is shut down when the test ends.
func startWith(t *testing.T, nodes []*redistest.Server, routes map[string][]string, token string) string {
	t.Helper()
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	for i, s := range nodes {
		cfg.Nodes[fmt.Sprintf("n%d", i+1)] = config.Node{Addr: s.Addr(), Weight: 1}
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: routes}}
	cfg.Service.Listen = "127.0.0.1:0"
	cfg.Service.AuthToken = token
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv, err := service.Start(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("service.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return srv.Addr()
}

// syncBuffer is a bytes.Buffer safe to write and read concurrently.
type syncBuffer = syncbuf.Buffer

// cli runs shardis with args and returns the exit status and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// withFlags inserts flags right after the command words.
func withFlags(args []string, flags ...string) []string {
	n := 1
	if args[0] == "stock" || args[0] == "parts" || args[0] == "node" || (args[0] == "redo-log" && len(args) > 1 && args[1] == "ack") {
		n = 2
	}
	out := append([]string{}, args[:n]...)
	out = append(out, flags...)
	return append(out, args[n:]...)
}

// ok runs shardis against addr and fails the test unless it exits 0.
func ok(t *testing.T, addr string, args ...string) string {
	t.Helper()
	args = withFlags(args, "--addr", addr)
	code, out, errOut := cli(t, args...)
	if code != 0 {
		t.Fatalf("shardis %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// okJSON runs a command with --json and decodes its single output line.
func okJSON[M proto.Message](t *testing.T, addr string, m M, args ...string) M {
	t.Helper()
	return decodeLine(t, ok(t, addr, withFlags(args, "--json")...), m)
}

func decodeLine[M proto.Message](t *testing.T, line string, m M) M {
	t.Helper()
	if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
		t.Fatalf("want one JSON line, got %q", line)
	}
	if err := protojson.Unmarshal([]byte(line), m); err != nil {
		t.Fatalf("decoding %q: %v", line, err)
	}
	return m
}

// fails runs shardis and fails the test unless it exits with code and
// stderr contains want.
func fails(t *testing.T, code int, want string, args ...string) string {
	t.Helper()
	got, out, errOut := cli(t, args...)
	if got != code || !strings.Contains(errOut, want) {
		t.Fatalf("shardis %s: exit %d, stdout %q, stderr %q; want exit %d with %q",
			strings.Join(args, " "), got, out, errOut, code, want)
	}
	return errOut
}

func mustContain(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestClientCommands(t *testing.T) {
	addr, redis := startService(t, "")
	url := "http://" + addr

	// status
	out := ok(t, addr, "status")
	mustContain(t, out, "NAME", "FAILED_PROBES", "ROUTES", "inventory/clothes", "\nn1 ", "\nn3 ")
	if strings.Count(out, " UP ") != 3 {
		t.Fatalf("want 3 nodes UP:\n%s", out)
	}
	nodes := okJSON(t, url, &v1.ListNodesResponse{}, "status")
	if len(nodes.Nodes) != 3 || nodes.Nodes[0].State != v1.NodeState_NODE_STATE_UP {
		t.Fatalf("status --json: %v", nodes)
	}

	// stock load / get
	out = ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "tshirt-1", "--qty", "10")
	mustContain(t, out, "sku tshirt-1: available 10, reserved 0, confirmed 0, loaded 10",
		"NODE", "REACHABLE", "LOADED")
	if strings.Count(out, " yes ") != 3 {
		t.Fatalf("want 3 reachable nodes:\n%s", out)
	}
	ld := okJSON(t, addr, &v1.LoadStockResponse{}, "stock", "load", "--route", "clothes", "--sku", "cap", "--qty", "5", "--limit", "2")
	if ld.Stock.Loaded != 5 || ld.Stock.PerUserLimit != 2 || len(ld.Stock.Nodes) != 3 {
		t.Fatalf("stock load --json: %v", ld)
	}
	// --qty 0 with --limit changes only the limit; a restock without --limit keeps it.
	ld = okJSON(t, addr, &v1.LoadStockResponse{}, "stock", "load", "--route", "clothes", "--sku", "cap", "--qty", "0", "--limit", "3")
	if ld.Stock.Loaded != 5 || ld.Stock.PerUserLimit != 3 {
		t.Fatalf("stock load --qty 0 --limit 3: %v, want limit 3 and still 5 loaded", ld)
	}
	ld = okJSON(t, addr, &v1.LoadStockResponse{}, "stock", "load", "--route", "clothes", "--sku", "cap", "--qty", "1")
	if ld.Stock.Loaded != 6 || ld.Stock.PerUserLimit != 3 {
		t.Fatalf("stock load --qty 1 (no --limit): %v, want limit 3 kept and 6 loaded", ld)
	}
	out = ok(t, addr, "stock", "get", "--route", "clothes", "--sku", "tshirt-1")
	mustContain(t, out, "available 10,", "loaded 10")

	// reserve, confirm, stock get shows it confirmed
	out = ok(t, addr, "reserve", "--order", "o1", "--user", "u1", "--ttl", "30s", "clothes:tshirt-1:2")
	mustContain(t, out, "order o1 reserved until", "REDO_LOG", "tshirt-1")
	res := okJSON(t, addr, &v1.ReserveResponse{}, "reserve", "--order", "o2", "--user", "u1", "clothes:tshirt-1:3", "clothes:cap:1")
	var units int64
	for _, r := range res.Receipts {
		units += r.Quantity
		if r.Offset <= 0 || r.RedoLog == "" || r.Node == "" {
			t.Fatalf("receipt %v", r)
		}
	}
	if res.OrderId != "o2" || units != 4 || res.DeadlineUnixMs <= time.Now().UnixMilli() {
		t.Fatalf("reserve --json: %v", res)
	}
	out = ok(t, addr, "confirm", "o1")
	if out != "order o1: confirmed\n" {
		t.Fatalf("confirm: %q", out)
	}
	conf := okJSON(t, addr, &v1.ConfirmResponse{}, "confirm", "o1")
	if conf.Status != v1.OrderStatus_ORDER_STATUS_CONFIRMED || conf.PendingParts != 0 {
		t.Fatalf("confirm --json: %v", conf)
	}
	out = ok(t, addr, "stock", "get", "--route", "clothes", "--sku", "tshirt-1")
	mustContain(t, out, "available 5, reserved 3, confirmed 2, loaded 10")

	// cancel: a reserved order, then an unknown one (tombstone)
	if out = ok(t, addr, "cancel", "o2"); out != "order o2: cancelled\n" {
		t.Fatalf("cancel: %q", out)
	}
	st := okJSON(t, addr, &v1.GetStockResponse{}, "stock", "get", "--route", "clothes", "--sku", "tshirt-1")
	if st.Stock.Available != 8 || st.Stock.Reserved != 0 || st.Stock.Confirmed != 2 {
		t.Fatalf("stock after cancel: %v", st)
	}
	out = ok(t, addr, "cancel", "ghost")
	if out != "order ghost: cancelled (tombstone)\n" {
		t.Fatalf("cancel unknown: %q", out)
	}
	canc := okJSON(t, addr, &v1.CancelResponse{}, "cancel", "ghost2")
	if canc.Reason != "tombstone" || canc.Status != v1.OrderStatus_ORDER_STATUS_CANCELLED {
		t.Fatalf("cancel --json: %v", canc)
	}

	// RPC errors: code and message, exit 1
	fails(t, 1, "shardis: failed_precondition: ", "reserve", "--addr", addr, "--order", "ghost", "clothes:tshirt-1:1")
	fails(t, 1, `shardis: invalid_argument: `, "stock", "get", "--addr", addr, "--route", "nope", "--sku", "x")

	// drain / undrain
	out = ok(t, addr, "drain", "n1", "inventory", "clothes")
	mustContain(t, out, "n1: inventory/clothes drained", "SERVER", "clothes  drained")
	out = ok(t, addr, "status")
	mustContain(t, out, "inventory/clothes(drained)")
	if strings.Count(out, "(drained)") != 1 {
		t.Fatalf("want only n1 drained:\n%s", out)
	}
	sr := okJSON(t, addr, &v1.SetRouteEnabledResponse{}, "undrain", "n1", "inventory", "clothes")
	if sr.Node.Name != "n1" || len(sr.Node.Routes) != 1 || !sr.Node.Routes[0].Enabled {
		t.Fatalf("undrain --json: %v", sr)
	}
	if out := ok(t, addr, "status"); strings.Contains(out, "drained") {
		t.Fatalf("still drained:\n%s", out)
	}
	fails(t, 1, "shardis: invalid_argument: ", "drain", "--addr", addr, "n9", "inventory", "clothes")

	// redo-log lists o2's entries at their offsets
	var rc *v1.Receipt
	for _, r := range res.Receipts {
		if r.SkuId == "tshirt-1" {
			rc = r
		}
	}
	out = ok(t, addr, "redo-log", "--node", rc.Node, "--queue", rc.RedoLog)
	mustContain(t, out, rc.RedoLog+" on "+rc.Node+":", "OFFSET", "PART", fmt.Sprintf("\n%d ", rc.Offset), " o2 ")
	rl := okJSON(t, addr, &v1.ReadRedoLogResponse{}, "redo-log", "--node", rc.Node, "--queue", rc.RedoLog, "--limit", "1000")
	found := false
	for _, e := range rl.Entries {
		found = found || (e.Offset == rc.Offset && e.OrderId == "o2" && e.SkuId == rc.SkuId)
	}
	if !found || rl.RedoLog != rc.RedoLog {
		t.Fatalf("redo-log --json lacks offset %d of o2: %v", rc.Offset, rl)
	}
	last := rl.Entries[len(rl.Entries)-1].Offset
	out = ok(t, addr, "redo-log", "--node", rc.Node, "--queue", rc.RedoLog, "--after", fmt.Sprint(last))
	mustContain(t, out, fmt.Sprintf("no entries after offset %d", last))

	t.Run("follow", func(t *testing.T) { testFollow(t, addr, rc.Node, rc.RedoLog, last) })

	// A dead node: partial stock totals printed, n3 named on stderr, exit
	// 1 (review3_stockget_test.go); status shows it DOWN with its reason.
	redis[2].Kill()
	code, out, errOut := cli(t, "stock", "get", "--addr", addr, "--route", "clothes", "--sku", "tshirt-1")
	if code != 1 || !strings.Contains(errOut, "node n3 could not be read") {
		t.Fatalf("stock get with n3 dead: exit %d, stderr %q; want 1 naming n3", code, errOut)
	}
	mustContain(t, out, "totals are partial: 1 of 3 nodes unreachable", "\nn3    no ", "\nn3: ")
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out, "n3 DOWN: "); {
		if time.Now().After(deadline) {
			t.Fatalf("n3 not reported DOWN:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
		out = ok(t, addr, "status")
	}
	mustContain(t, out, " DOWN ", redis[2].Addr())
}

// testFollow follows a redo log, makes a new entry appear on it and stops
// the follower with SIGINT.
func testFollow(t *testing.T, addr, node, redoLog string, after int64) {
	var out, errOut syncBuffer
	done := make(chan int, 1)
	args := []string{"redo-log", "--addr", addr, "--json", "--node", node, "--queue", redoLog,
		"--after", fmt.Sprint(after - 1), "--follow"}
	go func() { done <- run(args, strings.NewReader(""), &out, &errOut) }()
	waitFor(t, &out, fmt.Sprintf(`"offset":"%d"`, after))

	// Send the next reservation of the SKU to the followed node: drain
	// the others.
	var others []string
	for _, n := range []string{"n1", "n2", "n3"} {
		if n != node {
			others = append(others, n)
			ok(t, addr, "drain", n, "inventory", "clothes")
		}
	}
	res := okJSON(t, addr, &v1.ReserveResponse{}, "reserve", "--order", "o3", "clothes:tshirt-1:1")
	for _, n := range others {
		ok(t, addr, "undrain", n, "inventory", "clothes")
	}
	if len(res.Receipts) != 1 || res.Receipts[0].Node != node || res.Receipts[0].RedoLog != redoLog {
		t.Fatalf("o3 was not reserved on %s %s: %v", node, redoLog, res)
	}
	waitFor(t, &out, fmt.Sprintf(`"offset":"%d"`, res.Receipts[0].Offset))

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("follow after SIGINT: exit %d, stderr %q", code, errOut.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not stop on SIGINT")
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON lines (the existing entry, then o3's), got:\n%s", out.String())
	}
	for _, l := range lines {
		r := decodeLine(t, l+"\n", &v1.ReadRedoLogResponse{})
		if len(r.Entries) != 1 {
			t.Fatalf("want one entry per poll: %v", r)
		}
	}
}

func waitFor(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("output lacks %q after 5s:\n%s", want, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestClientAuth(t *testing.T) {
	const secret = "s3cret-token"
	addr, _ := startService(t, secret)
	errOut := fails(t, 1, "shardis: unauthenticated: ", "status", "--addr", addr, "--token", "wrong-token")
	if strings.Contains(errOut, "wrong-token") {
		t.Fatalf("token printed: %q", errOut)
	}
	fails(t, 1, "shardis: unauthenticated: ", "status", "--addr", addr)
	ok(t, addr, "status", "--token", secret)
	t.Setenv(tokenEnv, secret)
	if out := ok(t, addr, "status"); !strings.Contains(out, "n1") || strings.Contains(out, secret) {
		t.Fatalf("status with $%s: %q", tokenEnv, out)
	}
	// An explicit --token wins over the environment.
	fails(t, 1, "unauthenticated", "status", "--addr", addr, "--token", "other")
	// The help text says where the token comes from, never its value.
	if errOut := fails(t, 0, "$"+tokenEnv, "status", "-h"); strings.Contains(errOut, secret) {
		t.Fatalf("token printed: %q", errOut)
	}
}

func TestClientUnavailable(t *testing.T) {
	t.Setenv(tokenEnv, "")
	start := time.Now()
	// Nothing listens on a free port.
	fails(t, 1, "shardis: unavailable: ", "status", "--addr", fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t)))
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("closed port took %v", d)
	}
}

func TestClientUsage(t *testing.T) {
	t.Setenv(tokenEnv, "")
	for _, tc := range []struct {
		code       int
		want, args string
	}{
		{2, `unknown command "frobnicate"`, "frobnicate"},
		{2, `item "clothes-tshirt"`, "reserve --order o clothes:tshirt-1:2 clothes-tshirt"},
		{2, `item "clothes:tshirt-1:zero"`, "reserve --order o clothes:tshirt-1:zero"},
		{2, `item "clothes::1"`, "reserve --order o clothes::1"},
		{2, "needs --order", "reserve clothes:a:1"},
		{2, "wrong number of arguments", "reserve --order o"},
		{2, "--ttl", "reserve --order o --ttl 1500ms c:s:1"},
		{2, "load or get", "stock"},
		{2, "load or get", "stock put"},
		{2, "stock load needs --qty", "stock load --route r --sku s"}, // the command, not its group
		{2, "not defined", "stock get --nope"},
		{2, "wrong number of arguments", "confirm"},
		{2, "wrong number of arguments", "cancel o1 o2 --json"},
		{2, "wrong number of arguments", "drain n1 inventory"},
		{2, "--addr", "status --addr ftp://host:1"},
		{2, "--timeout", "status --timeout 0s"},
		{2, "needs --queue", "redo-log --node n1"},
		{2, `--queue "x"`, "redo-log --node n1 --queue x"},
		{0, "usage: shardis confirm", "confirm -h"},
	} {
		fails(t, tc.code, tc.want, strings.Fields(tc.args)...)
	}
	if code, out, _ := cli(t, "help"); code != 0 || !strings.Contains(out, "redo-log") {
		t.Errorf("help: exit %d, %q", code, out)
	}
}

func TestParseItem(t *testing.T) {
	if it, err := parseItem("clothes:ns:sku:7"); err != nil || it.RouteKey != "clothes" || it.SkuId != "ns:sku" || it.Quantity != 7 {
		t.Fatalf("parseItem: %v %v", it, err)
	}
	for _, in := range append(strings.Fields("a a:b :b:1 a::1 a:b:-1 a:b:0 a:b:"), "") {
		if _, err := parseItem(in); err == nil {
			t.Errorf("parseItem(%q): no error", in)
		}
	}
}

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1:7400": "http://127.0.0.1:7400",
		"localhost:1": "http://localhost:1", "http://h:1/": "http://h:1", "https://h:1/p": "https://h:1/p",
		"[::1]:7400": "http://[::1]:7400", "ftp://h:1": "", "http://": "", "": ""} {
		got, err := baseURL(in)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("baseURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
