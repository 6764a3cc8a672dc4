package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/service"
)

func cmdServe(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (required)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	jsonLogs := fs.Bool("log-json", false, "log JSON lines instead of text")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: serve takes no arguments, got %q", errUsage, rest)
	}
	if *cfgPath == "" {
		return fmt.Errorf("%w: serve needs --config FILE", errUsage)
	}
	lvl, err := parseLevel(*level)
	if err != nil {
		return err
	}
	log := newLogger(stderr, lvl, *jsonLogs, "serve")
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	ctx, stop := untilSignal()
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	srv, err := service.Start(startCtx, cfg, log)
	cancel()
	if err != nil {
		return err
	}
	return serveUntil(ctx, stop, srv, cfg.Service.ShutdownTimeout, log)
}

// server is what serveUntil needs of a started service.
type server interface {
	Done() <-chan error
	Shutdown(ctx context.Context) error
}

// serveUntil waits for a signal (ctx) or for the listener to stop, then
// shuts srv down within timeout either way: a listener that failed still
// leaves in-flight calls to finish, the other port to stop, and the
// libraries to close (the router writes its witness marks on the peers,
// the inventory its buffered commits, the reconciler gives up its lease).
// The listener's error, if any, comes first in the result.
func serveUntil(ctx context.Context, stop func(), srv server, timeout time.Duration, log *slog.Logger) error {
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: finishing in-flight calls", "timeout", timeout)
	case err := <-srv.Done():
		if err == nil {
			err = errors.New("listener stopped")
		}
		serveErr = fmt.Errorf("serve: %w", err)
		log.Error("listener failed: shutting down", "err", err, "timeout", timeout)
	}
	stop()
	sctx, scancel := context.WithTimeout(context.Background(), timeout)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return errors.Join(serveErr, fmt.Errorf("shutdown: %w", err))
	}
	if serveErr != nil {
		return serveErr
	}
	log.Info("stopped")
	return nil
}
