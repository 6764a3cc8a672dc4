package node_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// hiddenGroup is the group of TestAbortedLaterElectionDoesNotEndAnEarlierOneThatPromoted:
// its data servers (master, the replica a failover promotes, and a
// replica with replica-priority 0) and a client per sentinel.
type hiddenGroup struct {
	g          *redistest.Group
	m, p, r    *redisproc.Server
	sentinels  []*redis.SentinelClient
	host, port string
}

// vote returns the config-epoch, the last vote's epoch and whether a
// failover is under way at sentinel i; ok false when it does not answer.
func (h *hiddenGroup) vote(ctx context.Context, i int) (config, vote int64, under, ok bool) {
	m, err := h.sentinels[i].Master(ctx, h.g.Name()).Result()
	if err != nil {
		return 0, 0, false, false
	}
	config, _ = strconv.ParseInt(m["config-epoch"], 10, 64)
	cmd := redis.NewSliceCmd(ctx, "sentinel", "is-master-down-by-addr", h.host, h.port, 0, "test-reads-the-last-vote")
	_ = h.sentinels[i].Process(ctx, cmd)
	v, err := cmd.Result()
	if err != nil || len(v) != 3 {
		return 0, 0, false, false
	}
	vote, _ = v[2].(int64)
	return config, vote, strings.Contains(m["flags"], "failover_in_progress"), true
}

