package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/pgtest"
	"github.com/shardis/shardis/internal/redistest"
)

// sync status and sync migrate refuse a --timeout that is not positive as
// a usage error naming it (as the client commands do), rather than
// reporting PostgreSQL unreachable after a deadline that passed at once.
func TestReviewSyncTimeoutValidated(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.yaml")
	yml := "nodes:\n  n1: {addr: 127.0.0.1:1}\nservers:\n  inventory: {routes: {clothes: [n1]}}\n" +
		"sync: {dsn: \"postgres://shardis@127.0.0.1:1/shardis?sslmode=disable\"}\n"
	if err := os.WriteFile(p, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"status", "migrate"} {
		for _, d := range []string{"0s", "-5s"} {
			code, _, errOut := cli(t, "sync", sub, "--config", p, "--timeout", d)
			if code != 2 || !strings.Contains(errOut, "--timeout "+d) || strings.Contains(errOut, "PostgreSQL") {
				t.Errorf("sync %s --timeout %s: exit %d, stderr %q; want exit 2 naming --timeout %s", sub, d, code, lastLine(errOut), d)
			}
		}
	}
}

// A flag given to a form of sync it does nothing for, and an argument
// after the flags, are usage errors naming them (they were accepted and
// ignored: `sync status --migrate` migrated nothing, `sync --json` printed
// no JSON; `sync --config F status` blamed --config).
func TestSyncRefusesFlagsItIgnores(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.yaml")
	for _, c := range []struct {
		args string // "CFG" stands for --config and the file
		want string
	}{
		{"sync status --migrate CFG", "--migrate applies to shardis sync (the landing) only"},
		{"sync --json CFG", "--json applies to shardis sync status only"},
		{"sync migrate --all CFG", "--all applies to shardis sync status only"},
		{"sync --timeout -1s CFG", "--timeout applies to shardis sync status or shardis sync migrate only"},
		{"sync CFG status", `unexpected argument "status"`},
	} {
		var args []string
		for _, a := range strings.Fields(c.args) {
			if a == "CFG" {
				args = append(args, "--config", p)
			} else {
				args = append(args, a)
			}
		}
		code, _, errOut := cli(t, args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("shardis %s: exit %d, stderr %q; want exit 2 with %q", strings.Join(args, " "), code, lastLine(errOut), c.want)
		}
	}
}

// sync status quiets the router's info lines by default, but a
// --log-level given explicitly is the level it logs at.
func TestReviewSyncStatusHonoursLogLevel(t *testing.T) {
	_, p := migratedSync(t, "review-pw")
	code, _, errOut := cli(t, "sync", "status", "--config", p)
	if code != 0 || strings.Contains(errOut, "node up") {
		t.Fatalf("sync status: exit %d, stderr %q; want no \"node up\" by default", code, errOut)
	}
	code, _, errOut = cli(t, "sync", "status", "--config", p, "--log-level", "info")
	if code != 0 || !strings.Contains(errOut, "node up") {
		t.Errorf("sync status --log-level info: exit %d, stderr %q; want the info lines (\"node up\")", code, errOut)
	}
}

// migratedSync starts two real redis-server nodes and a PostgreSQL whose
// password is pw, writes a configuration of an inventory over both with
// sync.dsn given by SHARDIS_SYNC__DSN, and runs sync migrate on it. It
// returns the nodes and the configuration's path.
func migratedSync(t *testing.T, pw string) ([]*redistest.Server, string) {
	t.Helper()
	nodes := redistest.StartN(t, 2, redistest.Options{})
	pg := pgtest.Start(t, pw)
	t.Setenv("SHARDIS_SYNC__DSN", pg.URL())
	yml := fmt.Sprintf("nodes:\n  n1: {addr: %s}\n  n2: {addr: %s}\nservers:\n  inventory: {routes: {clothes: [n1, n2]}}\n",
		nodes[0].Addr(), nodes[1].Addr())
	p := filepath.Join(t.TempDir(), "sync.yaml")
	if err := os.WriteFile(p, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli(t, "sync", "migrate", "--config", p); code != 0 {
		t.Fatalf("sync migrate: exit %d %q %q", code, out, errOut)
	}
	return nodes, p
}
