package node

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The sentinels settled on the group's master: the group-wide question
// electionsOver asks before it ends a pending vote (see "The server that
// acknowledged" and electionsOver).

// idleSentinels asks every known sentinel, concurrently, SENTINEL MYID,
// SENTINEL MASTER and SENTINEL REPLICAS (idleLeader) and returns the
// configuration epoch of each that answered settled, by ID,
// the most sentinels any of them counts in the group, the newest
// configuration, and whether every known address answered so (all).
func (n *Node) idleSentinels(ctx context.Context) (idle map[string]int64, group int, newest int64, all bool) {
	known := n.knownSentinels()
	ch := make(chan idleSentinel, len(known))
	bound := sentinelBound(n.opts.ProbeTimeout)
	for _, addr := range known {
		go func(addr string) {
			ch <- n.idleLeader(ctx, addr, bound)
		}(addr)
	}
	idle, all = map[string]int64{}, true
	for range known {
		l := <-ch
		if l.id == "" {
			all = false
			continue
		}
		idle[l.id] = max(idle[l.id], l.config)
		group = max(group, l.group)
		newest = max(newest, l.config)
	}
	return idle, group, newest, all
}

// idleSentinel is a sentinel settled on the group's master (no failover
// under way, the master up, no replica in the master role): its ID, the epoch of its configuration of the group, and the
// sentinels it counts in the group, itself included.
type idleSentinel struct {
	id     string
	config int64
	group  int
}

// idleLeader returns the ID (SENTINEL MYID) of the sentinel at addr, its
// config-epoch and its count of the group's sentinels when it is settled
// on the node's group: SENTINEL MASTER, on the same pooled connection,
// shows no failover under way and the master up (settledFlags), and
// SENTINEL REPLICAS no replica reporting the master role; a zero
// idleSentinel when it is not, or does not answer them all within bound.
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
	for _, r := range replicas {
		if r["role-reported"] == "master" {
			return idleSentinel{}
		}
	}
	return idleSentinel{id: myid.Val(), config: config, group: others + 1}
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
