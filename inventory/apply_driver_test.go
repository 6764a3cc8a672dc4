package inventory

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// TestMigratorKeepsDriverContract: the inventory's topology.Driver keeps,
// on a real node, the contract topology.Apply relies on (and that
// topology's own tests give their in-memory driver): a record is written
// only by compare-and-set on the node's token; writing the token the node
// has moves its phase to stable and never back, keeping the rest; Read
// returns what was written, and a record lost under its stamp as Lost.
// The instance is opened without initialising a record (as the apply's
// own is), so the node starts with none.
func TestMigratorKeepsDriverContract(t *testing.T) {
	srv := redistest.StartN(t, 1, redistest.Options{})[0]
	cfg := leaveConfig(t, map[string]string{"n1": srv.Addr()}, map[string][]string{"r": {"n1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var d topology.Driver = testMigrator(t, ctx, cfg)

	t1 := topology.Of(cfg)
	t2 := t1
	t2.Routes = map[string][]router.Member{"r": {{Name: "n1", Weight: 2}}}
	tok1, tok2 := topology.Token(1, t1.Fingerprint()), topology.Token(2, t2.Fingerprint())
	read := func(what string) topology.Record {
		t.Helper()
		rec, err := d.Read(ctx, "n1")
		if err != nil {
			t.Fatalf("%s: Read: %v", what, err)
		}
		return rec
	}
	if rec := read("fresh node"); rec.Epoch != 0 || rec.Token != "" || rec.Lost {
		t.Fatalf("fresh node: %+v, want no record", rec)
	}
	if err := d.Write(ctx, "n1", "", topology.Record{Epoch: 1, Token: tok1, Current: t1, Phase: topology.PhaseStable}); err != nil {
		t.Fatal(err)
	}
	if rec := read("epoch 1"); rec.Epoch != 1 || rec.Token != tok1 || rec.Current.Fingerprint() != t1.Fingerprint() ||
		rec.Prev != nil || rec.Phase != topology.PhaseStable || rec.Node != "n1" {
		t.Fatalf("epoch 1: %+v", rec)
	}
	// Compare-and-set: a write expecting another token changes nothing.
	err := d.Write(ctx, "n1", "", topology.Record{Epoch: 2, Token: tok2, Current: t2, Prev: &t1, Phase: topology.PhaseMigrating})
	if !errors.Is(err, ErrTopology) {
		t.Fatalf("write expecting no record on a node at %s = %v, want ErrTopology", tok1, err)
	}
	if rec := read("after a refused write"); rec.Token != tok1 || rec.Phase != topology.PhaseStable {
		t.Fatalf("refused write changed the node: %+v", rec)
	}
	if err := d.Write(ctx, "n1", tok1, topology.Record{Epoch: 2, Token: tok2, Current: t2, Prev: &t1, Phase: topology.PhaseMigrating, Attempt: "a1"}); err != nil {
		t.Fatal(err)
	}
	if rec := read("bumped"); rec.Epoch != 2 || rec.Token != tok2 || rec.Phase != topology.PhaseMigrating ||
		rec.Prev == nil || rec.Prev.Fingerprint() != t1.Fingerprint() || rec.Attempt != "a1" {
		t.Fatalf("bumped: %+v", rec)
	}
	// The node's own token: stable, keeping the record; never back.
	if err := d.Write(ctx, "n1", tok2, topology.Record{Epoch: 2, Token: tok2, Current: t2, Phase: topology.PhaseStable}); err != nil {
		t.Fatal(err)
	}
	if err := d.Write(ctx, "n1", tok2, topology.Record{Epoch: 2, Token: tok2, Current: t2, Phase: topology.PhaseMigrating}); err != nil {
		t.Fatal(err)
	}
	if rec := read("stable"); rec.Phase != topology.PhaseStable || rec.Prev == nil || rec.Token != tok2 || rec.Attempt != "a1" {
		t.Fatalf("stable: %+v, want phase stable with the previous topology and the attempt kept", rec)
	}
	// Another attempt at the node's token is refused.
	if err := d.Write(ctx, "n1", tok1, topology.Record{Epoch: 2, Token: tok2, Current: t2, Prev: &t1, Phase: topology.PhaseMigrating, Attempt: "a2"}); !errors.Is(err, ErrTopology) {
		t.Fatalf("write of attempt a2 at the token of a1 = %v, want ErrTopology", err)
	}
	if rec := read("after another attempt"); rec.Attempt != "a1" {
		t.Fatalf("another attempt's write changed the record: %+v", rec)
	}
	// A record without an attempt (a release before's) is given the one
	// a write at its token names.
	if err := srv.Client(t).HDel(ctx, keyTopology, "attempt").Err(); err != nil {
		t.Fatal(err)
	}
	if err := d.Write(ctx, "n1", tok2, topology.Record{Epoch: 2, Token: tok2, Current: t2, Phase: topology.PhaseStable, Attempt: "a3"}); err != nil {
		t.Fatal(err)
	}
	if rec := read("given an attempt"); rec.Attempt != "a3" || rec.Prev == nil {
		t.Fatalf("a record without an attempt, written at its token: %+v, want attempt a3, the rest kept", rec)
	}
	c := srv.Client(t)
	if err := c.Del(ctx, keyTopology).Err(); err != nil {
		t.Fatal(err)
	}
	if rec := read("record deleted"); !rec.Lost || rec.Token != tok2 {
		t.Fatalf("record deleted under its stamp: %+v, want Lost at %s", rec, tok2)
	}
	if err := c.ZAdd(ctx, PendingKey, redis.Z{Score: 1, Member: "a"}, redis.Z{Score: 2, Member: "b"}).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Pending(ctx, "n1"); err != nil || n != 2 {
		t.Fatalf("Pending = %d, %v; want 2", n, err)
	}
	if _, err := d.Read(ctx, "n9"); err == nil {
		t.Fatal("Read of a node the configuration lacks succeeded")
	}
}

// testMigrator opens the topology.Driver an apply at cfg drives: its
// instance does not initialise a topology record (as the apply's own
// does not). Its router is closed when t ends.
func testMigrator(t *testing.T, ctx context.Context, cfg *config.Config) *migrator {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	inv, err := newInventory(r, Options{Logger: log}, true)
	if err != nil {
		t.Fatal(err)
	}
	return &migrator{inv: inv, r: r, log: log}
}
