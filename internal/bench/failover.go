package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/health"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/router"
)

// FailoverSpec is one kill -9 of a node.
type FailoverSpec struct {
	Load    bool            // GET load through the router during the cycle
	Outage  time.Duration   // from the kill until the restart begins
	Backoff []time.Duration // health.backoff; nil = the default
}

// FailoverCycle is the outcome of one FailoverSpec.
type FailoverCycle struct {
	FailoverSpec
	// Detect is from the SIGKILL until the router marked the node DOWN.
	Detect time.Duration
	// Recover is from the moment the restarted node accepted a TCP
	// connection until the router marked it UP.
	Recover time.Duration
	// Latency and throughput of GETs of keys whose home is a healthy node:
	// in the window before the kill, and from the kill until the node was
	// UP again.
	P50Before, P99Before, P50During, P99During time.Duration
	OpsBefore                                  float64       // successful healthy-node GETs/s in the window before the kill
	OpsDuring                                  float64       // successful healthy-node GETs/s from the kill until the node was UP again
	HealthyErrors                              int64         // failed GETs of healthy-node keys during the outage
	VictimFailed                               int64         // GETs of the dead node's keys refused during the outage
	VictimFailedSlowP99                        time.Duration // p99 latency of those refusals
	// OtherEvents counts state changes of the healthy nodes during the
	// cycle (a healthy node wrongly marked DOWN under load shows here).
	OtherEvents int
	// Foreign is the share of the machine's CPU other processes used
	// during the cycle.
	Foreign float64
}

// FailoverResult holds every cycle.
type FailoverResult struct {
	Conc   int             // concurrent goroutines of the GET load (Plan.Conc)
	Victim string          // the name of the node killed in every cycle
	Cycles []FailoverCycle // one per Plan.Failover spec, in order
}

// startNodes starts one redis-server per name of nodeNames with opts and
// returns them with their addresses; stop kills and removes every one
// started (also after an error).
func startNodes(opts redisproc.Options) (servers []*redisproc.Server, addrs []string, stop func(), err error) {
	stop = func() {
		for _, s := range servers {
			_ = s.Kill()
			_ = s.Close()
		}
	}
	for range nodeNames {
		s, err := redisproc.Start(opts)
		if err != nil {
			return servers, addrs, stop, err
		}
		servers = append(servers, s)
		addrs = append(addrs, s.Addr())
	}
	return servers, addrs, stop, nil
}

type stateEvent struct {
	node string
	up   bool
	at   time.Time
}

type opRecord struct {
	at, lat int64 // start (ns since the load began) and latency
	victim  bool
	failed  bool
}

// RunFailover starts three redis-server nodes with AOF (appendfsync
// always, as the drill does), and for every spec builds a router with
// default health settings (or the spec's backoff), optionally puts GET
// load on it, kills node n1 with SIGKILL, restarts it after the outage
// and records when the router marked it DOWN and UP again.
func RunFailover(ctx context.Context, p Plan, log *slog.Logger, progress func(string)) (*FailoverResult, error) {
	servers, addrs, stopNodes, err := startNodes(redisproc.Options{AOF: true, KillWithParent: true})
	defer stopNodes()
	if err != nil {
		return nil, err
	}
	keys := kvKeys(p.FailoverKeys)
	val := strings.Repeat("v", p.ValueSize)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2, DisableIdentity: true})
		for start := 0; start < len(keys); start += 1000 {
			_, err := c.Pipelined(ctx, func(pl redis.Pipeliner) error {
				for _, k := range keys[start:min(start+1000, len(keys))] {
					pl.Set(ctx, k, val, 0)
				}
				return nil
			})
			if err != nil {
				_ = c.Close()
				return nil, err
			}
		}
		_ = c.Close()
	}
	meter := NewCPUMeter(func() []int {
		var out []int
		for _, s := range servers {
			out = append(out, s.Pid())
		}
		return out
	})
	res := &FailoverResult{Conc: p.Conc, Victim: nodeNames[0]}
	for i, spec := range p.Failover {
		waitQuiet(meter, p.MaxForeign, p.QuietWait, progress)
		a := meter.Snap()
		cyc, err := failoverCycle(ctx, BenchConfig(addrs), servers[0], keys, spec, p, log)
		if err != nil {
			return res, fmt.Errorf("failover cycle %d: %w", i+1, err)
		}
		cyc.Foreign = Foreign(a, meter.Snap())
		res.Cycles = append(res.Cycles, cyc)
		progress(fmt.Sprintf("failover %d/%d (%s): DOWN after %v, UP %v after it accepted connections",
			i+1, len(p.Failover), spec.Label(), cyc.Detect.Round(time.Millisecond), cyc.Recover.Round(time.Millisecond)))
	}
	return res, nil
}

