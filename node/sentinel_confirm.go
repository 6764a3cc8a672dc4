package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
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
// sentinels begun after its WAIT returned, that a majority of the
// group's sentinels answer (counted by SENTINEL MYID: sentinelKeys), and that every one that answers names as the master
// the server process the write ran on (its run_id, read on the write's
// own connection) with no failover of the group under way. A switch
// promotes a replica only within a failover under way at its leader, which
// says so until the switch is done and then names the new master; so a
// write is refused as unacknowledged whenever it may have run on a master
// already switched away from, as long as the leader is among those
// answering. A leader this process cannot reach (a partition, or one
// whose announcement has not reached the others yet: they learn of the
// switch only from it) is seen through its voters: it was elected by a
// majority of the group's sentinels, so one of a majority that answers
// voted for it, and a sentinel whose last vote (SENTINEL
// IS-MASTER-DOWN-BY-ADDR at epoch 0) is newer than the configuration it
// names confirms nothing until it hears of the switch or the election is
// over: its leader, and every other sentinel of the group, says it has
// no failover under way and no configuration newer than the voter's (a
// vote shows only the last election; an earlier one may have promoted
// behind it), sees the master up and no replica in the master role,
// and every replica it lists, asked by this process, answers a replica
// (an aborted promotion may have left one, or may still be waiting in
// a frozen replica) (pendingVotes, electionsOver; TestFailoverLedByAnUnreachableSentinelDoesNotAcknowledgeOnTheOldMaster:
// without it, a Reserve acknowledged on the old master while s2 and s3,
// which had elected the leader, still named it, was gone from the new
// master). For that, the majority is of the group's sentinels as any
// answering one counts them (num-other-sentinels + 1), not only of those
// this process knows. Not closed: a SENTINEL FAILOVER sent to a sentinel
// this process cannot reach (a forced failover takes no votes: send it
// only to a sentinel every shardis process reaches), a leader still cut
// off from the sentinels this process reaches once the election is over
// (pendingVotes), and a replica promoted after the write that did not
// have it (Sentinel's choice is best-effort; README "Durability of
// acknowledged writes").

// confirmRound is the bookkeeping of ConfirmMaster's rounds: one at a
// time, and a round begun after a caller's write was acknowledged serves
// it (the answers only need to postdate its WAIT), so writes acknowledged
// together share one round.
type confirmRound struct {
	mu      sync.Mutex     // held while a round asks the sentinels
	began   time.Time      // when the last round began; guarded by mu
	answers []masterAnswer // the last round's answers; guarded by mu
	asked   int            // the group's sentinels as the last round counted them (askMasters); guarded by mu
	// votes holds, per sentinel, the newest vote seen newer than its
	// configuration and when a round first saw it (pendingVotes); guarded
	// by mu
	votes map[string]seenVote
}

// masterAnswer is one sentinel's answer to a confirm round: the run_id of
// the server it names as the group's master, whether a failover of the
// group is under way at it, the epoch of its configuration of the group
// (config-epoch) and of its last vote for a leader of the group
// (leader_epoch) and the sentinel it voted for (its ID, "*" when it no
// longer says), its failover-timeout, and whether that vote may still
// promote a replica (pendingVotes). sentinel is the address asked, id
// the SENTINEL MYID of the sentinel that answered there ("" when it did
// not say: askerConn), refused its refusal to say (sentinelID), key the
// sentinel it counts as (its id, else sentinelKeys).
type masterAnswer struct {
	sentinel, id, refused, key, addr, run string
	failover                              bool
	config, vote                          int64
	leader                                string
	group                                 int // the sentinels it knows of the group, itself included
	failoverTimeout                       time.Duration
	pending                               bool
}

// seenVote is a sentinel's vote newer than its configuration (its
// epoch) and when a confirm round first saw it. Whether its election is
// over is asked again in every round within the bound (electionsOver),
// never kept.
type seenVote struct {
	epoch int64
	since time.Time
}

// ErrMasterUnconfirmed is wrapped by [Node.ConfirmMaster]'s error: the
// sentinels did not confirm that the server a write ran on is the group's
// master (see "The server that acknowledged").
var ErrMasterUnconfirmed = errors.New("the sentinels did not confirm the server as the group's master")

