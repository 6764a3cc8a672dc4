package pgtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardis/shardis/internal/pgproc"
)

// sharedMaxConnections is the shared server's max_connections: its
// tests run in parallel (-parallel 4 in make test), each with pools of
// its own and sync subprocesses, where one test's server allows 100.
const sharedMaxConnections = 400

// shared is the server Shared hands databases out on.
var shared struct {
	mu   sync.Mutex // guards the fields below
	srv  *pgproc.Server
	err  error // the first start's failure, returned to every later call
	next int   // the number of the next database
}

// Shared returns the URL of a new, empty database of the calling test's
// own on a PostgreSQL server the test binary shares between its tests
// (password "": loopback connections are trusted). The first call starts
// the server; StopShared, which the package's TestMain calls after
// m.Run, stops it (and the kernel kills it should the binary die first).
// The database is dropped when the test ends, its connections closed by
// the server. A server start costs about a second of CPU, a database a
// few milliseconds: a test that stops, kills, pauses or restarts its
// server, or counts connections server-wide, calls Start instead.
func Shared(t testing.TB) string {
	t.Helper()
	srv, err := sharedServer()
	if errors.Is(err, pgproc.ErrNotFound) {
		t.Fatal(notFoundMsg + ": " + err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	shared.mu.Lock()
	shared.next++
	name := fmt.Sprintf("t%d", shared.next)
	shared.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.CreateDatabase(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropDatabase(ctx, srv, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return srv.DSN(name)
}

// sharedServer returns the shared server, starting it on the first call.
func sharedServer() (*pgproc.Server, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil || shared.err != nil {
		return shared.srv, shared.err
	}
	tmpl, err := template("")
	if err == nil {
		shared.srv, err = pgproc.Start(pgproc.Options{Template: tmpl, KillWithParent: true,
			MaxConnections: sharedMaxConnections})
	}
	shared.err = err
	return shared.srv, err
}

// StopShared stops the server Shared started, if any, and removes its
// data. A Shared call after it fails its test.
func StopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	srv := shared.srv
	shared.srv, shared.err = nil, errors.New("pgtest: the shared server was stopped (StopShared)")
	if srv == nil {
		return nil
	}
	return srv.Close()
}

// dropDatabase drops database name on srv, closing its connections.
func dropDatabase(ctx context.Context, srv *pgproc.Server, name string) error {
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}
