package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// untilSignal returns a context cancelled by the first SIGINT or SIGTERM.
// By the time the context is done, both signals have their default action
// again: a second one kills the process, so a shutdown that hangs (a peer
// or PostgreSQL not answering) can still be interrupted. stop releases
// the signals and cancels the context before that; calling it more than
// once is fine.
func untilSignal() (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-sig:
		case <-ctx.Done():
		}
		signal.Stop(sig) // before cancel: no one sees ctx done while a signal is still caught
		cancel()
	}()
	return ctx, cancel
}
