// Command devrun is `make run`: it starts three local redis-server nodes
// (AOF on, data under .run/), a local PostgreSQL (data under .run/pg, on
// the loopback port of the configuration's sync.dsn), `shardis serve`
// and `shardis sync` with the example configuration, loads a little demo
// stock, prints commands to try, and on Ctrl-C stops everything it
// started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/proto"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/pgproc"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/node"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

func main() {
	// go-redis's own lines (a dial failure while a node is down or not
	// yet started) go through slog at debug level, dropped here.
	node.RouteRedisLogs(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "make run:", err)
		os.Exit(1)
	}
}

func run() error {
	cfgPath := flag.String("config", "config/example.yaml", "service configuration")
	bin := flag.String("bin", "bin/shardis", "shardis binary")
	data := flag.String("data", ".run", "data folder (git-ignored)")
	flag.Parse()

	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(cfg.Nodes))
	for name := range cfg.Nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	pgAddr, dsn, err := localDSN(cfg.Sync.DSN)
	if err != nil {
		return err
	}
	addrs := map[string]string{"service": cfg.Service.Listen, "postgresql": pgAddr, "sync metrics": cfg.Sync.Listen}
	for _, name := range names {
		addrs[name] = cfg.Nodes[name].Addr
	}
	for _, name := range append(names, "service", "postgresql", "sync metrics") {
		addr := addrs[name]
		if addr == "" {
			continue
		}
		if err := portFree(addr); err != nil {
			return fmt.Errorf("%s needs %s, which is busy (another `make run`?): %w", name, addr, err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var nodes []*redisproc.Server
	defer func() {
		for _, n := range nodes {
			_ = n.Stop()
		}
		fmt.Println("stopped every redis-server this run started")
	}()
	for _, name := range names {
		_, port, _ := net.SplitHostPort(cfg.Nodes[name].Addr)
		p, _ := strconv.Atoi(port)
		dir, _ := filepath.Abs(filepath.Join(*data, name))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		srv, err := redisproc.Start(redisproc.Options{Port: p, Dir: dir, AOF: true, KillWithParent: true})
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		nodes = append(nodes, srv)
		fmt.Printf("redis-server %s on %s (AOF, data in %s)\n", name, srv.Addr(), dir)
	}

	pg, err := startPG(ctx, *data, pgAddr)
	if err != nil {
		return err
	}
	defer func() {
		_ = pg.Stop()
		fmt.Println("stopped postgres")
	}()
	stopSync, err := startSync(*bin, *cfgPath, dsn)
	if err != nil {
		return err
	}
	defer stopSync()

	cmd := exec.Command(*bin, "serve", "--config", *cfgPath)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", *bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			fmt.Println("stopped shardis serve")
		}
	}()

	base := "http://" + cfg.Service.Listen
	if err := waitHealthy(ctx, base, exited); err != nil {
		return err
	}
	if err := loadDemo(ctx, base, cfg.Service.AuthToken); err != nil {
		return err
	}
	printTryIt(base, cfg.Inventory.RedoQueues, *cfgPath, dsn, cfg.Sync.Listen)
	select {
	case <-ctx.Done():
		fmt.Println("\nCtrl-C: stopping")
		return nil
	case err := <-exited:
		return fmt.Errorf("shardis serve exited: %v", err)
	}
}

func portFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ln.Close()
}

func waitHealthy(ctx context.Context, base string, exited <-chan error) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-exited:
			return fmt.Errorf("shardis serve exited before it was healthy: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("shardis serve was not ready (/readyz) within 20s")
}

