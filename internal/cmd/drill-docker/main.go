// Command drill-docker is the order-load half of `make drill-docker`
// (docker/drill-docker.sh starts the containers and tears them down): the
// failure drill of `make drill` and `make drill-sentinel` against a shardis
// service and Redis nodes running in Docker containers on host ports.
//
// It loads stock, runs a steady order load over HTTP, kills the container
// of one node's Redis master with `docker kill -s KILL`, and reports how
// long the service took to mark the node DOWN and UP again, and the orders
// by phase, code and outcome. A standalone node comes back when its
// container is started again (`docker start`, AOF kept in the container);
// a Sentinel group's node comes back on the replica the sentinels promote,
// and the killed master's container is then started again and must rejoin
// as a replica of the promoted one. After healing it checks every
// invariant (internal/drill's Heal) and exits 0 only if they hold and
// orders were acknowledged again after recovery.
//
// --config is the service's own configuration file (node addresses on
// host ports, as docker/shardis.host.yaml); --containers maps each Redis
// address to its container.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/drill"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// ttl is every drill reservation's TTL: short, so that healing (every
// unsettled reservation expiring and being returned) is quick.
const ttl = 3 * time.Second

// dockerDrill is one run's settings and clients.
type dockerDrill struct {
	cfg        *config.Config
	base       string
	victim     string
	outage     time.Duration
	containers map[string]string // Redis host:port → container name
	inv        shardisv1connect.InventoryServiceClient
	admin      shardisv1connect.AdminServiceClient
}

func main() {
	cfgPath := flag.String("config", "", "the service's configuration file (required)")
	url := flag.String("url", "", "the service's base URL (default: http:// + service.listen of --config)")
	victim := flag.String("kill", "", "node whose Redis master container is killed (required)")
	outage := flag.Duration("outage", 4*time.Second, "how long after the kill the killed container is started again")
	workers := flag.Int("workers", 8, "concurrent order clients")
	containers := flag.String("containers", "", "addr=container,... : the container of every Redis address (required)")
	flag.Parse()
	d, err := newDrill(*cfgPath, *url, *victim, *outage, *containers)
	if err == nil {
		var ok bool
		if ok, err = d.run(*workers); err == nil && !ok {
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "drill-docker:", err)
		os.Exit(1)
	}
}

