package node

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The sentinels settled on the group's master: the group-wide question
// electionsOver asks before it ends a pending vote (see "The server that
// acknowledged" and electionsOver).

// settledGroup is what idleSentinels found: the configuration epoch of
// each sentinel that answered settled, by ID, the most sentinels any of
// them counts in the group, the newest configuration, whether every known
// address answered so (all), and the replicas they list (ip:port).
type settledGroup struct {
	idle     map[string]int64
	group    int
	newest   int64
	all      bool
	replicas map[string]bool
}

// idleSentinels asks every known sentinel, concurrently, SENTINEL MYID,
// SENTINEL MASTER and SENTINEL REPLICAS (idleLeader) and returns what
// the settled ones said.
func (n *Node) idleSentinels(ctx context.Context) settledGroup {
	known := n.knownSentinels()
	ch := make(chan idleSentinel, len(known))
	bound := sentinelBound(n.opts.ProbeTimeout)
	for _, addr := range known {
		go func(addr string) {
			ch <- n.idleLeader(ctx, addr, bound)
		}(addr)
	}
	g := settledGroup{idle: map[string]int64{}, all: true, replicas: map[string]bool{}}
	for range known {
		l := <-ch
		if l.id == "" {
			g.all = false
			continue
		}
		g.idle[l.id] = max(g.idle[l.id], l.config)
		g.group = max(g.group, l.group)
		g.newest = max(g.newest, l.config)
		for _, r := range l.replicas {
			g.replicas[r] = true
		}
	}
	return g
}

// idleSentinel is a sentinel settled on the group's master (no failover
// under way, the master up, no replica in the master role): its ID, the
// epoch of its configuration of the group, the sentinels it counts in
// the group, itself included, and the replicas it lists (ip:port).
type idleSentinel struct {
	id       string
	config   int64
	group    int
	replicas []string
}

// idleLeader returns the ID (SENTINEL MYID) of the sentinel at addr, its
// config-epoch, its count of the group's sentinels and the replicas it
// lists when it is settled on the node's group: SENTINEL MASTER, on the
// same pooled connection, shows no failover under way and the master up
// (settledFlags), and SENTINEL REPLICAS no replica reporting the master
// role; a zero idleSentinel when it is not, or does not answer them all
// within bound.
func (n *Node) idleLeader(ctx context.Context, addr string, bound time.Duration) idleSentinel {
	c := n.asker(addr)
	if c == nil {
		return idleSentinel{}
	}
	qctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	myid := redis.NewStringCmd(qctx, "sentinel", "myid")
	if err := c.Process(qctx, myid); err != nil || myid.Val() == "" {
		return idleSentinel{}
	}
	m, err := c.Master(qctx, n.opts.Sentinel.Master).Result()
	if err != nil || !settledFlags(m["flags"]) {
		return idleSentinel{}
	}
	config, err1 := strconv.ParseInt(m["config-epoch"], 10, 64)
	others, err2 := strconv.Atoi(m["num-other-sentinels"])
	replicas, err3 := c.Replicas(qctx, n.opts.Sentinel.Master).Result()
	if err1 != nil || err2 != nil || err3 != nil {
		return idleSentinel{}
	}
	l := idleSentinel{id: myid.Val(), config: config, group: others + 1}
	for _, r := range replicas {
		if r["role-reported"] == "master" || r["ip"] == "" {
			return idleSentinel{}
		}
		l.replicas = append(l.replicas, net.JoinHostPort(r["ip"], r["port"]))
	}
	return l
}

// replicasFollow reports whether every replica in addrs, asked by this
// process itself, concurrently, answers INFO replication twice in a row
// on one connection (the second sent once the first is answered), with
// role:slave and its link to its master up both times, each within
// sentinelBound(ProbeTimeout). A replica cut off from the master misses
// the writes confirmed meanwhile, and a REPLICAOF NO ONE on its way to
// it (electionsOver, "Not seen") makes it a master without them
// (TestReplicaCutFromTheMasterDoesNotEndAVote: a write confirmed while
// p, its link down, still answered role:slave was gone once the held
// command landed and the next election promoted p). A
// sentinel's SENTINEL REPLICAS gives the role a replica reported at its
// last INFO, up to 10 s old (electionsOver), and a replica frozen with
// an aborted failover's REPLICAOF NO ONE in its socket answers nothing
// until it thaws, then runs whatever was read in that same turn of its
// event loop in any order: a second question, sent after the first was
// answered, is read in a later turn, after every command that was
// waiting when the replica thawed.
func (n *Node) replicasFollow(ctx context.Context, addrs map[string]bool) bool {
	ch := make(chan bool, len(addrs))
	bound := sentinelBound(n.opts.ProbeTimeout)
	for addr := range addrs {
		go func(addr string) {
			ch <- n.replicaFollows(ctx, addr, bound)
		}(addr)
	}
	ok := true
	for range addrs {
		ok = <-ch && ok
	}
	return ok
}

// replicaFollows asks the server at addr INFO replication twice, one
// after the other on one connection, each within bound: true when both
// answers say role:slave and master_link_status:up.
func (n *Node) replicaFollows(ctx context.Context, addr string, bound time.Duration) bool {
	c := n.dataClient(addr, bound)
	defer c.Close()
	for range 2 {
		qctx, cancel := context.WithTimeout(ctx, bound)
		info, err := c.Info(qctx, "replication").Result()
		cancel()
		if err != nil || !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
			return false
		}
	}
	return true
}

// settledFlags reports whether a sentinel's flags of the group's master
// (SENTINEL MASTER) show it with no failover under way and not down
// (failover_in_progress, s_down, o_down); false when there are none.
func settledFlags(flags string) bool {
	if flags == "" {
		return false
	}
	for _, f := range strings.Split(flags, ",") {
		if f == "failover_in_progress" || f == "s_down" || f == "o_down" {
			return false
		}
	}
	return true
}