// ConfirmMaster returns nil when the node is not a Sentinel group, or
// when, in a round of questions to its known sentinels begun after the
// call (shared with concurrent calls), more than half of them answered
// (sentinels counted by ID, not by address: sentinelKeys; one that
// refuses SENTINEL MYID counts for none: askerConn.identify) and every
// one that answered names as the master the server process run
// (a run_id, "" never matches; where a sentinel has not learned the named
// master's run_id yet, the server at the named address tells it:
// learnRuns), with no failover of the group under way and no vote for a
// leader newer than its configuration (pendingVotes). The known sentinels
// count as many as the most any answer knows of, or as the known
// addresses reach, whichever is more (askMasters).
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
		n.confirms.pendingVotes(began)
		n.electionsOver(ctx, &n.confirms)
		n.confirms.began = began
	}
	answers, asked := n.confirms.answers, n.confirms.asked
	var wrong []string
	for _, a := range answers {
		switch {
		case a.failover:
			wrong = append(wrong, a.sentinel+" has a failover under way")
		case a.pending:
			wrong = append(wrong, fmt.Sprintf("%s voted for a leader in epoch %d, newer than the configuration it "+
				"names (epoch %d): the failover it elected may be promoting a replica", a.sentinel, a.vote, a.config))
		case run == "" || a.run != run:
			wrong = append(wrong, fmt.Sprintf("%s names %s (run_id %q)", a.sentinel, a.addr, a.run))
		}
	}
	switch {
	case len(wrong) > 0:
		return fmt.Errorf("%w: node %s, server run_id %q: %s", ErrMasterUnconfirmed, n.opts.Name, run, strings.Join(wrong, ", "))
	}
	answered, refused, why := map[string]bool{}, []string(nil), ""
	for _, a := range answers {
		if a.refused != "" {
			refused, why = append(refused, a.sentinel), a.refused
			continue
		}
		answered[a.key] = true
	}
	if 2*len(answered) <= asked {
		if len(refused) > 0 {
			why = fmt.Sprintf(" (%s refused SENTINEL MYID: %s; a sentinel that does not say its ID counts for none)", strings.Join(refused, ", "), why)
		}
		return fmt.Errorf("%w: node %s: %d of %d sentinels answered, not a majority%s", ErrMasterUnconfirmed, n.opts.Name, len(answered), asked, why)
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

// dataClient returns a client of one connection to the data server at
// addr, with the node's credentials and every timeout bound; the caller
// closes it.
func (n *Node) dataClient(addr string, bound time.Duration) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, Username: n.opts.Username, Password: n.opts.Password, TLSConfig: n.opts.TLSConfig,
		Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		DialTimeout: bound, ReadTimeout: bound, WriteTimeout: bound, PoolTimeout: bound,
		ContextTimeoutEnabled: true,
	})
}

// serverRun returns the run_id the server at addr gives in INFO server,
// "" when it does not answer within sentinelBound(ProbeTimeout).
func (n *Node) serverRun(ctx context.Context, addr string) string {
	bound := sentinelBound(n.opts.ProbeTimeout)
	c := n.dataClient(addr, bound)
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
// the group and its last vote (lastVote), each bounded by
// sentinelBound(ProbeTimeout), and returns the answers and how many
// sentinels the group has: those asked (sentinelKeys), or more when one that answered
// knows more (num-other-sentinels + 1, the count its leaders' majority is
// taken of): a majority of answers must meet every majority that can
// elect a leader. A sentinel that does not give both answers has not
// answered.
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
			config, err1 := strconv.ParseInt(m["config-epoch"], 10, 64)
			timeout, err2 := strconv.ParseInt(m["failover-timeout"], 10, 64)
			others, err3 := strconv.Atoi(m["num-other-sentinels"])
			vote, leader, err := lastVote(qctx, c, m["ip"], m["port"])
			if err != nil || err1 != nil || err2 != nil || err3 != nil {
				ch <- nil // a sentinel whose vote is unknown confirms nothing
				return
			}
			who := n.askers.id(a)
			ch <- &masterAnswer{sentinel: a, id: who.id, refused: who.refused, addr: m["ip"] + ":" + m["port"], run: m["runid"], failover: under,
				config: config, vote: vote, leader: leader, group: others + 1, failoverTimeout: time.Duration(timeout) * time.Millisecond}
		}(a)
	}
	var out []masterAnswer
	group := 0
	for range known {
		if a := <-ch; a != nil {
			out = append(out, *a)
			group = max(group, a.group)
		}
	}
	return out, max(group, n.keyAnswers(ctx, known, out))
}

