package router_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/health"
	"github.com/shardis/shardis/router"
)

// exampleNodes returns the YAML of two redis-server nodes, n1 and n2, at
// the addresses in $EXAMPLE_REDIS_ADDRS ("host:port,host:port"; default
// 127.0.0.1:6379 and 127.0.0.1:6380): start two empty redis-server
// processes and point it at them. This package's TestMain
// (testmain_test.go) starts two throwaway ones and sets it.
func exampleNodes() string {
	addrs := []string{"127.0.0.1:6379", "127.0.0.1:6380"}
	if env := os.Getenv("EXAMPLE_REDIS_ADDRS"); env != "" {
		addrs = strings.Split(env, ",")
	}
	return fmt.Sprintf("nodes:\n  n1: {addr: %q}\n  n2: {addr: %q}\n", addrs[0], addrs[1])
}

// exampleConfig is exampleNodes with a server "order" routing clothes
// over both nodes.
func exampleConfig() string {
	return exampleNodes() + `servers:
  order:
    on_node_down: fail
    routes:
      clothes: [n1, n2]
`
}

// Example shows the whole embedding life cycle: load a configuration, build
// the router, run commands and a Lua script on a key's node, watch node
// state changes, and Close.
func Example() {
	yaml := exampleConfig()
	ctx := context.Background()

	// config.Load(path) reads a file and the SHARDIS_* environment; Parse
	// takes the bytes and an explicit environment.
	cfg, err := config.Parse([]byte(yaml), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := router.New(ctx, cfg, router.Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnStateChange: func(ev health.Event) {
			// Called outside any lock, in order per node: log, alert, metrics.
			_ = ev
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close() // stops the health scheduler and closes every client

	key := "order:{1001}:status"
	c, err := r.Client("order", "clothes", key)
	if err != nil {
		fmt.Println(err) // wraps router.ErrUnavailable when the home node is down
		return
	}
	if err := c.Set(ctx, key, "paid", 0).Err(); err != nil {
		fmt.Println(err)
		return
	}
	v, _ := c.Get(ctx, key).Result()
	fmt.Println("GET:", v)

	// A script runs on the key's node; keys sharing the {1001} hash tag
	// live on the same node, so one script may touch them all.
	incr := redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	n, err := incr.Run(ctx, c, []string{"order:{1001}:items"}, 3).Int()
	fmt.Println("script:", n, err)

	for _, st := range r.Status() {
		fmt.Println(st.Name, st.State)
	}
	// Output:
	// GET: paid
	// script: 3 <nil>
	// n1 up
	// n2 up
}

// ExampleRouter_Pick shows that policy "fail" never moves a key silently:
// with its home node drained the key moves (draining is a decision), but
// with the home node down the caller gets router.ErrUnavailable.
func ExampleRouter_Pick() {
	yaml := exampleConfig()
	cfg, _ := config.Parse([]byte(yaml), nil)
	r, err := router.New(context.Background(), cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()

	home, _ := r.Pick("order", "clothes", "user:42")
	other := map[string]string{"n1": "n2", "n2": "n1"}[home.Name()]

	_ = r.SetRouteEnabled(context.Background(), home.Name(), "order", "clothes", false)
	moved, _ := r.Pick("order", "clothes", "user:42")
	fmt.Println("drained home: moved to the other node:", moved.Name() == other)
	_ = r.SetRouteEnabled(context.Background(), home.Name(), "order", "clothes", true)

	home.SetDown(errors.New("simulated outage")) // what a failed probe does
	_, err = r.Pick("order", "clothes", "user:42")
	fmt.Println("down home:", errors.Is(err, router.ErrUnavailable))
	// Output:
	// drained home: moved to the other node: true
	// down home: true
}
