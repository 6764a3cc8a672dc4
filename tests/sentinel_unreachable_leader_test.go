package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
)

// A failover led by a sentinel this process cannot reach, elected by the
// others. Three sentinels: l (the leader), s2 and s3. This process reaches
// s2 and s3 only (l knows no user of its), a majority. l loses the old
// master (an ACL: a partition between the two), sees it down alone
// (its quorum 1), is elected by s2 and s3 (a vote needs no view of the
// master) and promotes r1. Its announcements do not reach s2 and s3 yet
// (they are refused PUBLISH: a partition that came after the vote, or
// simply the second or so a leader takes to see its replica promoted and
// say so), and r2 cannot be reconfigured yet. s2 and s3 then name the old
// master, with no failover under way at them: they only voted. A Reserve
// runs on the old master, r2 (still its replica) answers its WAIT, and
// ConfirmMaster's round, answered by s2 and s3, confirms the old master.
// Then the announcements get through: r2 resyncs from r1, the old master
// is converted, and the reservation is gone (its unit sold again). The
// rule (node/sentinel_confirm.go): a sentinel that voted in an election
// newer than the configuration it names (its last vote's epoch, read with
// SENTINEL IS-MASTER-DOWN-BY-ADDR at epoch 0, above the master's
// config-epoch) confirms nothing while that election may still promote.
func TestFailoverLedByAnUnreachableSentinelDoesNotAcknowledgeOnTheOldMaster(t *testing.T) {
	t.Parallel()
	const (
		pw       = "grouppw"
		leaderPw = "leaderpw"
		ownPw    = "shardispw"
	)
	// s2 and s3 never see the master down themselves
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "far-leader", Password: pw, Replicas: 2,
		DownAfter: 60 * time.Second, FailoverTimeout: 20 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	old, r1, r2 := masterAndReplicas(g)
	oc, c1, c2 := g.Client(t, old), g.Client(t, r1), g.Client(t, r2)
	addrs := g.SentinelAddrs()
	sentinel := func(a string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	l, s2, s3 := sentinel(addrs[0]), sentinel(addrs[1]), sentinel(addrs[2])
	do := func(c *redis.Client, args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v at %s: %v", args, c.Options().Addr, err)
		}
	}
	names := func(c *redis.Client) string {
		v, err := c.Do(ctx, "sentinel", "get-master-addr-by-name", g.Name()).StringSlice()
		if err != nil || len(v) != 2 {
			return ""
		}
		return v[0] + ":" + v[1]
	}

	// r2 is never the one promoted (the leader must know it first)
	do(c2, "config", "set", "replica-priority", "0")
	waitFor(t, 30*time.Second, "the leader sees r2's priority 0", func() bool {
		rs, err := l.Do(ctx, "sentinel", "replicas", g.Name()).Slice()
		if err != nil {
			return false
		}
		for _, r := range rs {
			m := flatReply(r)
			if m["ip"]+":"+m["port"] == r2 {
				return m["slave-priority"] == "0"
			}
		}
		return false
	})
	// the leader talks to the data servers as its own user, which may not
	// announce (PUBLISH) and may not reconfigure r2
	for _, s := range g.Data() {
		c := g.Client(t, s.Addr())
		do(c, "acl", "setuser", "leader", "on", ">"+leaderPw, "~*", "&*", "+@all", "-publish")
	}
	do(c2, "acl", "setuser", "leader", "-slaveof", "-replicaof")
	// s2 and s3 cannot turn r1 back into a replica while they do not know
	// of the switch (they would after seeing it a master for 8 s)
	do(c1, "acl", "setuser", "default", "-slaveof", "-replicaof")
	do(l, "sentinel", "set", g.Name(), "auth-user", "leader", "auth-pass", leaderPw,
		"quorum", "1", "down-after-milliseconds", "1000")
	lid, err := l.Do(ctx, "sentinel", "myid").Text()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range g.Data() {
		c := g.Client(t, s.Addr())
		waitFor(t, 30*time.Second, "the leader's links to "+s.Addr()+" as its user", func() bool {
			list, err := c.ClientList(ctx).Result()
			if err != nil {
				return false
			}
			mine := 0
			for _, line := range strings.Split(list, "\n") {
				if !strings.Contains(line, "name=sentinel-"+lid[:8]) {
					continue
				}
				if strings.Contains(line, " user=leader ") {
					mine++
					continue
				}
				if id := field(line, "id"); id != "" {
					_ = c.Do(ctx, "client", "kill", "id", id).Err()
				}
			}
			return mine >= 2
		})
	}
	// this process has a user at s2 and s3 only; s2 and s3 take no
	// announcement from the leader
	for _, s := range []*redis.Client{s2, s3} {
		do(s, "acl", "setuser", "shardis", "on", ">"+ownPw, "~*", "&*", "+@all")
		do(s, "acl", "setuser", "default", "-publish")
	}

	cfg := durableSentinelConfig(g, pw)
	n := cfg.Nodes["n1"]
	n.Sentinel.Username, n.Sentinel.Password = "shardis", ownPw
	cfg.Nodes["n1"] = n
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	inv, n1 := durableOrderA(ctx, t, &cfg)

	// the leader loses the old master; s2 and s3 still reach it
	do(oc, "acl", "setuser", "leader", "off")
	do(oc, "client", "kill", "user", "leader")
	waitFor(t, 60*time.Second, "the leader has promoted r1 and names it", func() bool { return names(l) == r1 })
	if role, err := c1.Do(ctx, "role").Slice(); err != nil || len(role) == 0 || role[0] != "master" {
		t.Fatalf("r1's role: %v %v, want master", role, err)
	}
	for _, s := range []*redis.Client{s2, s3} {
		if m := names(s); m != old {
			t.Fatalf("%s names %s, want the old master %s (it must not have heard of the switch yet)", s.Options().Addr, m, old)
		}
	}
	if info, err := oc.Info(ctx, "replication").Result(); err != nil || !strings.Contains(info, "connected_slaves:1") ||
		!strings.Contains(info, "role:master") {
		t.Fatalf("the old master before the Reserve: %q %v, want a master with r2 alone", info, err)
	}
	waitFor(t, 10*time.Second, "n1 usable at the old master", func() bool { return n1.Usable() && n1.MasterAddr() == old })

	_, xerr := inv.Reserve(ctx, "x", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 1}}, "", 0)
	t.Logf("Reserve x on the old master, r1 promoted by an unreachable leader, r2 still its replica: %v", xerr)
	acked, _ := oc.HGetAll(ctx, "inv:stock:r:tee").Result()
	for _, s := range []*redis.Client{s2, s3} {
		if m := names(s); m != old {
			t.Fatalf("%s names %s after the Reserve, want the old master %s (the leader's announcements must not get "+
				"through before the partition heals)", s.Options().Addr, m, old)
		}
	}

	// the partition heals: the leader's announcements get through
	for _, s := range []*redis.Client{s2, s3} {
		do(s, "acl", "setuser", "default", "+publish")
	}
	do(c1, "acl", "setuser", "default", "+slaveof", "+replicaof")
	do(c2, "acl", "setuser", "leader", "+slaveof", "+replicaof")
	for _, s := range g.Data() {
		do(g.Client(t, s.Addr()), "acl", "setuser", "leader", "on", "+publish")
	}
	waitFor(t, 60*time.Second, "s2 and s3 name r1", func() bool { return names(s2) == r1 && names(s3) == r1 })
	inSyncWith(ctx, t, c2, r1, 90*time.Second)
	newMasterHolds(ctx, t, c1, acked, xerr, "(WAIT answered by r2, s2 and s3 naming the old master) but the group's "+
		"new master, promoted by a leader this process could not reach,")
}

// flatReply turns a RESP2 array of field, value pairs into a map.
func flatReply(v any) map[string]string {
	m := map[string]string{}
	a, _ := v.([]any)
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		s, _ := a[i+1].(string)
		m[k] = s
	}
	return m
}

// field returns the value of name in a CLIENT LIST line.
func field(line, name string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}
