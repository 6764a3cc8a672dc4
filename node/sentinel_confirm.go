package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The server that acknowledged a write.
//
// A write sent with WAIT (inventory.durability replica or aof) is on a
// replica of the server it ran on, which is not enough on a group with two
// replicas or more: while the sentinels switch the group to one replica
// (a SENTINEL FAILOVER of a running master, or a master partitioned from
// them), the old master still takes writes, and another replica, not yet
// reconfigured, still streams from it and answers its WAIT. The switch
// then resyncs that replica from the promoted one, and the old master
// too: the acknowledged write is gone. No check on the server itself sees
// it (the old master's ROLE is master until the sentinels convert it),
// nor does the node's view of the group (its probe runs every heartbeat,
// a pooled connection may still reach the old master after a renewal,
// and a node no sentinel answers stays UP by design).
//
// The rule: on a Sentinel group, a write waited for is acknowledged only
// once [Node.ConfirmMaster] finds, in a round of questions to the group's
// sentinels begun after its WAIT returned, that a majority of the known
// sentinels answer, and that every one that answers names as the master
// the server process the write ran on (its run_id, read on the write's
// own connection) with no failover of the group under way. A switch
// promotes a replica only within a failover under way at its leader, which
// says so until the switch is done and then names the new master; so a
// write is refused as unacknowledged whenever it may have run on a master
// already switched away from, as long as the leader is among those
// answering. Not closed: a leader that this process cannot reach while a
// majority of other sentinels answer (they learn of the switch only when
// it is done), and a replica promoted after the write that did not have
// it (Sentinel's choice is best-effort; README "Durability of acknowledged
// writes").

// confirmRound is the bookkeeping of ConfirmMaster's rounds: one at a
// time, and a round begun after a caller's write was acknowledged serves
// it (the answers only need to postdate its WAIT), so writes acknowledged
// together share one round.
type confirmRound struct {
	mu      sync.Mutex     // held while a round asks the sentinels
	began   time.Time      // when the last round began; guarded by mu
	answers []masterAnswer // the last round's answers; guarded by mu
	asked   int            // how many sentinels the last round asked; guarded by mu
}

// masterAnswer is one sentinel's answer to a confirm round: the run_id of
// the server it names as the group's master, and whether a failover of
// the group is under way at it.
type masterAnswer struct {
	sentinel, addr, run string
	failover            bool
}

// ErrMasterUnconfirmed is wrapped by [Node.ConfirmMaster]'s error: the
// sentinels did not confirm that the server a write ran on is the group's
// master (see "The server that acknowledged").
var ErrMasterUnconfirmed = errors.New("the sentinels did not confirm the server as the group's master")

// ConfirmMaster returns nil when the node is not a Sentinel group, or
// when, in a round of questions to its known sentinels begun after the
// call (shared with concurrent calls), more than half of them answered
// and every one that answered names as the master the server process run
// (a run_id, "" never matches; where a sentinel has not learned the named
// master's run_id yet, the server at the named address tells it:
// learnRuns), with no failover of the group under way.
// Otherwise it returns an error wrapping [ErrMasterUnconfirmed]. A
// sentinel that does not answer within sentinelBound(ProbeTimeout) has
// not answered. See "The server that acknowledged".
func (n *Node) ConfirmMaster(ctx context.Context, run string) error {
	if !n.IsSentinel() {
		return nil
	}
	after := time.Now()
	n.confirms.mu.Lock()
	defer n.confirms.mu.Unlock()
	if !n.confirms.began.After(after) {
		began := time.Now()
		n.confirms.answers, n.confirms.asked = n.askMasters(ctx)
		n.learnRuns(ctx, n.confirms.answers)
		n.confirms.began = began
	}
	answers, asked := n.confirms.answers, n.confirms.asked
	var wrong []string
	for _, a := range answers {
		switch {
		case a.failover:
			wrong = append(wrong, a.sentinel+" has a failover under way")
		case run == "" || a.run != run:
			wrong = append(wrong, fmt.Sprintf("%s names %s (run_id %q)", a.sentinel, a.addr, a.run))
		}
	}
	switch {
	case len(wrong) > 0:
		return fmt.Errorf("%w: node %s, server run_id %q: %s", ErrMasterUnconfirmed, n.opts.Name, run, strings.Join(wrong, ", "))
	case 2*len(answers) <= asked:
		return fmt.Errorf("%w: node %s: %d of %d sentinels answered, not a majority", ErrMasterUnconfirmed, n.opts.Name, len(answers), asked)
	}
	return nil
}

// learnRuns fills in the run_id of each answer that names a master
// whose run_id its sentinel has not learned yet ("": a sentinel learns it
// from the master's INFO, which it reads only some time after a switch,
// and longer on a busy machine: a clean-clone make test saw every write
// unconfirmed for 20 s after a failover) by asking the named server
// itself, once per address, within sentinelBound(ProbeTimeout). An answer
// whose server does not say stays "" and confirms nothing. The server
// at the named address is the one the sentinel names: a write confirmed
// by its run_id ran on it.
func (n *Node) learnRuns(ctx context.Context, answers []masterAnswer) {
	runs := map[string]string{}
	for i, a := range answers {
		if a.run != "" || a.failover {
			continue
		}
		run, ok := runs[a.addr]
		if !ok {
			run = n.serverRun(ctx, a.addr)
			runs[a.addr] = run
		}
		answers[i].run = run
	}
}

// serverRun returns the run_id the server at addr gives in INFO server,
// "" when it does not answer within sentinelBound(ProbeTimeout).
func (n *Node) serverRun(ctx context.Context, addr string) string {
	bound := sentinelBound(n.opts.ProbeTimeout)
	c := redis.NewClient(&redis.Options{
		Addr: addr, Username: n.opts.Username, Password: n.opts.Password, TLSConfig: n.opts.TLSConfig,
		Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		DialTimeout: bound, ReadTimeout: bound, WriteTimeout: bound, PoolTimeout: bound,
		ContextTimeoutEnabled: true,
	})
	defer c.Close()
	qctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	info, err := c.Info(qctx, "server").Result()
	if err != nil {
		return ""
	}
	return InfoRunID(info)
}

// InfoRunID returns the run_id in a reply of INFO server, "" when it
// holds none.
func InfoRunID(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return id
		}
	}
	return ""
}

// askMasters asks every known sentinel, concurrently, SENTINEL MASTER of
// the group, each bounded by sentinelBound(ProbeTimeout), and returns the
// answers and how many were asked.
func (n *Node) askMasters(ctx context.Context) ([]masterAnswer, int) {
	known := n.knownSentinels()
	ch := make(chan *masterAnswer, len(known))
	bound := sentinelBound(n.opts.ProbeTimeout)
	for _, a := range known {
		go func(a string) {
			c := n.asker(a)
			if c == nil {
				ch <- nil
				return
			}
			qctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			m, err := c.Master(qctx, n.opts.Sentinel.Master).Result()
			if err != nil || m["ip"] == "" {
				ch <- nil
				return
			}
			flags := strings.Split(m["flags"], ",")
			under := false
			for _, f := range flags {
				under = under || f == "failover_in_progress"
			}
			ch <- &masterAnswer{sentinel: a, addr: m["ip"] + ":" + m["port"], run: m["runid"], failover: under}
		}(a)
	}
	var out []masterAnswer
	for range known {
		if a := <-ch; a != nil {
			out = append(out, *a)
		}
	}
	return out, len(known)
}