// pendingVotes marks the answers of the round begun at began whose
// sentinel voted for a leader in an epoch newer than its configuration
// of the group (vote > config): it elected a failover whose end it has
// not heard of. Its leader may have promoted a replica already, and says
// so (failover_in_progress, then the new master) only to those it
// reaches: a process that does not reach it hears nothing until the
// leader's announcement gets to the sentinels it does reach. A leader
// needs the votes of a majority of the sentinels, and a round a majority
// of answers, so one of those answering voted for it, and names the old
// master with this vote until the announcement comes. Such a vote counts
// (pending) until electionBound after a round first saw it: by then the
// failover it elected was either announced (config-epoch moves up to the
// vote's) or aborted, and a vote of an election that never ended (no good
// replica, split votes) stops refusing every write; within the bound, a
// round that finds its election over (electionsOver) does not count it,
// and the next round asks again.
// What the bound gives up: a leader that promoted and is still cut off,
// past the bound, from every sentinel this process reaches (its
// announcement never got to them) is the partitioned old master of
// README "Durability of acknowledged writes", not closed.
func (r *confirmRound) pendingVotes(began time.Time) {
	if r.votes == nil {
		r.votes = map[string]seenVote{}
	}
	for i, a := range r.answers {
		if a.vote <= a.config {
			delete(r.votes, a.sentinel)
			continue
		}
		seen, ok := r.votes[a.sentinel]
		if !ok || seen.epoch != a.vote {
			seen = seenVote{epoch: a.vote, since: began}
			r.votes[a.sentinel] = seen
		}
		r.answers[i].pending = began.Sub(seen.since) < electionBound(a.failoverTimeout)
	}
}

// electionsOver ends the pending votes of r's round whose leader, asked
// once every answer of the round was in, has no failover of the group
// under way and a configuration older than the vote, when every other
// sentinel of the group, asked then too, has no failover under way
// either and no configuration newer than the one the voter names, and
// each sees the master up and no replica in the master role. A
// sentinel votes for a leader only when asked by it (or votes for
// itself), and a leader asks only within a failover it started
// (failover_in_progress set, with a new epoch of its own) and clears
// that flag only when the failover is over: aborted (no good replica, the
// election or the promotion timed out), or switched, and then its
// configuration has the failover's epoch (the vote's). So a leader that,
// after the vote was read, has no failover under way and a configuration
// older than the vote never promoted within the voted epoch and never
// will. The vote only shows the voter's last election, though: an
// earlier one it also voted in (epoch e, older than the vote) may have
// promoted a replica whose leader was cut off before its announcement
// got out (crashed right after the promotion, its configuration on
// disk), and the later election, which found no good replica, aborted.
// That leader holds a configuration of epoch e, newer than the voter's,
// from the promotion on (it only ever moves up, across restarts), and
// comes back to announce it: the old master is resynced from the
// promoted replica
// (TestAbortedLaterElectionDoesNotEndAnEarlierOneThatPromoted: without
// the group-wide check, a write confirmed on the old master was gone).
// Hence the whole group must answer idle with no configuration newer
// than the voter's: every sentinel this process knows, each of its
// addresses (a sentinel seeded by host name is learnt again by the IP it
// announces: two addresses, one SENTINEL MYID), and at least as many
// distinct IDs as any sentinel, in the round or then, counts in the
// group (num-other-sentinels + 1; not the addresses this process knows,
// which would count such a sentinel twice and never end a vote:
// TestAbortedElectionStopsRefusingWithSentinelsSeededByHostName). A
// failover that aborted after its REPLICAOF NO ONE went out (the
// promotion timed out: the leader never saw the replica report master)
// announces nothing, but may leave that replica running as a master; the
// sentinels convert it back to a replica of the master, which keeps every
// write, only while the master looks sane to them (no s_down, o_down),
// and while it looks down to them their next election may promote it,
// without the writes the master took since
// (TestAbortedPromotionDoesNotEndItsVoteWhileTheMasterLooksDown: a write
// confirmed on the master in between was gone). So each sentinel must
// also see the master up and list no replica of it reporting the master
// role (SENTINEL REPLICAS, role-reported). That role is only the one the
// replica gave at the sentinel's last INFO (every 10 s while the master
// looks up), and a replica frozen with the command still in its socket
// answers nothing and runs it when it thaws, a master nobody sees that
// the sentinels do not convert back while the master looks down again
// (TestFrozenReplicaOfAnAbortedFailoverDoesNotEndItsVote: a write
// confirmed on the master while p was frozen was gone once p thawed and
// the next election promoted it). So, once the group answered settled
// (the leader's failover over, every command it sent sent), this process
// asks every replica the sentinels list, itself, INFO replication twice
// in a row on one connection, the second once the first is answered
// (replicasFollow): a replica that thawed runs every command waiting
// then in one turn of its event loop, before it reads the second
// question. Both must say role:slave, its link to its master up. Then no election the voter
// took part in promoted unannounced, or left a replica promoted, as far
// as this round sees, and the vote does not count in this round only:
// a REPLICAOF NO ONE still in the network (not in the replica's socket:
// a cut link between the leader and the replica, whose TCP delivers the
// command once the cut heals) when the replica answered lands later, and
// a write confirmed after it is not on the replica, now a master the
// sentinels' next election may promote
// (TestReplicaPromotedByAHeldCommandAfterAnEarlyEndRefusesWrites: with
// the early end kept for good, a write confirmed after the held command
// landed, 7 s into the 22 s bound, was gone). So every round within the
// bound asks the group and the replicas again; and a replica whose link
// to the master is down misses the writes confirmed meanwhile, which the
// command, landing later, leaves off the master it makes
// (TestReplicaCutFromTheMasterDoesNotEndAVote), so each replica must
// also say its link is up. Not seen: a write confirmed in a round
// before the command lands that the replica, its link up, has not
// received when it lands (replication lag), and a command landing past
// the bound, which the bound does not cover either. A replica
// listed that does not answer (down, or not reachable from this
// process) keeps the vote pending until the bound. (A
// leader that switched has the vote's epoch or newer, and may not have
// answered the round: its voters' votes stay pending.) A spurious election that aborted at once
// (a new master seen down for a moment under load) then stops refusing
// writes in the next round, not electionBound later
// (TestAbortedElectionStopsRefusingOnceItsLeaderSaysSo). The leader is
// the sentinel whose SENTINEL MYID is the vote's leader, asked on the
// same connection as its SENTINEL MASTER; a vote whose leader is unknown
// ("*"), a leader or any sentinel of the group that does not answer
// both, stays pending until the bound. A failover is per sentinel and
// not kept across its restart, so a leader that restarted has none under
// way either: the replica it may have promoted is, with no configuration
// announced, converted back by the sentinels once the master looks up to
// them (as above). Asked only when a round has a pending vote.
func (n *Node) electionsOver(ctx context.Context, r *confirmRound) {
	pending := false
	for _, a := range r.answers {
		pending = pending || (a.pending && a.leader != "" && a.leader != "*")
	}
	if !pending {
		return
	}
	g := n.idleSentinels(ctx)
	for _, a := range r.answers {
		g.group = max(g.group, a.group)
	}
	if !g.all || len(g.idle) < g.group {
		return // a sentinel of the group may hold a newer configuration
	}
	if !n.replicasFollow(ctx, g.replicas) {
		return // a replica may hold, or may be about to run, an aborted failover's REPLICAOF NO ONE
	}
	for i, a := range r.answers {
		if config, ok := g.idle[a.leader]; a.pending && ok && config < a.vote && g.newest <= a.config {
			r.answers[i].pending = false // for this round only: the next one asks again
		}
	}
}

