package node_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// dropConns closes every connection of the server's other clients, as a
// restart does: the node's next command dials anew (go-redis drops the
// dead idle connections without a failed command).
func dropConns(t *testing.T, admin *redis.Client) {
	t.Helper()
	if err := admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
}

// dialPaths are the two ways a command connection is dialled: the hooked
// client's dial hook, and the auto-pipeliner's gated dialer.
var dialPaths = []struct {
	name     string
	pipeline *redis.AutoPipelineOptions
}{{"hooked", nil}, {"pipelined", &redis.AutoPipelineOptions{}}}

// usedNode is a node of opts, probed and UP, whose stamp (read and written
// through db, a client of the node's database) is at write 10, which the
// node saw acknowledged: the state of a node in use.
func usedNode(t *testing.T, opts node.Options, db *redis.Client) *node.Node {
	t.Helper()
	return usedNodeCounted(t, opts, db, nil)
}

// usedNodeCounted is usedNode with its node failures counted in failures
// (nil: not counted).
func usedNodeCounted(t *testing.T, opts node.Options, db *redis.Client, failures *atomic.Int32) *node.Node {
	t.Helper()
	ctx := context.Background()
	n := newNode(t, opts, failures)
	if err := n.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	n.SetUp()
	if err := db.HSet(ctx, node.StampKey, "seq", 10).Err(); err != nil {
		t.Fatal(err)
	}
	n.ObserveSeq(10)
	return n
}

// A command connection dialled to a node whose data must be kept reads the
// stamp first, on that connection (dialcheck.go): a stamp behind what this
// process saw acknowledged, or a missing one, fails the dial and the
// command is never sent; a stamp at or after it, or of a later generation
// (accepted since), lets it through. Both dial paths (the hooked client's
// dial hook, and the auto-pipeliner's gated dialer), with AUTH and SELECT
// on the raw connection.
func TestNewConnectionReadsStampFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range dialPaths {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := redistest.Start(t, redistest.Options{Password: "pw"})
			admin := s.Client(t)
			opts := node.Options{Name: "n1", Addr: s.Addr(), Password: "pw", DB: 3, Critical: true, BreakerFailures: 1000,
				Pipeline: tc.pipeline, PipelineFrom: 1}
			db3 := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: "pw", DB: 3})
			t.Cleanup(func() { _ = db3.Close() })
			n := usedNode(t, opts, db3)
			set := func(v string) error { return n.Client().Set(ctx, "k", v, 0).Err() }
			if err := set("before"); err != nil {
				t.Fatalf("SET on a current node: %v", err)
			}

			// Rolled back: the stamp's sequence is behind what was acknowledged.
			if err := db3.HSet(ctx, node.StampKey, "seq", 4).Err(); err != nil {
				t.Fatal(err)
			}
			dropConns(t, admin)
			if err := set("rolled back"); !errors.Is(err, node.ErrRolledBack) {
				t.Fatalf("SET on a new connection to a rolled-back node: %v, want ErrRolledBack", err)
			}
			if v, _ := db3.Get(ctx, "k").Result(); v != "before" {
				t.Fatalf("k = %q after the refused SET, want %q: the command was sent", v, "before")
			}

			// Missing stamp: the node restarted empty.
			if err := db3.Del(ctx, node.StampKey).Err(); err != nil {
				t.Fatal(err)
			}
			dropConns(t, admin)
			if err := set("empty"); !errors.Is(err, node.ErrDataLost) {
				t.Fatalf("SET on a new connection to a node without its stamp: %v, want ErrDataLost", err)
			}

			// Accepted since (a later generation), then current again: used.
			m, _ := n.Mark()
			if err := db3.HSet(ctx, node.StampKey, "name", "n1", "incarnation", "other", "seq", 1, "gen", m.Gen+1).Err(); err != nil {
				t.Fatal(err)
			}
			dropConns(t, admin)
			if err := set("accepted"); err != nil {
				t.Fatalf("SET on a node accepted since: %v", err)
			}
			if v, _ := db3.Get(ctx, "k").Result(); v != "accepted" {
				t.Fatalf("k = %q, want %q", v, "accepted")
			}
		})
	}
}

// A node whose data need not be kept (a cache) is not checked: its new
// connections serve whatever the server holds.
func TestNewConnectionOfCacheNodeIsNotChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	admin := s.Client(t)
	n := newNode(t, node.Options{Name: "c1", Addr: s.Addr()}, nil)
	if err := n.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	n.SetUp()
	n.ObserveSeq(10)
	if err := admin.Del(ctx, node.StampKey).Err(); err != nil {
		t.Fatal(err)
	}
	dropConns(t, admin)
	if err := n.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET on a cache node's new connection: %v", err)
	}
}

// laterWrite is a Witnesses whose read of the peers' marks finds a write
// acknowledged since the reader began: it advances the node's write
// sequence (as another connection's or another process's write would)
// and answers that write's mark, as the peers would hold it once the
// writer's marks reached them. It holds nothing (no peers to hold marks).
type laterWrite struct {
	db    *redis.Client
	reads atomic.Int32
}

func (w *laterWrite) Hold(context.Context, string, node.Mark) error { return nil }

func (w *laterWrite) Witnessed(ctx context.Context, _ string) (node.Mark, bool) {
	w.reads.Add(1)
	seq, err := w.db.HIncrBy(ctx, node.StampKey, "seq", 1).Result()
	if err != nil {
		return node.Mark{}, false
	}
	v, err := w.db.HMGet(ctx, node.StampKey, "incarnation", "gen").Result()
	if err != nil {
		return node.Mark{}, false
	}
	inc, _ := v[0].(string)
	gen, _ := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	return node.Mark{Gen: gen, Incarnation: inc, Seq: seq}, true
}

// The dial check reads the peers' marks before the stamp: a mark read
// after the stamp may be of a write acknowledged in between, and a
// current node would look rolled back (its stamp behind a mark it had
// reached by then). Seen under load in TestTopologyRollingChange: "its
// write sequence is 591, other nodes witnessed up to 592".
func TestDialCheckReadsMarksBeforeStamp(t *testing.T) {
	t.Parallel()
	for _, tc := range dialPaths {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := redistest.Start(t, redistest.Options{})
			admin := s.Client(t)
			w := &laterWrite{db: admin}
			n := usedNode(t, node.Options{Name: "n1", Addr: s.Addr(), Critical: true, BreakerFailures: 1000,
				Pipeline: tc.pipeline, PipelineFrom: 1, Witnesses: w}, admin)
			dropConns(t, admin)
			if err := n.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatalf("SET on a new connection to a current node: %v", err)
			}
			if w.reads.Load() == 0 {
				t.Fatal("the dial check did not read the peers' marks")
			}
		})
	}
}
