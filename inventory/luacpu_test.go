package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
)

// TestLuaCPU measures the node CPU each script call costs: it runs a
// workload of orders through the public API on three real nodes (1-item
// orders on a one-node route: the local path on their home node, the
// one-round path elsewhere; 3-item orders over three nodes: stage-take and
// reserve; then Confirm or Cancel each: order and settle), with every
// command logged by the slow log (threshold 0), and prints per script the
// calls and the mean µs per call (the duration Redis also adds to INFO
// commandstats' usec_per_call; the slow log tells the scripts apart, which
// commandstats, one FCALL line, does not) and the median (less moved by
// a loaded machine's preemptions), then every command's commandstats. Two reference scripts run
// beside them: one that does nothing and one that does only the stamp
// check (HMGET + TIME). It is a measure, not a check: it runs only with
// SHARDIS_LUACPU=<orders> (e.g. 3000), e.g.
//
//	SHARDIS_LUACPU=3000 go test -count=1 -run TestLuaCPU -v ./inventory/
func TestLuaCPU(t *testing.T) {
	orders, _ := strconv.Atoi(os.Getenv("SHARDIS_LUACPU"))
	if orders <= 0 {
		t.Skip("a measure: set SHARDIS_LUACPU=<orders> to run it")
	}
	srvs := redistest.StartN(t, 3, redistest.Options{})
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	clients := map[string]*redis.Client{}
	for i, s := range srvs {
		name := fmt.Sprintf("n%d", i+1)
		cfg.Nodes[name] = config.Node{Addr: s.Addr(), Weight: 1}
		clients[name] = s.Client(t)
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail,
		Routes: map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	r, err := router.New(ctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	inv, err := New(r, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	for _, rt := range []string{"a", "b", "c"} {
		if _, err := inv.LoadStock(ctx, rt, "s", MaxQuantity, 0); err != nil {
			t.Fatal(err)
		}
	}
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	three := []Item{{Route: "a", SKU: "s", Quantity: 1}, {Route: "b", SKU: "s", Quantity: 1}, {Route: "c", SKU: "s", Quantity: 1}}
	// warm up (scripts loaded, connections open), then log every command
	for i := range 20 {
		if _, err := inv.Reserve(ctx, "warm-"+strconv.Itoa(i), three, "", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	noop := redis.NewScript("return 1")
	stamp := redis.NewScript(`local meta = redis.call('HMGET', KEYS[1], 'name', 'epoch', 'seq')
if meta[1] ~= ARGV[1] then return redis.error_reply('x') end
local t = redis.call('TIME')
return 1`)
	for _, c := range clients {
		for _, s := range []*redis.Script{noop, stamp} {
			if err := s.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.ConfigSet(ctx, "slowlog-max-len", "10000000").Err(); err != nil {
			t.Fatal(err)
		}
		c.SlowLogReset(ctx)
		c.ConfigResetStat(ctx)
		if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for i := range orders {
		items := one
		if i%2 == 1 {
			items = three
		}
		id := "cpu-" + strconv.Itoa(i)
		if _, err := inv.Reserve(ctx, id, items, "", time.Hour); err != nil {
			t.Fatal(err)
		}
		if i%4 < 2 {
			_, err = inv.Confirm(ctx, id)
		} else {
			_, err = inv.Cancel(ctx, id)
		}
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range clients {
			noop.EvalSha(ctx, c, []string{stampKey}, name)
			stamp.EvalSha(ctx, c, []string{stampKey}, name)
		}
	}
	elapsed := time.Since(start)
	names := map[string]string{noop.Hash(): "(nothing)", stamp.Hash(): "(stamp check only)"}
	for _, s := range scripts {
		names[s.fn.(string)] = s.name
	}
	type sum struct {
		calls, usec int64
		each        []int64 // µs of each call (the slow log's)
	}
	per := map[string]*sum{}
	var evalshaUsec, evalshaCalls, slowUsec int64
	inner := map[string]*sum{} // commandstats of every command, the scripts' own calls included
	for _, c := range clients {
		if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "-1").Err(); err != nil {
			t.Fatal(err)
		}
		logs, err := c.SlowLogGet(ctx, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range logs {
			if len(l.Args) < 2 || !strings.EqualFold(l.Args[0], "evalsha") && !strings.EqualFold(l.Args[0], "fcall") {
				continue
			}
			name, ok := names[l.Args[1]]
			if !ok {
				name = "? " + l.Args[1]
			}
			s := per[name]
			if s == nil {
				s = &sum{}
				per[name] = s
			}
			s.calls++
			s.usec += l.Duration.Microseconds()
			s.each = append(s.each, l.Duration.Microseconds())
			slowUsec += l.Duration.Microseconds()
		}
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			cmd, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			if !ok || !strings.HasPrefix(line, "cmdstat_") {
				continue
			}
			var calls, usec int64
			for _, kv := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					calls = n
				case "usec":
					usec = n
				}
			}
			if cmd == "evalsha" || cmd == "fcall" {
				evalshaCalls += calls
				evalshaUsec += usec
				continue
			}
			if inner[cmd] == nil {
				inner[cmd] = &sum{}
			}
			inner[cmd].calls += calls
			inner[cmd].usec += usec
		}
	}
	keys := make([]string, 0, len(per))
	for k := range per {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d orders in %v\n%-22s %8s %14s %8s\n", orders, elapsed.Round(time.Millisecond), "script", "calls", "usec_per_call", "median")
	for _, k := range keys {
		s := per[k]
		slices.Sort(s.each)
		fmt.Fprintf(&b, "%-22s %8d %14.2f %8d\n", k, s.calls, float64(s.usec)/float64(s.calls), s.each[len(s.each)/2])
	}
	fmt.Fprintf(&b, "commandstats evalsha and fcall: %d calls, %.2f usec_per_call (the slow log: %.2f)\n", evalshaCalls,
		float64(evalshaUsec)/float64(max(evalshaCalls, 1)), float64(slowUsec)/float64(max(evalshaCalls, 1)))
	fmt.Fprintf(&b, "the commands, the scripts' own calls included:\n")
	keys = keys[:0]
	for k := range inner {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return inner[keys[i]].usec > inner[keys[j]].usec })
	for _, k := range keys {
		s := inner[k]
		fmt.Fprintf(&b, "  %-20s %8d %14.2f\n", k, s.calls, float64(s.usec)/float64(s.calls))
	}
	t.Log("\n" + b.String())
}
