package pgproc

import (
	"errors"
	"testing"
)

// A server started on a port another PostgreSQL server holds must not be
// taken as ready when the other one answers: the postmaster fails to bind
// and exits, but until it does the other server answers on the port, and
// a caller told "ready" then works on another test's server (a CI flake:
// two packages' tests creating database shardis on one server, "duplicate
// key value violates unique constraint", and a sync test whose server
// went away with the other test). waitReady checks the data directory of
// whoever answers.
func TestWaitReadyRefusesAnotherServer(t *testing.T) {
	a, err := Start(Options{KillWithParent: true})
	if err != nil {
		t.Fatal(err) // make test installs PostgreSQL (make deps-pg)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := a.waitReady(a.proc); err != nil {
		t.Fatalf("waitReady of the server started: %v, want nil", err)
	}

	// b: a server meant to run on another data directory at a's port,
	// whose postmaster has not exited yet.
	b, err := newServer(a.opts)
	if err != nil {
		t.Fatal(err)
	}
	b.port, b.dir = a.port, t.TempDir()
	running := &process{pid: -1, done: make(chan struct{})}
	err = b.waitReady(running)
	if !errors.Is(err, errOtherServer) {
		t.Fatalf("waitReady with another server on the port: %v, want errOtherServer", err)
	}
}
