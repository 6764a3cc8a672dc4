package pgtest

import (
	"context"
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
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatal(err)
	}
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
	conn, err = pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatal(err)
	}
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