// loadDemo loads the demo stock once: LoadStock adds, and the nodes keep
// their data (AOF under .run/) from one `make run` to the next, so a SKU
// that was ever loaded is left as it is.
func loadDemo(ctx context.Context, base, token string) error {
	client := shardisv1connect.NewInventoryServiceClient(http.DefaultClient, base)
	demo := []*v1.LoadStockRequest{
		{RouteKey: "clothes", SkuId: "tshirt-red", Quantity: 100, PerUserLimit: proto.Int64(2)},
		{RouteKey: "electronics", SkuId: "phone-x", Quantity: 30},
		{RouteKey: "books", SkuId: "novel-1", Quantity: 20},
	}
	auth := func(h http.Header) {
		if token != "" {
			h.Set("Authorization", "Bearer "+token)
		}
	}
	for _, m := range demo {
		get := connect.NewRequest(&v1.GetStockRequest{RouteKey: m.RouteKey, SkuId: m.SkuId})
		auth(get.Header())
		cur, err := client.GetStock(ctx, get)
		if err != nil {
			return fmt.Errorf("read demo stock %s/%s: %w", m.RouteKey, m.SkuId, err)
		}
		if st := cur.Msg.Stock; st.Loaded > 0 {
			fmt.Printf("demo stock %s/%s already loaded (%d loaded, %d available, %d confirmed): left as it is; `make clean` starts afresh\n",
				m.RouteKey, m.SkuId, st.Loaded, st.Available, st.Confirmed)
			continue
		}
		req := connect.NewRequest(m)
		auth(req.Header())
		res, err := client.LoadStock(ctx, req)
		if err != nil {
			return fmt.Errorf("load demo stock %s/%s: %w", m.RouteKey, m.SkuId, err)
		}
		fmt.Printf("loaded %d x %s/%s (available now %d)\n", m.Quantity, m.RouteKey, m.SkuId, res.Msg.Stock.Available)
	}
	return nil
}

// printTryIt prints the README's commands, in an order that works on a
// fresh run and again on the next one (every call is idempotent), then
// how to watch the deductions land in PostgreSQL.
func printTryIt(base string, redoQueues int, cfgPath, dsn, syncListen string) {
	fmt.Printf("\nshardis is up on %s (readiness: curl -s %s/readyz). Try, in this order:\n\n", base, base)
	for _, c := range tryIt(redoQueues) {
		fmt.Printf("  curl -s -H 'Content-Type: application/json' -d '%s' %s/shardis.v1.%s\n", c.body, base, c.method)
	}
	fmt.Printf(`  curl -s %s/metrics | grep ^shardis_

Or the CLI: bin/shardis status; bin/shardis stock get --route clothes --sku tshirt-red

shardis sync lands every deduction in PostgreSQL (%s). Watch them land:
  export SHARDIS_SYNC__DSN='%s'
  psql "$SHARDIS_SYNC__DSN" -c '%s'
  bin/shardis sync status --config %s
  curl -s http://%s/metrics | grep ^shardis_sync_

Ctrl-C stops the service, the sync, PostgreSQL and the three redis-server nodes; `+"`make clean`"+` deletes their data.
`, base, config.RedactDSN(dsn), dsn, movementsQuery, cfgPath, syncListen)
}

// movementsQuery is the psql query make run prints.
const movementsQuery = "SELECT node, queue, redo_offset, order_id, sku, quantity, state, reserved_at, settled_at FROM stock_movements ORDER BY landed_at"

// devPassword is the password of the local PostgreSQL's superuser
// shardis; it reaches `shardis sync` as SHARDIS_SYNC__DSN, the way a real
// password should (not in the configuration file).
const devPassword = "shardis-dev"

// localDSN checks that dsn (sync.dsn) names a PostgreSQL on this machine
// and returns its address and the DSN with the local password.
func localDSN(dsn string) (addr, withPassword string, err error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Hostname() != "127.0.0.1" || u.Port() == "" {
		return "", "", fmt.Errorf("sync.dsn %q: make run needs a postgres:// URL on 127.0.0.1 with a port", config.RedactDSN(dsn))
	}
	if u.User.Username() != "shardis" || strings.Trim(u.Path, "/") != "shardis" {
		return "", "", fmt.Errorf("sync.dsn %q: make run creates user shardis and database shardis", config.RedactDSN(dsn))
	}
	u.User = url.UserPassword("shardis", devPassword)
	return u.Host, u.String(), nil
}