// waitFor polls ok every 50ms up to limit, and fails the test with what
// when it is not met by then.
func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// watch returns a node on the group, a client of its master and the
// master's run_id, once the node's first probe passed.
func (h *hiddenGroup) watch(t *testing.T, ctx context.Context) (*node.Node, *redis.Client, string) {
	t.Helper()
	n := newNode(t, node.Options{
		Name:         "s1",
		Sentinel:     &node.SentinelOptions{Master: h.g.Name(), Addrs: h.g.SentinelAddrs()},
		ProbeTimeout: 2 * time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	mc := h.g.Client(t, h.m.Addr())
	info, err := mc.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n, mc, node.InfoRunID(info)
}

// confirmWrite writes the key "reservation" on the master through mc,
// waits for a replica, and asks n to confirm it ran on run, every 200ms
// for up to limit until it does: whether it did, and the last refusal.
func confirmWrite(ctx context.Context, n *node.Node, mc *redis.Client, run string, limit time.Duration) (bool, error) {
	var refused error
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if mc.Set(ctx, "reservation", "acked", 0).Err() != nil {
			continue
		}
		if w, err := mc.Wait(ctx, 1, time.Second).Result(); err != nil || w < 1 {
			continue
		}
		if refused = n.ConfirmMaster(ctx, run); refused == nil {
			return true, nil
		}
	}
	return false, refused
}

// setPing lets the master answer PING (on) or refuses it (off), so the
// sentinels see it up or down while it takes writes.
func setPing(t *testing.T, ctx context.Context, mc *redis.Client, on bool) {
	t.Helper()
	rule := "-ping"
	if on {
		rule = "+ping"
	}
	if err := mc.Do(ctx, "acl", "setuser", "default", rule).Err(); err != nil {
		t.Fatal(err)
	}
}

// abortWithPFrozen makes the master look down (setPing off), waits until
// a leader started a failover, freezes p (its REPLICAOF NO ONE, if sent,
// waits in its socket) and waits until the failover aborted: every
// sentinel idle, one with a vote newer than its configuration. p stays
// frozen (a t.Cleanup resumes it).
func (h *hiddenGroup) abortWithPFrozen(t *testing.T, ctx context.Context, mc *redis.Client) {
	t.Helper()
	setPing(t, ctx, mc, false)
	waitFor(t, 30*time.Second, "a leader started a failover", func() bool {
		for i := range h.sentinels {
			if _, _, under, ok := h.vote(ctx, i); ok && under {
				return true
			}
		}
		return false
	})
	h.p.Pause()
	t.Cleanup(func() { _ = h.p.Resume() })
	h.waitAborted(t, ctx)
}

// waitAborted waits, once a failover was seen under way, until it
// aborted: every sentinel idle, one with a vote newer than its
// configuration.
func (h *hiddenGroup) waitAborted(t *testing.T, ctx context.Context) {
	t.Helper()
	waitFor(t, 30*time.Second, "the failover aborted", func() bool {
		aborted := false
		for i := range h.sentinels {
			config, vote, under, ok := h.vote(ctx, i)
			if !ok || under {
				return false
			}
			aborted = aborted || vote > config
		}
		return aborted
	})
}

// waitPromotedAndResynced waits until a majority of the sentinels name p
// (at port) as the master, lets the old master answer PING again, and
// waits until it resynced from p (waitResyncedFrom).
func (h *hiddenGroup) waitPromotedAndResynced(t *testing.T, ctx context.Context, mc *redis.Client, port int) {
	t.Helper()
	waitFor(t, 60*time.Second, "a later election promoted p", func() bool {
		named := 0
		for _, c := range h.sentinels {
			if v, err := c.GetMasterAddrByName(ctx, h.g.Name()).Result(); err == nil && len(v) == 2 && v[1] == strconv.Itoa(port) {
				named++
			}
		}
		return named >= 2
	})
	setPing(t, ctx, mc, true)
	waitResyncedFrom(t, ctx, mc, port, "the old master resynced from p")
}

// waitResyncedFrom waits until the old master (mc) is a replica of the
// master at port with its link up.
func waitResyncedFrom(t *testing.T, ctx context.Context, mc *redis.Client, port int, what string) {
	t.Helper()
	waitFor(t, 60*time.Second, what, func() bool {
		role, err := mc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(role, "role:slave") &&
			strings.Contains(role, "master_port:"+strconv.Itoa(port)) && strings.Contains(role, "master_link_status:up")
	})
}

// startHiddenGroup starts the group with r at replica-priority 0 (known
// to every sentinel) and every sentinel set to crash right after the
// replica it promotes reports master.
func startHiddenGroup(t *testing.T, ctx context.Context) *hiddenGroup {
	h := startPriorityGroup(t, ctx, redistest.GroupOptions{Name: "hidden", Replicas: 2})
	for _, c := range h.sentinels {
		if err := c.Process(ctx, redis.NewStatusCmd(ctx, "sentinel", "simulate-failure", "crash-after-promotion")); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// startPriorityGroup starts the group opts (two replicas) with r at
// replica-priority 0, known to every sentinel: a failover can only
// promote p.
func startPriorityGroup(t *testing.T, ctx context.Context, opts redistest.GroupOptions) *hiddenGroup {
	g := redistest.StartGroup(t, opts)
	h := &hiddenGroup{g: g, m: g.Data()[0], p: g.Data()[1], r: g.Data()[2]}
	if g.Master() != h.m.Addr() {
		t.Fatalf("the sentinels name %s, not %s", g.Master(), h.m.Addr())
	}
	h.host, h.port, _ = strings.Cut(h.m.Addr(), ":")
	if err := g.Client(t, h.r.Addr()).ConfigSet(ctx, "replica-priority", "0").Err(); err != nil {
		t.Fatal(err)
	}
	for _, a := range g.SentinelAddrs() {
		c := redis.NewSentinelClient(&redis.Options{Addr: a, Protocol: 2, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		h.sentinels = append(h.sentinels, c)
	}
	waitFor(t, 20*time.Second, "every sentinel sees the replica-priority 0", func() bool {
		for _, c := range h.sentinels {
			reps, err := c.Replicas(ctx, g.Name()).Result()
			if err != nil {
				return false
			}
			for _, rep := range reps {
				if rep["ip"]+":"+rep["port"] == h.r.Addr() && rep["slave-priority"] != "0" {
					return false
				}
			}
		}
		return true
	})
	return h
}

// promoteThenCrash freezes the master until a leader promotes p and
// crashes (its configuration, p at the failover's epoch, is on disk),
// freezes p, and waits until the other sentinels ran a later election
// that aborted (no good replica: p is down, r has priority 0). It
// returns the leader's index; the master and p stay frozen.
func (h *hiddenGroup) promoteThenCrash(t *testing.T, ctx context.Context) int {
	h.m.Pause()
	leader := -1
	waitFor(t, 30*time.Second, "a leader promoted the replica and crashed", func() bool {
		for i, s := range h.g.Sentinels() {
			if !s.Running() {
				leader = i
			}
		}
		return leader >= 0
	})
	h.p.Pause()
	first := int64(-1)
	for i := range h.sentinels {
		if i != leader {
			_ = h.sentinels[i].Process(ctx, redis.NewStatusCmd(ctx, "sentinel", "simulate-failure", "none"))
			if _, vote, _, ok := h.vote(ctx, i); ok && (first < 0 || vote < first) {
				first = vote
			}
		}
	}
	waitFor(t, 30*time.Second, "a later election among the others aborted", func() bool {
		later := 0
		for i := range h.sentinels {
			if config, vote, under, ok := h.vote(ctx, i); i != leader && ok && !under && vote > first && vote > config {
				later++
			}
		}
		return later == len(h.sentinels)-1
	})
	return leader
}

// A leader elected in epoch e promotes the replica p and is cut off
// before its announcement reaches anyone (here it crashes right after
// p reported master; its configuration, p in epoch e, is on its disk).
// The other sentinels, which voted for it and still name the old master,
// then elect one of themselves in e' > e, which finds no good replica
// and aborts. Each voter's last vote is now e', led by a sentinel with
// no failover under way and a configuration older than e': the election
// e' is over, but e, hidden behind it, promoted. A write on the old
// master confirmed then is lost when the leader of e comes back and
// announces p: the old master is resynced from p. ConfirmMaster must not
// end the vote on the word of its own leader alone while a sentinel of
// the group has not said it holds no newer configuration.
func TestAbortedLaterElectionDoesNotEndAnEarlierOneThatPromoted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	h := startHiddenGroup(t, ctx)
	n, mc, run := h.watch(t, ctx)

	leader := h.promoteThenCrash(t, ctx)
	h.m.Resume()
	acked, refused := confirmWrite(ctx, n, mc, run, 8*time.Second)
	h.p.Resume()
	if err := h.g.Sentinels()[leader].Restart(); err != nil {
		t.Fatal(err)
	}
	if !acked {
		t.Logf("ConfirmMaster refused the write on the old master while the promoting leader was away: %v", refused)
		return
	}
	waitResyncedFrom(t, ctx, mc, h.p.Port(), "the old master resynced from the replica the crashed leader promoted")
	if v, err := h.g.Client(t, h.p.Addr()).Get(ctx, "reservation").Result(); err != nil || v != "acked" {
		t.Fatalf("a write ConfirmMaster acknowledged on the old master %s is gone from the master %s the crashed leader promoted (GET: %q, %v)",
			h.m.Addr(), h.p.Addr(), v, err)
	}
}
