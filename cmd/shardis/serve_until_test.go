package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// fakeServer stands for a started service: its listener's result is
// whatever the test sends on done; Shutdown records that it ran.
type fakeServer struct {
	done     chan error
	shutdown chan time.Duration // how long Shutdown's context had left
	err      error
}

func (f *fakeServer) Done() <-chan error { return f.done }

func (f *fakeServer) Shutdown(ctx context.Context) error {
	dl, _ := ctx.Deadline()
	f.shutdown <- time.Until(dl)
	return f.err
}

// A listener that fails still gets the server shut down, within the
// shutdown timeout: before, serve returned at once and the libraries were
// never closed (no witness marks written on the peers, buffered commits
// and the reconciler's lease left behind). The listener's error is the
// command's error, and a failed shutdown is reported beside it.
func TestServeUntilShutsDownWhenTheListenerFails(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, shutErr := range []error{nil, errors.New("in-flight calls cut off")} {
		f := &fakeServer{done: make(chan error, 1), shutdown: make(chan time.Duration, 1), err: shutErr}
		f.done <- errors.New("accept: too many open files")
		stopped := false
		err := serveUntil(context.Background(), func() { stopped = true }, f, 3*time.Second, log)
		select {
		case left := <-f.shutdown:
			if left <= 0 || left > 3*time.Second {
				t.Errorf("Shutdown ran with %v left, want within the 3s shutdown timeout", left)
			}
		default:
			t.Fatal("the listener failed and Shutdown never ran")
		}
		if !stopped {
			t.Error("signal handling not stopped")
		}
		if err == nil || !strings.Contains(err.Error(), "serve: accept: too many open files") {
			t.Errorf("error %v, want the listener's", err)
		}
		if shutErr != nil && !errors.Is(err, shutErr) {
			t.Errorf("error %v, want the shutdown's failure beside the listener's", err)
		}
	}
}

// A signal shuts the server down and the command succeeds.
func TestServeUntilShutsDownOnSignal(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := &fakeServer{done: make(chan error, 1), shutdown: make(chan time.Duration, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := serveUntil(ctx, func() {}, f, time.Second, log); err != nil {
		t.Fatalf("serveUntil after a signal: %v", err)
	}
	if len(f.shutdown) != 1 {
		t.Fatal("Shutdown did not run after the signal")
	}
}

// serve takes no positional arguments: a stray word (a second config file
// meant as --config, a subcommand typed after it) is a usage error naming
// it, exit 2, before anything starts. Before, it was ignored.
func TestServeRefusesArguments(t *testing.T) {
	var out, errb strings.Builder
	code := run([]string{"serve", "--config", "/nonexistent.yaml", "extra.yaml"}, strings.NewReader(""), &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), `"extra.yaml"`) {
		t.Fatalf("serve with an extra argument: exit %d, stderr %q; want 2 naming it", code, errb.String())
	}
}
