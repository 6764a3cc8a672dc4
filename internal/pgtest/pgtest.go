// Package pgtest starts a real PostgreSQL server for a test: a thin
// testing.TB wrapper over internal/pgproc. The server runs on a free
// loopback port from a fresh data directory (initdb), with fsync off
// (a killed server still keeps every committed transaction), as the user
// "postgres" when the test runs as root. A t.Cleanup stops it and removes
// its data; on Linux the kernel also kills it if the test binary dies
// without cleaning up.
//
// Each server's data directory is a copy of a template cluster, made by
// initdb once per machine for each user and superuser password and kept in
// os.TempDir() as shardis-pgtest-<hash> (about 40 MB each; delete them
// freely): initdb costs about 2.4 s of CPU, the copy a third of that.
// A server's start and stop cost about a second of CPU more: a package
// whose tests each need a database but not a server of their own takes
// one from Shared, one server per test binary (pgsync's forty-odd tests).
//
// When the server binaries are missing the test fails (it does not skip):
// `make test` installs Debian's postgresql package first (`make deps-pg`),
// as it does redis-server.
package pgtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/pgproc"
)

// DB is the database Start creates.
const DB = "shardis"

// notFoundMsg is the fatal message when PostgreSQL is not installed.
const notFoundMsg = "PostgreSQL server binaries not found (Debian's postgresql package: /usr/lib/postgresql/*/bin); run `make test` or `make deps-pg`, which install it"

// Server is one PostgreSQL server of a test.
type Server struct {
	*pgproc.Server
}

// Start starts a server with database DB and returns once it accepts
// connections; it fails the test when it cannot. password "" trusts
// loopback connections.
func Start(t testing.TB, password string) *Server {
	t.Helper()
	tmpl, err := template(password)
	var srv *pgproc.Server
	if err == nil {
		srv, err = pgproc.Start(pgproc.Options{Password: password, Template: tmpl, KillWithParent: true})
	}
	if errors.Is(err, pgproc.ErrNotFound) {
		t.Fatal(notFoundMsg + ": " + err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.CreateDatabase(ctx, DB); err != nil {
		t.Fatal(err)
	}
	return &Server{srv}
}

// URL returns the connection URL of database DB.
func (s *Server) URL() string { return s.DSN(DB) }
