package main

import (
	"context"
	"os/signal"
	"syscall"
)

// untilSignal returns a context cancelled by the first SIGINT or SIGTERM.
// From that signal on, both have their default action again: a second one
// kills the process, so a shutdown that hangs (a peer or PostgreSQL not
// answering) can still be interrupted. stop releases the signals before
// that; calling it more than once is fine.
func untilSignal() (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}
