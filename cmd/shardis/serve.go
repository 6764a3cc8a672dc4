package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
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
	if err := parseFlags(fs, args); err != nil {
		return err
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	srv, err := service.Start(startCtx, cfg, log)
	cancel()
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down: finishing in-flight calls", "timeout", cfg.Service.ShutdownTimeout)
	case err := <-srv.Done():
		return fmt.Errorf("serve: %w", err)
	}
	stop()
	sctx, scancel := context.WithTimeout(context.Background(), cfg.Service.ShutdownTimeout)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}