func newDrill(cfgPath, url, victim string, outage time.Duration, containers string) (*dockerDrill, error) {
	if cfgPath == "" || victim == "" || containers == "" {
		return nil, errors.New("--config, --kill and --containers are required")
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	if _, ok := cfg.Nodes[victim]; !ok {
		return nil, fmt.Errorf("--kill %q: not a node of %s", victim, cfgPath)
	}
	if url == "" {
		url = "http://" + cfg.Service.Listen
	}
	d := &dockerDrill{cfg: cfg, base: url, victim: victim, outage: outage, containers: map[string]string{}}
	for _, kv := range strings.Split(containers, ",") {
		addr, name, ok := strings.Cut(kv, "=")
		if !ok || addr == "" || name == "" {
			return nil, fmt.Errorf("--containers: %q is not addr=container", kv)
		}
		d.containers[addr] = name
	}
	d.inv = shardisv1connect.NewInventoryServiceClient(http.DefaultClient, url)
	d.admin = shardisv1connect.NewAdminServiceClient(http.DefaultClient, url)
	return d, nil
}

func (d *dockerDrill) run(workers int) (bool, error) {
	ctx := context.Background()
	if err := waitReady(ctx, d.base, 120*time.Second); err != nil {
		return false, err
	}
	for name, node := range d.cfg.Nodes {
		if err := waitGroup(ctx, name, node, 120*time.Second); err != nil {
			return false, fmt.Errorf("node %s: %w", name, err)
		}
	}
	skus, err := drill.LoadStock(ctx, d.inv)
	if err != nil {
		return false, err
	}
	sentinel := d.cfg.Nodes[d.victim].Sentinel.On()
	old, err := drill.MasterAddr(ctx, d.victim, d.cfg.Nodes[d.victim])
	if err != nil {
		return false, err
	}
	container, ok := d.containers[old]
	if !ok {
		return false, fmt.Errorf("--containers names no container for %s (the master of %s)", old, d.victim)
	}
	fmt.Printf("drill-docker: %s (durability %s), %d nodes, %d order clients, docker kill -s KILL %s (%s, master of %s) for %v\n",
		d.base, d.cfg.Inventory.Durability, len(d.cfg.Nodes), workers, container, old, d.victim, d.outage)

	out, stop := drill.Start(d.inv, drill.Load{Workers: workers, Seed: 13, TTL: ttl})
	defer stop()
	time.Sleep(2 * time.Second)
	out.SetPhase(drill.Outage)
	killed := time.Now()
	if err := docker("kill", "-s", "KILL", container); err != nil {
		return false, err
	}
	down, _, err := d.waitState(ctx, v1.NodeState_NODE_STATE_DOWN, 15*time.Second)
	if err != nil {
		return false, err
	}
	fmt.Printf("%-40s %v\n", "time to mark "+d.victim+" DOWN", down.Round(time.Millisecond))
	var problems []string
	if sentinel {
		problems, err = d.failover(ctx, old, container, killed, out)
	} else {
		problems, err = d.restart(ctx, container, killed, out)
	}
	if err != nil {
		return false, err
	}
	time.Sleep(3 * time.Second)
	stop()
	problems = append(problems, out.Report()...)
	problems = append(problems, drill.Heal(ctx, d.cfg, out, skus, d.inv, ttl+40*time.Second)...)
	for _, p := range problems {
		fmt.Println("VIOLATION:", p)
	}
	fmt.Printf("\ndrill-docker %s\n", drill.Verdict(len(problems) == 0))
	return len(problems) == 0, nil
}

// restart starts the killed container of a standalone node again after
// the outage and waits for the service to mark the node UP.
func (d *dockerDrill) restart(ctx context.Context, container string, killed time.Time, out *drill.Outcomes) ([]string, error) {
	time.Sleep(time.Until(killed.Add(d.outage)))
	if err := docker("start", container); err != nil {
		return nil, err
	}
	up, _, err := d.waitState(ctx, v1.NodeState_NODE_STATE_UP, 30*time.Second)
	if err != nil {
		return nil, err
	}
	out.SetPhase(drill.After)
	fmt.Printf("%-40s %v after docker start (%v after the kill)\n", "time to mark "+d.victim+" UP",
		up.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	return nil, nil
}

// failover waits for the sentinels to promote a replica of the victim's
// group and for the service to mark the node UP on it, then starts the
// killed master's container again and waits until it is a replica of the
// promoted master.
func (d *dockerDrill) failover(ctx context.Context, old, container string, killed time.Time, out *drill.Outcomes) ([]string, error) {
	node := d.cfg.Nodes[d.victim]
	var promoted string
	if err := drill.Poll(30*time.Second, func() bool {
		a, err := drill.MasterAddr(ctx, d.victim, node)
		promoted = a
		return err == nil && a != old
	}); err != nil {
		return nil, fmt.Errorf("the sentinels of %s promoted no replica: %w", node.Sentinel.Master, err)
	}
	fmt.Printf("%-40s %v (%s -> %s)\n", "sentinels promoted the replica after", time.Since(killed).Round(time.Millisecond), old, promoted)
	_, addr, err := d.waitState(ctx, v1.NodeState_NODE_STATE_UP, 30*time.Second)
	if err != nil {
		return nil, err
	}
	out.SetPhase(drill.After)
	fmt.Printf("%-40s %v after the kill, on %s\n", "time to mark "+d.victim+" UP", time.Since(killed).Round(time.Millisecond), addr)
	var problems []string
	if !drill.OnPromoted(ctx, addr, promoted) {
		problems = append(problems, fmt.Sprintf("%s is UP on %q, not on the promoted replica %s", d.victim, addr, promoted))
	}
	time.Sleep(time.Until(killed.Add(d.outage)))
	if err := docker("start", container); err != nil {
		return nil, err
	}
	c, err := drill.Dial(d.victim, node, old)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	host, port, _ := strings.Cut(promoted, ":")
	if err := drill.Poll(60*time.Second, func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_host:"+host+"\r\n") &&
			strings.Contains(info, "master_port:"+port+"\r\n") && strings.Contains(info, "master_link_status:up")
	}); err != nil {
		return nil, fmt.Errorf("%s (%s) did not rejoin as a replica of %s: %w", container, old, promoted, err)
	}
	out.SetPhase(drill.Rejoined)
	fmt.Printf("%-40s %v after the kill\n", "old master back as a replica", time.Since(killed).Round(time.Millisecond))
	return problems, nil
}

// waitState waits until the service lists the victim in state want (see
// drill.WaitState).
func (d *dockerDrill) waitState(ctx context.Context, want v1.NodeState, limit time.Duration) (time.Duration, string, error) {
	return drill.WaitState(ctx, d.admin, d.victim, want, limit)
}

// waitGroup waits until the first sentinel of a Sentinel group's node
// (name, node its configuration) sees the quorum reachable and a replica
// linked to the master, so that a failover can happen; a standalone node
// is ready at once.
func waitGroup(ctx context.Context, name string, node config.Node, limit time.Duration) error {
	if !node.Sentinel.On() {
		return nil
	}
	s, err := drill.DialSentinel(name, node, node.Sentinel.Addrs[0])
	if err != nil {
		return err
	}
	defer s.Close()
	err = drill.Poll(limit, func() bool {
		if err := s.CkQuorum(ctx, node.Sentinel.Master).Err(); err != nil {
			return false
		}
		replicas, err := s.Replicas(ctx, node.Sentinel.Master).Result()
		if err != nil {
			return false
		}
		for _, r := range replicas {
			if r["master-link-status"] == "ok" && !strings.Contains(r["flags"], "down") {
				return true
			}
		}
		return false
	})
	if err != nil {
		return fmt.Errorf("sentinel group %s: no quorum or no linked replica: %w", node.Sentinel.Master, err)
	}
	return nil
}

// waitReady polls GET /readyz until it answers 200, at most limit: every
// request runs under a deadline at limit after the start, so a service
// that accepts and never answers does not hold it longer.
func waitReady(ctx context.Context, base string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	err := drill.Poll(limit, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	if err != nil {
		return fmt.Errorf("%s/readyz: %w", base, err)
	}
	return nil
}

// docker runs the docker CLI with args; its output goes to stderr on failure.
func docker(args ...string) error {
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
