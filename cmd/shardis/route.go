package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/router"
)

func cmdRoute(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("route", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (required)")
	server := fs.String("server", "", "first-level server key (required)")
	route := fs.String("route", "", "second-level route key (required)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: shardis route --config FILE --server S --route R [KEY...]")
		fmt.Fprintln(stderr, "Prints KEY<TAB>NODE per key; reads keys from stdin, one per line, when none are given.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *cfgPath == "" || *server == "" || *route == "" {
		fs.Usage()
		return fmt.Errorf("%w: route needs --config, --server and --route", errUsage)
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	layout, err := router.NewLayout(cfg)
	if err != nil {
		return err
	}
	if _, err := layout.Home(*server, *route, ""); err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	emit := func(key string) error {
		home, err := layout.Home(*server, *route, key)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\t%s\n", key, home)
		return err
	}
	if fs.NArg() > 0 {
		for _, key := range fs.Args() {
			if err := emit(key); err != nil {
				return err
			}
		}
		return nil
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		key := strings.TrimRight(sc.Text(), "\r")
		if key == "" {
			continue
		}
		if err := emit(key); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading keys from stdin: %w", err)
	}
	return nil
}