// Label describes the spec in tables.
func (s FailoverSpec) Label() string {
	load := "idle"
	if s.Load {
		load = "under GET load"
	}
	b := "default backoff"
	if s.Backoff != nil {
		parts := make([]string, len(s.Backoff))
		for i, d := range s.Backoff {
			parts[i] = d.String()
		}
		b = "backoff [" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprintf("%s, outage %v, %s", load, s.Outage, b)
}

func failoverCycle(ctx context.Context, cfg *config.Config, victim *redisproc.Server, keys []string, spec FailoverSpec, p Plan, log *slog.Logger) (FailoverCycle, error) {
	cyc := FailoverCycle{FailoverSpec: spec}
	if spec.Backoff != nil {
		cfg.Health.Backoff = spec.Backoff
	}
	events := make(chan stateEvent, 64)
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: log, OnStateChange: func(ev health.Event) {
		events <- stateEvent{node: ev.Target, up: ev.Up, at: time.Now()}
	}})
	if err != nil {
		return cyc, err
	}
	defer r.Close()
	for _, n := range r.Nodes() {
		if !n.Usable() {
			return cyc, fmt.Errorf("node %s not up at start: %v", n.Name(), n.DownReason())
		}
	}
	drain(events)
	set, err := r.Set(kvServer, kvRoute)
	if err != nil {
		return cyc, err
	}
	vi := -1
	for i, n := range set.Nodes() {
		if n.Name() == nodeNames[0] {
			vi = i
		}
	}
	ring := set.Ring()

	// Load: GETs of random keys through Router.Client, every op recorded
	// with its start time, so the windows are cut afterwards.
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		recs    = make([][]opRecord, p.Conc)
		t0      = time.Now()
		workers = NewLoad(p.Conc, 5).workers
	)
	if spec.Load {
		for i, w := range workers {
			wg.Add(1)
			go func(i int, w *Worker) {
				defer wg.Done()
				out := make([]opRecord, 0, 1<<16)
				for !stop.Load() {
					key := keys[w.Rng.IntN(len(keys))]
					start := time.Now()
					c, err := r.Client(kvServer, kvRoute, key)
					if err == nil {
						err = c.Get(ctx, key).Err()
						if errors.Is(err, redis.Nil) {
							err = nil
						}
					}
					out = append(out, opRecord{at: int64(start.Sub(t0)), lat: int64(time.Since(start)),
						victim: ring.Home(key) == vi, failed: err != nil})
				}
				recs[i] = out
			}(i, w)
		}
	}
	// A random phase against the heartbeat: an idle node is found by the
	// next heartbeat probe, so a kill at a fixed time after the router
	// started would always land at the same point of its period.
	time.Sleep(p.FailoverWarmup + p.FailoverBefore + rand.N(cfg.Health.Heartbeat))

	tKill := time.Now()
	if err := victim.Kill(); err != nil {
		stop.Store(true)
		wg.Wait()
		return cyc, err
	}
	down, err := waitEvent(events, nodeNames[0], false, 15*time.Second, &cyc.OtherEvents)
	if err != nil {
		stop.Store(true)
		wg.Wait()
		return cyc, err
	}
	cyc.Detect = down.Sub(tKill)
	time.Sleep(time.Until(tKill.Add(spec.Outage)))

	// The moment the node accepts connections again, polled every 1ms
	// while it restarts.
	var accepted atomic.Int64
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		for time.Since(tKill) < time.Minute {
			c, err := net.DialTimeout("tcp", victim.Addr(), 50*time.Millisecond)
			if err == nil {
				accepted.Store(time.Now().UnixNano())
				_ = c.Close()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if err := victim.Restart(); err != nil {
		stop.Store(true)
		wg.Wait()
		return cyc, err
	}
	<-pollDone
	up, err := waitEvent(events, nodeNames[0], true, 30*time.Second, &cyc.OtherEvents)
	if err != nil {
		stop.Store(true)
		wg.Wait()
		return cyc, err
	}
	tAccept := time.Unix(0, accepted.Load())
	cyc.Recover = up.Sub(tAccept)
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	for {
		select {
		case ev := <-events:
			if ev.node != nodeNames[0] {
				cyc.OtherEvents++
			}
			continue
		default:
		}
		break
	}

	if spec.Load {
		kill, upAt := int64(tKill.Sub(t0)), int64(up.Sub(t0))
		before := kill - int64(p.FailoverBefore) // the window ends at the kill, whatever the random phase
		var lb, ld, lv []int64
		for _, rs := range recs {
			for _, o := range rs {
				switch {
				case o.at >= before && o.at < kill && !o.victim && !o.failed:
					lb = append(lb, o.lat)
				case o.at >= kill && o.at < upAt && !o.victim:
					if o.failed {
						cyc.HealthyErrors++
					} else {
						ld = append(ld, o.lat)
					}
				case o.at >= kill && o.at < upAt && o.victim && o.failed:
					cyc.VictimFailed++
					lv = append(lv, o.lat)
				}
			}
		}
		slices.Sort(lb)
		slices.Sort(ld)
		slices.Sort(lv)
		cyc.P50Before, cyc.P99Before = percentile(lb, 0.5), percentile(lb, 0.99)
		cyc.P50During, cyc.P99During = percentile(ld, 0.5), percentile(ld, 0.99)
		cyc.VictimFailedSlowP99 = percentile(lv, 0.99)
		cyc.OpsBefore = float64(len(lb)) / p.FailoverBefore.Seconds()
		cyc.OpsDuring = float64(len(ld)) / up.Sub(tKill).Seconds()
	}
	return cyc, nil
}

func drain(ch chan stateEvent) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func waitEvent(ch chan stateEvent, name string, up bool, limit time.Duration, others *int) (time.Time, error) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case ev := <-ch:
			if ev.node != name {
				*others++
			} else if ev.up == up {
				return ev.at, nil
			}
		case <-timer.C:
			state := "DOWN"
			if up {
				state = "UP"
			}
			return time.Time{}, fmt.Errorf("node %s was not marked %s within %v", name, state, limit)
		}
	}
}