// startPG starts (initialising on first use) the PostgreSQL under
// data/pg and creates the database.
func startPG(ctx context.Context, data, addr string) (*pgproc.Server, error) {
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	dir := pgDir(data, os.Geteuid() == 0)
	pg, err := pgproc.Start(pgproc.Options{Dir: dir, Port: p, Password: devPassword, Durable: true, KillWithParent: true})
	if err != nil {
		return nil, fmt.Errorf("postgresql: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := pg.CreateDatabase(cctx, "shardis"); err != nil {
		_ = pg.Stop()
		return nil, err
	}
	fmt.Printf("postgres on %s (data in %s)\n", pg.Addr(), dir)
	return pg, nil
}

// pgDir is where startPG keeps PostgreSQL's data: data/pg, unless root
// runs this (PostgreSQL then runs as user postgres, internal/pgproc) and
// a folder above data/pg is closed to other users, as /root is on Debian:
// initdb could not reach it. Then a folder under the system's temporary
// one, named after data/pg's path, so each checkout keeps its own across
// runs (until the machine clears its temporary folder); pgDir creates
// that folder open to others (pgproc creates pg itself, for postgres).
func pgDir(data string, root bool) string {
	dir, _ := filepath.Abs(filepath.Join(data, "pg"))
	if !root || othersCanReach(filepath.Dir(dir)) {
		return dir
	}
	parent := filepath.Join(os.TempDir(), fmt.Sprintf("shardis-run-%016x", xxhash.Sum64String(dir)))
	if err := os.MkdirAll(parent, 0o755); err == nil {
		_ = os.Chmod(parent, 0o755) // whatever the umask made of it
	}
	return filepath.Join(parent, "pg")
}

// othersCanReach reports whether a user other than the owner can search
// every folder from / down to dir (those that exist).
func othersCanReach(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// startSync starts `shardis sync --migrate` with the DSN (and its
// password) in SHARDIS_SYNC__DSN; the returned func stops it.
func startSync(bin, cfgPath, dsn string) (func(), error) {
	cmd := exec.Command(bin, "sync", "--config", cfgPath, "--migrate")
	cmd.Env = append(os.Environ(), "SHARDIS_SYNC__DSN="+dsn)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s sync: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		fmt.Println("stopped shardis sync")
	}, nil
}

type call struct{ method, body string }

// tryIt is the README's command list (the README shows the same calls).
// It only reads the redo log: the sync acknowledges it.
func tryIt(redoQueues int) []call {
	q := xxhash.Sum64String("clothes:tshirt-red") % uint64(redoQueues) // the redo queue of clothes/tshirt-red
	return []call{
		{"InventoryService/GetStock", `{"routeKey":"clothes","skuId":"tshirt-red"}`},
		{"InventoryService/NewOrderId", `{}`},
		{"InventoryService/Reserve", `{"orderId":"o-1","userId":"alice","ttlSeconds":300,"items":[{"routeKey":"clothes","skuId":"tshirt-red","quantity":"2"}]}`},
		{"InventoryService/Confirm", `{"orderId":"o-1"}`},
		{"InventoryService/Cancel", `{"orderId":"o-2"}`},
		{"AdminService/ListNodes", `{}`},
		{"AdminService/SetRouteEnabled", `{"node":"n1","server":"inventory","route":"clothes","enabled":false}`},
		{"AdminService/SetRouteEnabled", `{"node":"n1","server":"inventory","route":"clothes","enabled":true}`},
		{"AdminService/ReadRedoLog", fmt.Sprintf(`{"node":"n1","queue":%d,"afterOffset":"0","limit":100}`, q)},
		// No AckRedoLog: shardis sync, which make run starts, is the redo
		// log's acknowledging consumer; a second one would let entries be
		// trimmed before the sync landed them (README, "shardis sync").
	}
}
