package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

func cmdRoute(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("route", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (required)")
	server := fs.String("server", "", "first-level server key (required)")
	route := fs.String("route", "", "second-level route key (required)")
	orders := fs.Bool("orders", false, "the keys are order ids: print the node that holds each order's record (its home under this configuration; --server and --route are not used)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: shardis route --config FILE --server S --route R [KEY...]")
		fmt.Fprintln(stderr, "       shardis route --config FILE --orders [ORDER_ID...]")
		fmt.Fprintln(stderr, "Prints KEY<TAB>NODE per key; reads keys from stdin, one per line, when none are given.")
		fmt.Fprintln(stderr, "Flags may come before or after the keys (\"--\" ends them).")
		fs.PrintDefaults()
	}
	// Flags may come after the keys too; "--" ends them (shardis help).
	keys, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *cfgPath == "" || (!*orders && (*server == "" || *route == "")) {
		fs.Usage()
		return fmt.Errorf("%w: route needs --config, and --server and --route (or --orders)", errUsage)
	}
	if *orders && (*server != "" || *route != "") {
		return fmt.Errorf("%w: --orders places order records, which do not depend on --server or --route", errUsage)
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	home, err := keyHome(cfg, *orders, *server, *route)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	emit := func(key string) error {
		node, err := home(key)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\t%s\n", key, node)
		return err
	}
	if len(keys) > 0 {
		for _, key := range keys {
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

// keyHome returns what `shardis route` prints for a key: the node a key of
// server/route routes to, or, with orders, the home node of an order id
// (where its record lives: inventory.NewHomes over every inventory node).
func keyHome(cfg *config.Config, orders bool, server, route string) (func(string) (string, error), error) {
	if orders {
		if len(cfg.Servers[cfg.Inventory.Server].Routes) == 0 {
			return nil, fmt.Errorf("--orders: the inventory server %q has no routes in this configuration", cfg.Inventory.Server)
		}
		homes, err := inventory.NewHomes(cfg)
		if err != nil {
			return nil, err
		}
		return func(id string) (string, error) {
			if err := inventory.CheckOrderID(id); err != nil { // no order has it: it has no home
				why := strings.TrimPrefix(err.Error(), inventory.ErrInvalid.Error()+": order_id ")
				return "", fmt.Errorf("%w: route --orders: order id %q %s", errUsage, id, why)
			}
			return homes.Home(id), nil
		}, nil
	}
	layout, err := router.NewLayout(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := layout.Home(server, route, ""); err != nil {
		return nil, err
	}
	return func(key string) (string, error) { return layout.Home(server, route, key) }, nil
}
