package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// The sentinels' ACL user of SECURITY.md before SENTINEL MYID was added
// to it: SENTINEL GET-MASTER-ADDR-BY-NAME, SENTINELS, MASTER,
// IS-MASTER-DOWN-BY-ADDR (and REPLICAS, which electionsOver asks), no
// SENTINEL MYID. Each sentinel answers MYID with NOPERM, and the node,
// seeded with two of five sentinels by host name, knows seven addresses
// for five sentinels. With three sentinels frozen, the two left answer at
// four of the seven addresses: counted by address (as for a sentinel
// older than 6.2) that is a majority, and a minority confirmed a write.
// A sentinel that refuses to say its ID confirms nothing; the three
// sentinels that answer confirm nothing either until the user is granted
// SENTINEL MYID (a new connection asks it again), then confirm again.
func TestMinorityOfSentinelsRefusingMyIDDoesNotConfirm(t *testing.T) {
	t.Parallel()
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "noperm", Sentinels: 5})
	addrs := g.SentinelAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	aclUser := func(addrs []string, extra ...string) {
		t.Helper()
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2, DisableIdentity: true})
			args := []any{"acl", "setuser", "shardis", "reset", "on", ">secret",
				"+sentinel|get-master-addr-by-name", "+sentinel|sentinels", "+sentinel|master",
				"+sentinel|is-master-down-by-addr", "+sentinel|replicas"}
			for _, e := range extra {
				args = append(args, e)
			}
			err := c.Do(ctx, args...).Err()
			_ = c.Close()
			if err != nil {
				t.Fatalf("ACL SETUSER at %s: %v", a, err)
			}
		}
	}
	aclUser(addrs)
	seeds := hostNameSeeds(addrs, 2)
	n := newNode(t, node.Options{
		Name: "s1",
		Sentinel: &node.SentinelOptions{Master: "noperm", Addrs: seeds,
			Username: "shardis", Password: "secret"},
		ProbeTimeout: 2 * time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	run := masterRun(ctx, t, g)

	sentinels := g.Sentinels()
	t.Cleanup(func() {
		for _, s := range sentinels {
			_ = s.Resume()
		}
	})
	for i := 2; i < 5; i++ {
		if err := sentinels[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	err := n.ConfirmMaster(ctx, run)
	if !errors.Is(err, node.ErrMasterUnconfirmed) {
		t.Fatalf("ConfirmMaster with 2 of 5 sentinels answering (each at two addresses, MYID refused) = %v, want ErrMasterUnconfirmed", err)
	}
	t.Logf("2 of 5, MYID refused: %v", err)

	if err := sentinels[2].Resume(); err != nil {
		t.Fatal(err)
	}
	if err := n.ConfirmMaster(ctx, run); !errors.Is(err, node.ErrMasterUnconfirmed) {
		t.Fatalf("ConfirmMaster with 3 of 5 sentinels answering, MYID refused = %v, want ErrMasterUnconfirmed", err)
	}
	aclUser(addrs[:3], "+sentinel|myid")
	// The kept connections asked MYID when dialled, refused; a sentinel
	// that kills them (CLIENT KILL USER) makes the node dial and ask again.
	for _, a := range addrs[:3] {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2, DisableIdentity: true})
		err := c.Do(ctx, "client", "kill", "user", "shardis").Err()
		_ = c.Close()
		if err != nil {
			t.Fatalf("CLIENT KILL USER at %s: %v", a, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := n.ConfirmMaster(ctx, run)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ConfirmMaster with 3 of 5 sentinels answering, MYID granted: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
