package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// GroupOptions configures StartGroup. The zero value is one master, one
// replica and three sentinels (quorum 2) that mark a silent master down
// after 1s.
type GroupOptions struct {
	// Name is the master group's name the sentinels monitor.
	// default: "mymaster"
	Name string
	// Replicas is the number of replicas of the master.
	// default: 1
	Replicas int
	// Sentinels is the number of sentinels.
	// default: 3
	Sentinels int
	// Quorum is the number of sentinels that must agree the master is down.
	// default: a majority of Sentinels
	Quorum int
	// DownAfter is the sentinels' down-after-milliseconds.
	// default: 1s
	DownAfter time.Duration
	// FailoverTimeout is the sentinels' failover-timeout (also twice the
	// delay before a failed failover is tried again).
	// default: 2s
	FailoverTimeout time.Duration
	// AOF turns the append-only file on for every data server (see
	// Options.AOF).
	AOF bool
	// Password is every data server's requirepass ("" = none), also the
	// masterauth of replicas and the auth-pass the sentinels use; the
	// sentinels themselves need none.
	Password string
	// Args are extra redis-server arguments for every data server (see
	// Options.Args).
	Args []string
	// Dir is a base directory: the data servers get Dir/server-N. ""
	// gives each its own temporary directory, removed by Close. The
	// sentinels always run in temporary directories (removed by Close) on
	// /dev/shm when it is writable: a sentinel rewrites and fsyncs its
	// configuration file on every state change, and on a disk loaded by
	// other work (AOF fsyncs of many test servers) that fsync can stall it
	// past down-after and make it see a healthy master as down.
	Dir string
	// KillWithParent is passed to every process (see Options).
	KillWithParent bool
}

// Group is a Sentinel-managed master group of real processes: data
// servers (the first one starts as master, the others as its replicas)
// and the sentinels that monitor it. Which data server is the master
// changes with failovers; ask [Group.Master].
type Group struct {
	// Name is the master group's name the sentinels monitor.
	Name string
	// Data are the data servers; Data[0] started as the master, the
	// others as its replicas.
	Data []*Server
	// Sentinels are the sentinel processes.
	Sentinels []*Server
	// Password is the data servers' requirepass ("" = none).
	Password string
}

// StartGroup starts a master, its replicas and the sentinels, and returns
// once every replica is in sync and every sentinel knows every replica
// and every other sentinel (so a failover can happen at once). On failure
// everything started is closed.
func StartGroup(opts GroupOptions) (*Group, error) {
	if opts.Name == "" {
		opts.Name = "mymaster"
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Sentinels == 0 {
		opts.Sentinels = 3
	}
	if opts.Quorum == 0 {
		opts.Quorum = opts.Sentinels/2 + 1
	}
	if opts.DownAfter <= 0 {
		opts.DownAfter = time.Second
	}
	if opts.FailoverTimeout <= 0 {
		opts.FailoverTimeout = 2 * time.Second
	}
	g := &Group{Name: opts.Name, Password: opts.Password}
	ok := false
	defer func() {
		if !ok {
			_ = g.Close()
		}
	}()
	sub := func(kind string, i int) string {
		if opts.Dir == "" {
			return ""
		}
		return filepath.Join(opts.Dir, kind+"-"+strconv.Itoa(i))
	}
	for i := 0; i <= opts.Replicas; i++ {
		// A replica that (re)joins gets its full sync at once, not after
		// Redis's default 5s wait for more replicas to share it.
		args := append([]string{"--repl-diskless-sync-delay", "0"}, opts.Args...)
		if opts.Password != "" {
			args = append(args, "--masterauth", opts.Password)
		}
		if i > 0 {
			args = append(args, "--replicaof", "127.0.0.1", strconv.Itoa(g.Data[0].Port()))
		}
		s, err := Start(Options{Dir: sub("server", i), AOF: opts.AOF, Password: opts.Password, Args: args,
			KillWithParent: opts.KillWithParent})
		if err != nil {
			return nil, fmt.Errorf("redisproc: group %s: data server %d: %w", opts.Name, i, err)
		}
		g.Data = append(g.Data, s)
	}
	conf := []string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", opts.Name, g.Data[0].Port(), opts.Quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", opts.Name, opts.DownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", opts.Name, opts.FailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", opts.Name),
	}
	if opts.Password != "" {
		conf = append(conf, fmt.Sprintf("sentinel auth-pass %s %s", opts.Name, opts.Password))
	}
	for i := 0; i < opts.Sentinels; i++ {
		s, err := Start(Options{TempRoot: shmDir(), SentinelConf: strings.Join(conf, "\n"),
			KillWithParent: opts.KillWithParent})
		if err != nil {
			return nil, fmt.Errorf("redisproc: group %s: sentinel %d: %w", opts.Name, i, err)
		}
		g.Sentinels = append(g.Sentinels, s)
	}
	if err := g.WaitSettled(context.Background(), 30*time.Second); err != nil {
		return nil, err
	}
	ok = true
	return g, nil
}

