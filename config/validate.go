package config

import (
	"fmt"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// MaxRouteNodes is the largest number of nodes one route may list (the
// ring's member limit).
const MaxRouteNodes = 256

// MaxWeight is the largest node weight accepted.
const MaxWeight = 100

// Validate checks a Config built by hand (Load and Parse already call it).
// It returns nil or a [Problems] error listing everything wrong.
func (c *Config) Validate() error {
	if ps := c.problems(); len(ps) > 0 {
		return ps
	}
	return nil
}

// ValidateRouter is [Config.Validate] for what a router uses: nodes,
// servers, health, breaker, client and pipeline. An embedder that builds a
// router without the service or the inventory need not configure them.
func (c *Config) ValidateRouter() error {
	var ps Problems
	for _, p := range c.problems() {
		if routerSection(p.Path) {
			ps = append(ps, p)
		}
	}
	if len(ps) > 0 {
		return ps
	}
	return nil
}

// routerSection reports whether a problem path belongs to a section the
// router uses.
func routerSection(path string) bool {
	for _, sec := range []string{"nodes", "servers", "health", "breaker", "client", "pipeline"} {
		if path == sec || strings.HasPrefix(path, sec+".") {
			return true
		}
	}
	return false
}

// problems checks every section in turn; each helper below owns one
// section (or one entry of it) and appends what is wrong there.
func (c *Config) problems() Problems {
	var ps Problems
	c.serviceProblems(&ps)
	c.nodeProblems(&ps)
	c.serverProblems(&ps)
	c.healthProblems(&ps)
	c.pipelineProblems(&ps)
	c.inventoryProblems(&ps)
	c.syncProblems(&ps)
	return ps
}

// serviceProblems checks the service section.
func (c *Config) serviceProblems(ps *Problems) {
	checkAddr(ps, "service.listen", c.Service.Listen, true)
	if c.Service.GRPCListen != "" {
		checkAddr(ps, "service.grpc_listen", c.Service.GRPCListen, true)
		if _, port, _ := net.SplitHostPort(c.Service.GRPCListen); port != "0" && c.Service.GRPCListen == c.Service.Listen {
			ps.add("service.grpc_listen", c.Service.GRPCListen, "must differ from service.listen")
		}
	}
	if c.Service.MaxBodyBytes < 1024 || c.Service.MaxBodyBytes > 64<<20 {
		ps.add("service.max_body_bytes", c.Service.MaxBodyBytes, "must be between 1024 and 67108864")
	}
	positive(ps, "service.shutdown_timeout", c.Service.ShutdownTimeout)
	if t := c.Service.TLS; (t.CertFile == "") != (t.KeyFile == "") {
		ps.add("service.tls", nil, "cert_file and key_file go together")
	} else if t.ClientCAFile != "" && t.CertFile == "" {
		ps.add("service.tls.client_ca_file", t.ClientCAFile, "needs cert_file and key_file")
	}
}

// nodeProblems checks the nodes section: each node, and that no two share
// an address or a Sentinel master group.
func (c *Config) nodeProblems(ps *Problems) {
	if len(c.Nodes) == 0 {
		ps.add("nodes", nil, "at least one node is required")
	}
	addrs := map[string]string{}  // addr → node name
	groups := map[string]string{} // "master@sentinel addr" → node name
	for _, name := range sortedKeys(c.Nodes) {
		checkNode(ps, name, c.Nodes[name], addrs, groups)
	}
}

// addrKey is the form of a host:port address two spellings of one
// server share: the host in lower case (host names are case-insensitive),
// the port as its number (007001 dials 7001).
func addrKey(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if n, err := strconv.Atoi(port); err == nil {
		port = strconv.Itoa(n)
	}
	return net.JoinHostPort(strings.ToLower(host), port)
}

// checkNode checks node name, recording its address in addrs and its
// master group in groups (to find the next node that repeats them).
func checkNode(ps *Problems, name string, n Node, addrs, groups map[string]string) {
	p := "nodes." + name
	checkName(ps, p, name)
	switch {
	case n.Sentinel.On() && n.Addr != "":
		ps.add(p, nil, "set addr (a standalone node) or sentinel (a Sentinel master group), not both")
	case n.Sentinel.On():
		checkSentinel(ps, p+".sentinel", name, n.Sentinel, groups)
	case n.Addr == "":
		ps.add(p+".addr", nil, "required (host:port), or a sentinel block for a Sentinel master group")
	case checkAddr(ps, p+".addr", n.Addr, false):
		key := addrKey(n.Addr)
		if other, dup := addrs[key]; dup {
			ps.add(p+".addr", n.Addr, "same address as node "+other)
		}
		addrs[key] = name
	}
	switch n.ReadFrom {
	case "", ReadFromMaster:
	case ReadFromReplicaPreferred:
		if !n.Sentinel.On() {
			ps.add(p+".read_from", n.ReadFrom, "replica_preferred needs a sentinel block: a standalone node has no replicas to read from")
		}
	default:
		ps.add(p+".read_from", n.ReadFrom, `must be "master" or "replica_preferred"`)
	}
	if n.DB < 0 {
		ps.add(p+".db", n.DB, "must be >= 0")
	}
	if n.Sentinel.On() && n.TLS.On() {
		ps.add(p+".tls", nil, "with sentinel, set sentinel.tls: go-redis dials the sentinels and the group's nodes with one TLS configuration")
	}
	checkTLS(ps, p+".tls", n.TLS)
	if n.Weight < 1 || n.Weight > MaxWeight {
		ps.add(p+".weight", n.Weight, fmt.Sprintf("must be between 1 and %d", MaxWeight))
	}
}

// serverProblems checks the servers section and each server's routes.
func (c *Config) serverProblems(ps *Problems) {
	if len(c.Servers) == 0 {
		ps.add("servers", nil, "at least one server key is required")
	}
	for _, sname := range sortedKeys(c.Servers) {
		s := c.Servers[sname]
		p := "servers." + sname
		checkName(ps, p, sname)
		if s.OnNodeDown != OnNodeDownFail && s.OnNodeDown != OnNodeDownNext {
			ps.add(p+".on_node_down", s.OnNodeDown, `must be "fail" or "next"`)
		}
		if len(s.Routes) == 0 {
			ps.add(p+".routes", nil, "at least one route key is required")
		}
		for _, rname := range sortedKeys(s.Routes) {
			c.checkRoute(ps, p+".routes."+rname, rname, s.Routes[rname])
		}
	}
}

// checkRoute checks route rname at path rp: its name, its size, and that
// it lists known nodes once each.
func (c *Config) checkRoute(ps *Problems, rp, rname string, nodes []string) {
	checkName(ps, rp, rname)
	if len(nodes) == 0 {
		ps.add(rp, nil, "empty route: list at least one node")
	}
	if len(nodes) > MaxRouteNodes {
		ps.add(rp, len(nodes), fmt.Sprintf("at most %d nodes per route", MaxRouteNodes))
	}
	seen := map[string]bool{}
	for i, n := range nodes {
		ip := rp + "[" + strconv.Itoa(i) + "]"
		if _, ok := c.Nodes[n]; !ok {
			ps.add(ip, n, "unknown node")
		} else if seen[n] {
			ps.add(ip, n, "node listed twice in the route")
		}
		seen[n] = true
	}
}

// healthProblems checks the health, breaker and client sections.
func (c *Config) healthProblems(ps *Problems) {
	positive(ps, "health.heartbeat", c.Health.Heartbeat)
	positive(ps, "health.timeout", c.Health.Timeout)
	if c.Health.HoldBack < 0 {
		ps.add("health.hold_back", c.Health.HoldBack.String(), "must be 0 (the default) or positive")
	}
	if len(c.Health.Backoff) == 0 {
		ps.add("health.backoff", nil, "at least one delay is required")
	}
	for i, d := range c.Health.Backoff {
		positive(ps, "health.backoff["+strconv.Itoa(i)+"]", d)
	}
	if c.Breaker.Failures < 1 {
		ps.add("breaker.failures", c.Breaker.Failures, "must be >= 1")
	}
	positive(ps, "breaker.open_timeout", c.Breaker.OpenTimeout)
	positive(ps, "client.command_timeout", c.Client.CommandTimeout)
	if c.Client.PoolSize < 0 || c.Client.PoolSize > 10000 {
		ps.add("client.pool_size", c.Client.PoolSize, "must be 0 (go-redis's default) .. 10000")
	}
}

// pipelineProblems checks the pipeline section.
func (c *Config) pipelineProblems(ps *Problems) {
	pl := c.Pipeline
	if pl.MaxBatch < 1 || pl.MaxBatch > 10000 {
		ps.add("pipeline.max_batch", pl.MaxBatch, "must be 1..10000")
	}
	if pl.From < 0 || pl.From > 100000 {
		ps.add("pipeline.from", pl.From, "must be 1..100000 (0: 6)")
	}
	if pl.BusyFrom != 0 && (pl.BusyFrom < 2 || pl.BusyFrom > 100000) {
		ps.add("pipeline.busy_from", pl.BusyFrom, "must be 2..100000 (0: 12)")
	}
	if pl.BusyMaxBatch < 0 || pl.BusyMaxBatch > 10000 {
		ps.add("pipeline.busy_max_batch", pl.BusyMaxBatch, "must be 1..10000 (0: 16)")
	}
	if pl.BusyFlushDelay < 0 || pl.BusyFlushDelay > 10*time.Millisecond {
		ps.add("pipeline.busy_flush_delay", pl.BusyFlushDelay, "must be 0..10ms")
	}
}

// inventoryProblems checks the inventory section.
func (c *Config) inventoryProblems(ps *Problems) {
	inv := c.Inventory
	if inv.Server == "" {
		ps.add("inventory.server", nil, "required")
	}
	positive(ps, "inventory.reservation_ttl", inv.ReservationTTL)
	positive(ps, "inventory.max_reservation_ttl", inv.MaxReservationTTL)
	if inv.MaxReservationTTL > 0 && inv.MaxReservationTTL < inv.ReservationTTL {
		ps.add("inventory.max_reservation_ttl", inv.MaxReservationTTL,
			"must be >= inventory.reservation_ttl ("+inv.ReservationTTL.String()+")")
	}
	positive(ps, "inventory.reconcile_interval", inv.ReconcileInterval)
	checkRetention(ps, inv)
	if inv.RedoMaxAge < 0 {
		ps.add("inventory.redo_max_age", inv.RedoMaxAge.String(), "must be >= 0 (0 = never trim unacknowledged entries)")
	}
	positive(ps, "inventory.attempt_lease", inv.AttemptLease)
	if inv.GroupCommit < 0 || inv.GroupCommit > 1000 {
		ps.add("inventory.group_commit", inv.GroupCommit, "must be between 0 and 1000 (0 = 32, 1 = no group commit)")
	}
	if inv.CarryWait > time.Minute {
		ps.add("inventory.carry_wait", inv.CarryWait.String(), "must be at most 1m (negative = every commit sent by itself, 0 = 2ms)")
	}
	if inv.RedoQueues < 1 || inv.RedoQueues > 1024 {
		ps.add("inventory.redo_queues", inv.RedoQueues, "must be between 1 and 1024")
	}
	switch inv.Durability {
	case "", DurabilityNone:
	case DurabilityReplica, DurabilityAOF:
		checkDurabilityTimeout(ps, inv.DurabilityTimeout, c.Client.CommandTimeout)
	default:
		ps.add("inventory.durability", inv.Durability, `must be "none", "replica" or "aof"`)
	}
}

// MinRetention is the shortest inventory.retention: the nodes count it
// in whole seconds, and a move reads an undecided copy of an order's
// record as past its retention two seconds early, for two nodes' clocks
// each a second off (inventory/lua/order_move_out.lua). Below 3 s such a
// copy whose install had not landed was moved no more while the order's
// new home still read it as before its deadline: a Confirm then found no
// record, the acknowledged reservation lost
// (inventory.TestRetentionBelowTheSkewBoundIsRefused).
const MinRetention = 3 * time.Second

// checkRetention requires a retention of at least MinRetention, above
// max_reservation_ttl.
func checkRetention(ps *Problems, inv Inventory) {
	switch {
	case inv.Retention <= 0:
		positive(ps, "inventory.retention", inv.Retention)
	case inv.Retention <= inv.MaxReservationTTL:
		ps.add("inventory.retention", inv.Retention.String(),
			"must exceed inventory.max_reservation_ttl ("+inv.MaxReservationTTL.String()+")")
	case inv.Retention < MinRetention:
		ps.add("inventory.retention", inv.Retention.String(),
			"must be at least "+MinRetention.String()+" (counted in whole seconds; two seconds of it cover the nodes' clock skew)")
	}
}

// checkDurabilityTimeout requires a WAIT timeout below the command timeout.
func checkDurabilityTimeout(ps *Problems, d, commandTimeout time.Duration) {
	if d <= 0 {
		positive(ps, "inventory.durability_timeout", d)
	} else if commandTimeout > 0 && d >= commandTimeout {
		ps.add("inventory.durability_timeout", d.String(),
			"must be below client.command_timeout ("+commandTimeout.String()+"): the WAIT reply has to arrive within the read timeout")
	}
}

// checkSentinel checks the sentinel block of node name at path p, and that
// no other node (recorded in groups) names the same master group.
func checkSentinel(ps *Problems, p, name string, s Sentinel, groups map[string]string) {
	if s.Master == "" {
		ps.add(p+".master", nil, "required: the master group's name as the sentinels know it")
	} else {
		checkName(ps, p+".master", s.Master)
	}
	if len(s.Addrs) == 0 {
		ps.add(p+".addrs", nil, "at least one sentinel host:port is required")
	}
	seen := map[string]bool{}
	for i, a := range s.Addrs {
		ip := p + ".addrs[" + strconv.Itoa(i) + "]"
		if !checkAddr(ps, ip, a, false) {
			continue
		}
		k := addrKey(a) // Sent:26379 and sent:026379 are one sentinel
		if seen[k] {
			ps.add(ip, a, "sentinel listed twice")
		}
		seen[k] = true
		if s.Master == "" {
			continue
		}
		key := s.Master + "@" + k
		if other, dup := groups[key]; dup && other != name {
			ps.add(p+".master", s.Master, "same master group (same sentinel "+a+") as node "+other)
			continue
		}
		groups[key] = name
	}
	checkTLS(ps, p+".tls", s.TLS)
}

// checkTLS checks a TLS block at path p: the certificate and key go
// together and every named file can be read.
func checkTLS(ps *Problems, p string, t NodeTLS) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		ps.add(p, nil, "cert_file and key_file go together")
	}
	for _, f := range []struct{ key, path string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
		if f.path != "" {
			if _, err := os.Stat(f.path); err != nil {
				ps.add(p+"."+f.key, f.path, "cannot read the file")
			}
		}
	}
}

// checkName requires names usable as node identities and in Redis keys.
func checkName(ps *Problems, path, name string) {
	if name == "" || len(name) > 64 {
		ps.add(path, name, "name must be 1 to 64 characters")
		return
	}
	for _, r := range name {
		ok := r == '-' || r == '_' || r == '.' || (r >= '0' && r <= '9') ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !ok {
			ps.add(path, name, "name may hold only letters, digits, '-', '_' and '.'")
			return
		}
	}
}

// checkAddr requires host:port; port 0 (any free port) only when anyPort.
func checkAddr(ps *Problems, path, addr string, anyPort bool) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		ps.add(path, addr, "want host:port")
		return false
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 || (p == 0 && !anyPort) {
		ps.add(path, addr, "port must be 1-65535")
		return false
	}
	return true
}

func positive(ps *Problems, path string, d time.Duration) {
	if d <= 0 {
		ps.add(path, d.String(), "must be a positive duration")
	}
}

func reflectValue(c *Config) reflect.Value { return reflect.ValueOf(c).Elem() }
