package node_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// An election that aborted while the master lived on: the master and its
// only replica freeze for longer than down-after, the sentinels elect a
// leader, find no good replica (it is down too) and abort; then both
// come back. Every sentinel that voted now has a vote newer than the
// configuration it names, and with failover-timeout 20 s pendingVotes
// alone would refuse every confirmation for electionBound, 50 s. The
// leader, asked after the votes were read, has no failover under way and
// a configuration older than its election (electionsOver), so
// ConfirmMaster confirms the master again within seconds: a spurious
// election (a CI run saw one right after a failover, when the leader saw
// the new master down for a moment) no longer refuses every write for the
// bound.
func TestAbortedElectionStopsRefusingOnceItsLeaderSaysSo(t *testing.T) {
	t.Parallel()
	abortedElectionConfirms(t, "aborted", func(addrs []string) []string { return addrs })
}

// The same spurious election, with the node seeded by host name
// (localhost:PORT) while the sentinels announce their IP: the node then
// knows each sentinel at two addresses, its seed and the 127.0.0.1:PORT
// the others name it by. The whole group still answers idle, each
// sentinel under both of its addresses, with three distinct IDs: the
// vote ends within seconds (it stayed pending for the bound when the
// group had to give as many IDs as the node knows addresses, six).
func TestAbortedElectionStopsRefusingWithSentinelsSeededByHostName(t *testing.T) {
	t.Parallel()
	abortedElectionConfirms(t, "byname", func(addrs []string) []string {
		named := make([]string, 0, len(addrs))
		for _, a := range addrs {
			_, port, _ := net.SplitHostPort(a)
			named = append(named, net.JoinHostPort("localhost", port))
		}
		return named
	})
}

// abortedElectionConfirms runs the spurious election of
// TestAbortedElectionStopsRefusingOnceItsLeaderSaysSo on a group named
// name, the node seeded with seeds(the sentinels' addresses).
func abortedElectionConfirms(t *testing.T, name string, seeds func([]string) []string) {
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: name, FailoverTimeout: 20 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n := newNode(t, node.Options{
		Name:         "s1",
		Sentinel:     &node.SentinelOptions{Master: name, Addrs: seeds(g.SentinelAddrs())},
		ProbeTimeout: 2 * time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	master := g.Master()
	info, err := g.Client(t, master).Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	run := node.InfoRunID(info)
	if err := n.ConfirmMaster(ctx, run); err != nil {
		t.Fatalf("ConfirmMaster before any election: %v", err)
	}

	sentinels := make([]*redis.SentinelClient, 0, 3)
	for _, a := range g.SentinelAddrs() {
		c := redis.NewSentinelClient(&redis.Options{Addr: a, Protocol: 2, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		sentinels = append(sentinels, c)
	}
	host, port, _ := strings.Cut(master, ":")
	// voted counts the sentinels whose last vote is newer than their
	// configuration, and those with a failover under way.
	voted := func() (newer, under int) {
		for _, c := range sentinels {
			m, err := c.Master(ctx, name).Result()
			if err != nil {
				continue
			}
			if strings.Contains(m["flags"], "failover_in_progress") {
				under++
			}
			config, _ := strconv.ParseInt(m["config-epoch"], 10, 64)
			cmd := redis.NewSliceCmd(ctx, "sentinel", "is-master-down-by-addr", host, port, 0, "test-reads-the-last-vote")
			_ = c.Process(ctx, cmd)
			v, err := cmd.Result()
			if err != nil || len(v) != 3 {
				continue
			}
			if epoch, _ := v[2].(int64); epoch > config {
				newer++
			}
		}
		return newer, under
	}

	// the replica first, until every sentinel sees it down, so the
	// election finds no good replica at once (a replica still up would be
	// picked and sent REPLICAOF NO ONE, which it runs when it thaws)
	primary, replica := g.Data()[0], g.Data()[1]
	if primary.Addr() != master {
		primary, replica = replica, primary
	}
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "every sentinel sees the replica down", func() bool {
		for _, c := range sentinels {
			reps, err := c.Replicas(ctx, name).Result()
			if err != nil || len(reps) == 0 {
				return false
			}
			for _, r := range reps {
				if r["ip"]+":"+r["port"] == replica.Addr() && !strings.Contains(r["flags"], "s_down") {
					return false
				}
			}
		}
		return true
	})
	if err := primary.Pause(); err != nil {
		t.Fatal(err)
	}
	// the votes are seen in one pass, the election over in a later one: a
	// leader shows its failover under way from before it asks for votes
	// until it aborts, so a pass begun after the votes were seen that
	// finds no failover under way finds it aborted (a single pass may read
	// the leader before it started and its voters after they voted)
	deadline := time.Now().Add(30 * time.Second)
	votesSeen := false
	for {
		newer, under := voted()
		if votesSeen && newer >= 2 && under == 0 {
			break
		}
		votesSeen = newer >= 2
		if time.Now().After(deadline) {
			t.Fatalf("no aborted election 30s after the group froze: %d sentinels voted newer than their configuration, %d have a failover under way", newer, under)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range g.Data() {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if g.Master() != master {
		t.Fatalf("the sentinels name %s, not the master %s that lived on", g.Master(), master)
	}
	aborted := time.Now()
	for {
		err := n.ConfirmMaster(ctx, run)
		if err == nil {
			break
		}
		if time.Since(aborted) > 10*time.Second {
			t.Fatalf("ConfirmMaster still refuses 10s after the election aborted (the bound alone would refuse for 50s): %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("confirmed %v after the aborted election", time.Since(aborted).Round(time.Millisecond))
	if newer, _ := voted(); newer < 2 {
		t.Errorf("%d sentinels still have a vote newer than their configuration, want 2 or more: the election did not stay unfinished", newer)
	}
}
