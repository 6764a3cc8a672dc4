package pgtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A server starts (as root too), keeps what was committed across a
// kill -9 and a restart, and refuses a wrong password.
func TestStartKillRestart(t *testing.T) {
	s := Start(t, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := connect(ctx, t, s.URL())
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Fatal("still running after Kill")
	}
	if _, err := pgx.Connect(ctx, s.URL()); err == nil {
		t.Fatal("connected to a killed server")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	conn = connect(ctx, t, s.URL())
	defer conn.Close(ctx)
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after kill -9 and restart: %d %v, want 42", v, err)
	}
	bad := strings.Replace(s.URL(), "s3cret", "wrong", 1)
	if c, err := pgx.Connect(ctx, bad); err == nil {
		c.Close(ctx)
		t.Fatal("a wrong password was accepted")
	}
}

// Two servers copied from one template cluster share nothing: a table
// made on one is not on the other, and the template itself never runs.
func TestServersFromOneTemplateAreApart(t *testing.T) {
	a, b := Start(t, ""), Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ca := connect(ctx, t, a.URL())
	defer ca.Close(ctx)
	if _, err := ca.Exec(ctx, "CREATE TABLE only_a (v int)"); err != nil {
		t.Fatal(err)
	}
	cb := connect(ctx, t, b.URL())
	defer cb.Close(ctx)
	var n int
	if err := cb.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_a'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the second server sees %d tables only_a (%v), want 0", n, err)
	}
	tmpl, err := template("")
	if err != nil {
		t.Fatal(err)
	}
	if a.Dir() == tmpl || b.Dir() == tmpl {
		t.Fatalf("a server runs in the template %s", tmpl)
	}
	if _, err := os.Stat(filepath.Join(tmpl, "postmaster.pid")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the template %s has a postmaster.pid (%v): a server ran in it", tmpl, err)
	}
}

// connect opens a connection to url or fails the test.
func connect(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMain(m *testing.M) {
	code := m.Run()
	if err := StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		code = 1
	}
	os.Exit(code)
}

// Two databases from Shared are on one server and share nothing: a
// table made in one is not in the other; each is dropped when its test
// ends, its open connections closed by the drop.
func TestSharedDatabasesAreApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var urlA string
	var ca *pgx.Conn
	t.Run("a", func(t *testing.T) {
		urlA = Shared(t)
		ca = connect(ctx, t, urlA)
		if _, err := ca.Exec(ctx, "CREATE TABLE only_a (v int)"); err != nil {
			t.Fatal(err)
		}
		urlB := Shared(t)
		if urlA == urlB {
			t.Fatalf("two Shared calls gave one database: %s", urlA)
		}
		cb := connect(ctx, t, urlB)
		defer cb.Close(ctx)
		var n int
		if err := cb.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_a'").Scan(&n); err != nil || n != 0 {
			t.Fatalf("the second database sees %d tables only_a (%v), want 0", n, err)
		}
		if pa, pb := portOf(t, urlA), portOf(t, urlB); pa != pb {
			t.Fatalf("two Shared databases on ports %s and %s, want one server", pa, pb)
		}
	})
	// the subtest's end dropped its database, ca's connection with it
	if c, err := pgx.Connect(ctx, urlA); err == nil {
		c.Close(ctx)
		t.Fatalf("database %s is still there after its test ended", urlA)
	}
	if err := ca.Ping(ctx); err == nil {
		t.Fatal("a connection to a dropped database still answers")
	}
}

// portOf returns the port of a connection URL.
func portOf(t *testing.T, url string) string {
	t.Helper()
	c, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(c.Port)
}