// electionBound is how long after its vote an election may still end in
// a promotion the sentinels adopt, for a group whose failover-timeout is
// ft: the leader's election (at most 10 s), then up to ft to send
// REPLICAOF NO ONE and up to ft more to see the replica promoted, or it
// aborts (Redis sentinel.c, sentinelFailoverStateMachine).
func electionBound(ft time.Duration) time.Duration { return 10*time.Second + 2*ft }

// lastVote returns the epoch of the last vote the sentinel c gave for a
// leader of the group whose master it names at host:port (0: none), and
// the leader's ID ("*" when the sentinel no longer says):
// SENTINEL IS-MASTER-DOWN-BY-ADDR with epoch 0, which never wins a vote,
// replies the previous one (Redis sentinel.c, sentinelVoteLeader). The
// sentinel looks the master up by IP: a host name it names the master by
// (announce-hostnames yes) is resolved first. An error when the sentinel
// does not say (it finds no master there: -1).
func lastVote(ctx context.Context, c *redis.SentinelClient, host, port string) (int64, string, error) {
	hosts := []string{host}
	if net.ParseIP(host) == nil {
		ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return 0, "", err
		}
		hosts = hosts[:0]
		for _, ip := range ips {
			hosts = append(hosts, ip.IP.String())
		}
	}
	for _, h := range hosts {
		cmd := redis.NewSliceCmd(ctx, "sentinel", "is-master-down-by-addr", h, port, 0, "shardis-reads-the-last-vote")
		_ = c.Process(ctx, cmd)
		v, err := cmd.Result()
		if err != nil {
			return 0, "", err
		}
		if len(v) != 3 {
			return 0, "", fmt.Errorf("reply %v", v)
		}
		if epoch, ok := v[2].(int64); ok && epoch >= 0 {
			leader, _ := v[1].(string)
			return epoch, leader, nil
		}
	}
	return 0, "", fmt.Errorf("no vote for a master at %s:%s", host, port)
}