// shmDir returns /dev/shm when a directory can be made there, else "" (the
// default temporary directory).
func shmDir() string {
	d, err := os.MkdirTemp("/dev/shm", "redisproc-probe-*")
	if err != nil {
		return ""
	}
	_ = os.Remove(d)
	return "/dev/shm"
}

// Logs returns the last lines (up to n) of every process's log, one
// section per process, for a test that failed.
func (g *Group) Logs(n int) string {
	var b strings.Builder
	for _, s := range append(append([]*Server(nil), g.Data...), g.Sentinels...) {
		data, _ := os.ReadFile(s.logPath())
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "--- %s (%s) ---\n%s\n", s.Addr(), s.logPath(), strings.Join(lines, "\n"))
	}
	return b.String()
}

// SentinelAddrs returns the sentinels' addresses.
func (g *Group) SentinelAddrs() []string {
	out := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		out[i] = s.Addr()
	}
	return out
}

// ByAddr returns the data server at addr, or nil.
func (g *Group) ByAddr(addr string) *Server {
	for _, s := range g.Data {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// groupClient returns a one-connection client for addr (a sentinel when
// password is "").
func groupClient(addr, password string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, Password: password, Protocol: 2, DisableIdentity: true,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRetries: -1, PoolSize: 1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// Master returns the address the sentinels name as the group's master:
// the answer of a majority of the sentinels that answered, or an error
// when they disagree or too few answer.
func (g *Group) Master(ctx context.Context) (string, error) {
	votes := map[string]int{}
	var errs []error
	for _, s := range g.Sentinels {
		c := groupClient(s.Addr(), "")
		v, err := c.Do(ctx, "sentinel", "get-master-addr-by-name", g.Name).StringSlice()
		_ = c.Close()
		if err != nil || len(v) != 2 {
			errs = append(errs, fmt.Errorf("sentinel %s: %v %v", s.Addr(), v, err))
			continue
		}
		votes[net.JoinHostPort(v[0], v[1])]++
	}
	for addr, n := range votes {
		if n > len(g.Sentinels)/2 {
			return addr, nil
		}
	}
	return "", fmt.Errorf("redisproc: group %s: no majority of sentinels names one master (votes %v): %w", g.Name, votes, errors.Join(errs...))
}

// info returns an INFO section of the data server at addr as a map.
func (g *Group) info(ctx context.Context, addr, section string) (map[string]string, error) {
	c := groupClient(addr, g.Password)
	defer c.Close()
	raw, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(raw, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// settled reports why the group is not ready for a failover, or nil: the
// sentinels agree on a master that says it is one, every running data
// server other than it is its replica with the link up, and every
// sentinel knows every running replica and every other running sentinel.
func (g *Group) settled(ctx context.Context) error {
	master, err := g.Master(ctx)
	if err != nil {
		return err
	}
	mi, err := g.info(ctx, master, "replication")
	if err != nil {
		return fmt.Errorf("master %s: %w", master, err)
	}
	if mi["role"] != "master" {
		return fmt.Errorf("master %s reports role %s", master, mi["role"])
	}
	var replicas []string
	for _, s := range g.Data {
		if s.Addr() == master || !s.Running() {
			continue
		}
		replicas = append(replicas, s.Addr())
		ri, err := g.info(ctx, s.Addr(), "replication")
		if err != nil {
			return fmt.Errorf("replica %s: %w", s.Addr(), err)
		}
		if ri["role"] != "slave" || ri["master_link_status"] != "up" || ri["master_port"] != strconv.Itoa(portOf(master)) {
			return fmt.Errorf("replica %s: role %s, master port %s, link %s", s.Addr(), ri["role"], ri["master_port"], ri["master_link_status"])
		}
	}
	liveSentinels := 0
	for _, s := range g.Sentinels {
		if s.Running() {
			liveSentinels++
		}
	}
	for _, s := range g.Sentinels {
		if !s.Running() {
			continue
		}
		c := groupClient(s.Addr(), "")
		m, err := c.Do(ctx, "sentinel", "master", g.Name).Result()
		var reps any
		if err == nil {
			reps, err = c.Do(ctx, "sentinel", "replicas", g.Name).Result()
		}
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", s.Addr(), err)
		}
		f := flat(m)
		others, _ := strconv.Atoi(f["num-other-sentinels"])
		if others < liveSentinels-1 || f["flags"] != "master" {
			return fmt.Errorf("sentinel %s knows %d other sentinels, flags %s (want %d, master)",
				s.Addr(), others, f["flags"], liveSentinels-1)
		}
		healthy := map[string]bool{}
		list, _ := reps.([]any)
		for _, r := range list {
			rf := flat(r)
			if !strings.Contains(rf["flags"], "s_down") && !strings.Contains(rf["flags"], "disconnected") {
				healthy[net.JoinHostPort(rf["ip"], rf["port"])] = true
			}
		}
		for _, r := range replicas {
			if !healthy[r] {
				return fmt.Errorf("sentinel %s does not list replica %s as healthy", s.Addr(), r)
			}
		}
	}
	return nil
}

// WaitSettled waits, up to limit, until the group is ready for a failover
// (see settled): after a start, a failover or a restart.
func (g *Group) WaitSettled(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := g.settled(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redisproc: group %s not settled within %v: %w", g.Name, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitPromoted waits, up to limit, until the sentinels name a master other
// than old and that server reports role master; it returns its address.
func (g *Group) WaitPromoted(ctx context.Context, old string, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		addr, err := g.Master(cctx)
		if err == nil && addr != old {
			var mi map[string]string
			if mi, err = g.info(cctx, addr, "replication"); err == nil && mi["role"] != "master" {
				err = fmt.Errorf("%s reports role %s", addr, mi["role"])
			}
		} else if err == nil {
			err = fmt.Errorf("the sentinels still name %s", old)
		}
		cancel()
		if err == nil {
			return addr, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("redisproc: group %s: no new master within %v: %w", g.Name, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitStableMaster waits, up to limit, until every running sentinel names
// the same master, flags it plainly "master" (not subjectively or
// objectively down, no failover in progress) and that server reports role
// master; it returns its address. Rejoin after it does not race a
// failover the sentinels are still carrying out.
func (g *Group) WaitStableMaster(ctx context.Context, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		addr, err := g.stableMaster(cctx)
		cancel()
		if err == nil {
			return addr, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("redisproc: group %s: no stable master within %v: %w", g.Name, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (g *Group) stableMaster(ctx context.Context) (string, error) {
	addr := ""
	for _, s := range g.Sentinels {
		if !s.Running() {
			continue
		}
		c := groupClient(s.Addr(), "")
		m, err := c.Do(ctx, "sentinel", "master", g.Name).Result()
		_ = c.Close()
		if err != nil {
			return "", fmt.Errorf("sentinel %s: %w", s.Addr(), err)
		}
		f := flat(m)
		a := net.JoinHostPort(f["ip"], f["port"])
		if f["flags"] != "master" {
			return "", fmt.Errorf("sentinel %s flags master %s as %s", s.Addr(), a, f["flags"])
		}
		if addr != "" && a != addr {
			return "", fmt.Errorf("sentinels name %s and %s", addr, a)
		}
		addr = a
	}
	mi, err := g.info(ctx, addr, "replication")
	if err != nil {
		return "", fmt.Errorf("master %s: %w", addr, err)
	}
	if mi["role"] != "master" {
		return "", fmt.Errorf("master %s reports role %s", addr, mi["role"])
	}
	return addr, nil
}

// Rejoin brings a former master back as a replica of the current master,
// as an operator would: it restarts the server at addr when it is not
// running (with its AOF data when the group has AOF; its data is replaced
// by the master's anyway) and sends it REPLICAOF the master the sentinels
// name. The sentinels would reconfigure it too, but only after their next
// INFO of it, up to ten seconds later. Wait with WaitSettled.
func (g *Group) Rejoin(ctx context.Context, addr string) error {
	s := g.ByAddr(addr)
	if s == nil {
		return fmt.Errorf("redisproc: group %s has no data server %s", g.Name, addr)
	}
	master, err := g.Master(ctx)
	if err != nil {
		return err
	}
	if master == addr {
		return fmt.Errorf("redisproc: group %s: %s is the master, not a former one", g.Name, addr)
	}
	if !s.Running() {
		if err := s.Restart(); err != nil {
			return err
		}
	}
	c := groupClient(addr, g.Password)
	defer c.Close()
	host, port, _ := net.SplitHostPort(master)
	if err := c.Do(ctx, "replicaof", host, port).Err(); err != nil {
		return fmt.Errorf("redisproc: group %s: REPLICAOF %s on %s: %w", g.Name, master, addr, err)
	}
	return nil
}

// Close closes every process of the group (see Server.Close).
func (g *Group) Close() error {
	var errs []error
	for _, s := range g.Sentinels {
		errs = append(errs, s.Close())
	}
	for _, s := range g.Data {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// flat turns a RESP2 flat key/value array (or a RESP3 map) into a map.
func flat(v any) map[string]string {
	out := map[string]string{}
	switch m := v.(type) {
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			out[fmt.Sprint(m[i])] = fmt.Sprint(m[i+1])
		}
	case map[any]any:
		for k, val := range m {
			out[fmt.Sprint(k)] = fmt.Sprint(val)
		}
	}
	return out
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}
