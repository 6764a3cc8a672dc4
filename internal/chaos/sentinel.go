package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redisproc"
)

// The Sentinel topology (Options.Sentinel): every node of the run is a
// master group of a master (AOF, appendfsync always), one replica and
// three sentinels (down-after 1s), and the service runs with
// inventory.durability Options.Durability (default replica). The nemesis
// then kills masters ("kill -9 master": the sentinels promote the replica,
// the service follows it without a restart, the old master comes back as
// a replica after the hold) and pauses masters past the sentinels'
// down-after, which also ends in a promotion (and a demoted master that
// must not keep taking writes). Healing brings every data server back as
// a replica of its group's master; the checks read each group's master.

// FaultKillMaster kills the current master of a Sentinel group with
// SIGKILL, waits for the sentinels to promote its replica and, after the
// hold, brings the old master back as a replica of the new one.
const FaultKillMaster = "kill -9 master"

// startGroups starts one master group per node name and returns their
// configuration entries.
func (c *cluster) startGroups(names []string) (map[string]config.Node, error) {
	nodes := map[string]config.Node{}
	c.groups = map[string]*redisproc.Group{}
	for _, name := range names {
		gopts := redisproc.GroupOptions{Name: "chaos-" + name, AOF: true, KillWithParent: true}
		if c.opts.Dir != "" {
			gopts.Dir = filepath.Join(c.opts.Dir, name)
		}
		g, err := redisproc.StartGroup(gopts)
		if err != nil {
			return nil, err
		}
		c.groups[name] = g
		nodes[name] = config.Node{Weight: 1, Sentinel: config.Sentinel{Master: g.Name, Addrs: g.SentinelAddrs()}}
	}
	return nodes, nil
}

// master returns the server a node's data is on now: the node's process,
// or its group's current master (nil when no majority of the sentinels
// names one within a few seconds, e.g. in the middle of a failover).
func (c *cluster) master(name string) *redisproc.Server {
	g := c.groups[name]
	if g == nil {
		return c.procs[name]
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		addr, err := g.Master(ctx)
		cancel()
		if err == nil {
			return g.ByAddr(addr)
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nodeAddr returns where a node's data is now (see master); for a group
// whose master cannot be told, the server that started as its master (its
// reads then fail or are stale, and the checks say so).
func (c *cluster) nodeAddr(name string) string {
	if s := c.master(name); s != nil {
		return s.Addr()
	}
	return c.groups[name].Data[0].Addr()
}

// killMaster is the FaultKillMaster of node's group.
func (n *nemesis) killMaster(ctx context.Context, node string, hold time.Duration) {
	g := n.c.groups[node]
	f := Fault{At: n.at(), Kind: FaultKillMaster, Target: node}
	start := time.Now()
	defer func() {
		f.Hold = time.Since(start)
		n.record(f)
	}()
	old := n.c.master(node)
	if old == nil {
		f.Err = "the sentinels name no master"
		return
	}
	if err := old.Kill(); err != nil {
		f.Err = err.Error()
		return
	}
	promoted, err := g.WaitPromoted(context.Background(), old.Addr(), 60*time.Second) // past a sentinel TILT (30 s) on a loaded machine
	if err != nil {
		f.Err = err.Error()
		return
	}
	f.Target = fmt.Sprintf("%s %s->%s promoted in %v", node, old.Addr(), promoted, time.Since(start).Round(10*time.Millisecond))
	sleepCtx(ctx, hold-time.Since(start))
	if err := n.c.rejoin(node); err != nil {
		f.Err = "rejoin: " + err.Error()
	}
}

// pauseMaster freezes the current master of node's group for hold; the
// sentinels may promote the replica meanwhile (hold > down-after), and
// the old master is then brought back as a replica.
func (n *nemesis) pauseMaster(ctx context.Context, kind, node string, hold time.Duration) {
	f := Fault{At: n.at(), Kind: kind, Target: node}
	start := time.Now()
	defer func() {
		f.Hold = time.Since(start)
		n.record(f)
	}()
	p := n.c.master(node)
	if p == nil {
		f.Err = "the sentinels name no master"
		return
	}
	if err := p.Pause(); err != nil {
		f.Err = err.Error()
	}
	sleepCtx(ctx, hold)
	if err := p.Resume(); err != nil {
		f.Err = "resume: " + err.Error()
	}
	if now := n.c.master(node); now != nil && now != p {
		f.Target = fmt.Sprintf("%s %s->%s promoted", node, p.Addr(), now.Addr())
	}
	if err := n.c.rejoin(node); err != nil {
		f.Err = "rejoin: " + err.Error()
	}
}

// longPauseMaster is pauseMaster in the background, past the attempt
// lease: other faults overlap it (on other nodes).
func (n *nemesis) longPauseMaster(ctx context.Context, node string, hold time.Duration) {
	n.mu.Lock()
	n.frozen = node
	n.mu.Unlock()
	fmt.Fprintf(n.out, "+%6.2fs %-16s %-8s begins, for %v\n", n.at().Seconds(), FaultLongPause, node, hold.Round(10*time.Millisecond))
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.pauseMaster(ctx, FaultLongPause, node, hold)
		n.mu.Lock()
		n.frozen = ""
		n.mu.Unlock()
	}()
}

// rejoin brings every data server of node's group that is down, paused or
// still a master beside the sentinels' master back as a replica, and waits
// until the group is settled.
func (c *cluster) rejoin(node string) error {
	g := c.groups[node]
	ctx := context.Background()
	for _, s := range g.Data {
		if err := s.Resume(); err != nil {
			return err
		}
	}
	// Not while the sentinels are still failing over: a REPLICAOF then
	// could undo their promotion.
	master, err := g.WaitStableMaster(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	for _, s := range g.Data {
		if s.Addr() != master {
			if err := g.Rejoin(ctx, s.Addr()); err != nil {
				return err
			}
		}
	}
	return g.WaitSettled(ctx, 30*time.Second)
}

// healGroups resumes and rejoins every data server of every group.
func (c *cluster) healGroups() error {
	for _, name := range c.names {
		if c.groups[name] == nil {
			continue
		}
		if err := c.rejoin(name); err != nil {
			return fmt.Errorf("chaos: heal: group of %s: %w", name, err)
		}
	}
	return nil
}
