package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/pgtest"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/pgsync"
)

// shardis sync migrate, sync (landing, with /metrics) and sync status
// against a running service's nodes and a real PostgreSQL; the password
// of the DSN comes from SHARDIS_SYNC__DSN.
func TestSyncCommands(t *testing.T) {
	addr, nodes := startService(t, "")
	pg := pgtest.Start(t, "pw-0f-sync")
	metricsPort := redistest.FreePort(t)
	var yml strings.Builder
	yml.WriteString("nodes:\n")
	for i, n := range nodes {
		fmt.Fprintf(&yml, "  n%d: {addr: %s}\n", i+1, n.Addr())
	}
	fmt.Fprintf(&yml, `servers:
  inventory: {routes: {clothes: [n1, n2, n3]}}
sync: {dsn: "postgres://shardis@%s/shardis?sslmode=disable", listen: "127.0.0.1:%d", poll_interval: 20ms, settle_interval: 100ms}
`, pg.Addr(), metricsPort)
	cfgPath := filepath.Join(t.TempDir(), "sync.yaml")
	if err := os.WriteFile(cfgPath, []byte(yml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SHARDIS_SYNC__DSN", pg.URL()) // with the password

	cli := func(args ...string) (int, string, string) {
		var out, errb strings.Builder
		code := run(args, strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, errOut := cli("sync", "status", "--config", cfgPath); code != 1 || !strings.Contains(errOut, "--migrate") {
		t.Fatalf("status before the schema exists: exit %d, %q; want 1 naming --migrate", code, errOut)
	}
	if code, out, errOut := cli("sync", "migrate", "--config", cfgPath); code != 0 || !strings.Contains(out, fmt.Sprintf("version %d", pgsync.SchemaVersion)) {
		t.Fatalf("sync migrate: exit %d, %q %q", code, out, errOut)
	}
	if code, _, errOut := cli("sync", "--config"); code != 2 {
		t.Errorf("sync without a config file: exit %d (%s), want 2", code, errOut)
	}
	for _, args := range [][]string{
		{"stock", "load", "--addr", addr, "--route", "clothes", "--sku", "tee", "--qty", "90"},
		{"reserve", "--addr", addr, "--order", "o-1", "clothes:tee:2"},
		{"reserve", "--addr", addr, "--order", "o-2", "clothes:tee:5"},
		{"confirm", "--addr", addr, "o-1"},
	} {
		if code, out, errOut := cli(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s %s", args, code, out, errOut)
		}
	}

	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cfg.Sync.DSN, "pw-0f-sync") {
		t.Fatalf("SHARDIS_SYNC__DSN did not override sync.dsn")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runSync(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runSync: %v", err)
		}
	}()

	var status []pgsync.NodeStatus
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, out, errOut := cli("sync", "status", "--json", "--config", cfgPath)
		if code != 0 {
			t.Fatalf("sync status: exit %d: %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &status); err != nil {
			t.Fatalf("sync status --json: %v: %q", err, out)
		}
		var lag, pending int64
		for _, n := range status {
			lag += n.Lag
			pending += n.Pending
		}
		if lag == 0 && pending > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sync status never showed everything landed with o-2 pending: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, out, _ := cli("sync", "status", "--config", cfgPath)
	if code != 0 || !strings.Contains(out, "NODE  QUEUE  HEAD  ACKED  LANDED  LAG  PENDING") || !strings.Contains(out, "INCARNATION") {
		t.Errorf("sync status: exit %d:\n%s", code, out)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"shardis_sync_landed_parts_total", "shardis_sync_lag_entries", "shardis_sync_database_up 1"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// /healthz and shardis_sync_database_up of `shardis sync` follow
// PostgreSQL: 200 and 1 while it answers, 503 and 0 while it is stopped
// (with nothing new to land), 200 and 1 again once it is back.
func TestSyncHealthzFollowsDatabase(t *testing.T) {
	_, nodes := startService(t, "")
	pg := pgtest.Start(t, "")
	metricsPort := redistest.FreePort(t)
	var yml strings.Builder
	yml.WriteString("nodes:\n")
	for i, n := range nodes {
		fmt.Fprintf(&yml, "  n%d: {addr: %s}\n", i+1, n.Addr())
	}
	fmt.Fprintf(&yml, `servers:
  inventory: {routes: {clothes: [n1, n2, n3]}}
sync: {dsn: %q, listen: "127.0.0.1:%d", poll_interval: 20ms, settle_interval: 100ms}
`, pg.URL(), metricsPort)
	cfgPath := filepath.Join(t.TempDir(), "sync.yaml")
	if err := os.WriteFile(cfgPath, []byte(yml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runSync(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), true) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runSync: %v", err)
		}
	}()
	base := fmt.Sprintf("http://127.0.0.1:%d", metricsPort)
	probe := func() (int, bool) { // /healthz's code; whether /metrics says database_up 1
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return 0, false
		}
		resp.Body.Close()
		mresp, err := http.Get(base + "/metrics")
		if err != nil {
			return resp.StatusCode, false
		}
		body, _ := io.ReadAll(mresp.Body)
		mresp.Body.Close()
		return resp.StatusCode, strings.Contains(string(body), "\nshardis_sync_database_up 1\n")
	}
	wait := func(what string, d time.Duration, code int, up bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			c, u := probe()
			if c == code && u == up {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting %v for %s: /healthz %d, database_up 1: %v", d, what, c, u)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	wait("the sync to be healthy", 15*time.Second, http.StatusOK, true)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	wait("/healthz 503 and database_up 0 while PostgreSQL is stopped", 5*time.Second, http.StatusServiceUnavailable, false)
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	wait("/healthz 200 and database_up 1 once PostgreSQL is back", 5*time.Second, http.StatusOK, true)
}

// sync status with a wrong password fails at once naming the
// authentication failure; with the right one and nothing to land it logs
// no "node up" lines and prints no empty queue table.
func TestSyncStatusAuthAndQuiet(t *testing.T) {
	nodes := redistest.StartN(t, 2, redistest.Options{})
	pg := pgtest.Start(t, "right-pw")
	write := func(dsn string) string {
		yml := fmt.Sprintf(`nodes:
  n1: {addr: %s}
  n2: {addr: %s}
servers:
  inventory: {routes: {clothes: [n1, n2]}}
sync: {dsn: %q}
`, nodes[0].Addr(), nodes[1].Addr(), dsn)
		p := filepath.Join(t.TempDir(), "sync.yaml")
		if err := os.WriteFile(p, []byte(yml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("SHARDIS_SYNC__DSN", "") // restored after the test
	os.Unsetenv("SHARDIS_SYNC__DSN")
	wrong := write(fmt.Sprintf("postgres://shardis:wrong-pw@%s/shardis?sslmode=disable", pg.Addr()))
	start := time.Now()
	code, _, errOut := cli(t, "sync", "status", "--config", wrong, "--timeout", "20s")
	if code != 1 || !strings.Contains(errOut, "refused the credentials") || !strings.Contains(errOut, "28P01") {
		t.Fatalf("sync status, wrong password: exit %d, stderr %q; want exit 1 naming the refused credentials", code, errOut)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("sync status, wrong password, took %v: want at once, not after --timeout", took)
	}

	right := write(pg.URL())
	if code, out, errOut := cli(t, "sync", "migrate", "--config", right); code != 0 {
		t.Fatalf("sync migrate: exit %d %q %q", code, out, errOut)
	}
	code, out, errOut := cli(t, "sync", "status", "--config", right)
	if code != 0 || strings.Contains(errOut, "node up") || strings.Contains(out, "QUEUE  HEAD") ||
		!strings.Contains(out, "every queue landed, no pending parts") {
		t.Fatalf("sync status: exit %d\nstdout:\n%s\nstderr:\n%s\nwant no \"node up\" and no empty queue table", code, out, errOut)
	}
}

// The status text names every range lost to the database, with its node,
// incarnation, queue and offsets, and only those.
func TestWriteSyncStatusListsGaps(t *testing.T) {
	at := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)
	nodes := []pgsync.NodeStatus{
		{Node: "n1", Incarnation: "i1", Generation: 1},
		{Node: "n2", Incarnation: "i2", Generation: 2, Gaps: []pgsync.GapStatus{
			{Incarnation: "i2", Queue: 6, First: 1, Last: 3, Missing: 3, FoundAt: at},
		}},
	}
	var b strings.Builder
	writeSyncStatus(&b, nodes, false)
	want := "n2 LOST TO THE DATABASE: incarnation i2 queue 6 offsets 1..3, 3 entries trimmed before they landed (found 2026-12-04T08:00:00Z)"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("status text lacks %q:\n%s", want, b.String())
	}
	if strings.Count(b.String(), "LOST TO THE DATABASE") != 1 {
		t.Fatalf("status text lists a gap n1 does not have:\n%s", b.String())
	}
}

// A queue the sync landed up to an entry whose part record cannot be read
// says so in the status text, with the problem (pgsync.QueueStatus.Problem).
func TestWriteSyncStatusShowsUnreadable(t *testing.T) {
	problem := "offset 4: part o|t|0: its record inv:part:o|t|0 cannot be read: WRONGTYPE"
	nodes := []pgsync.NodeStatus{{Node: "n1", Incarnation: "i1", Generation: 1, Lag: 2,
		Queues: []pgsync.QueueStatus{{Queue: 3, Head: 5, Landed: 3, Lag: 2, Problem: problem}}}}
	var b strings.Builder
	writeSyncStatus(&b, nodes, false)
	if !strings.Contains(b.String(), "UNREADABLE PART RECORD: landed up to it: "+problem) {
		t.Fatalf("status text lacks the unreadable record:\n%s", b.String())
	}
}
