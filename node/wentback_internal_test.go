package node

import (
	"context"
	"errors"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
)

// A went_back write computed from a stamp read before an accept (the
// probe's refusal racing `shardis node accept`) is dropped by the
// conditional script, for a node that went back and for one found empty:
// the accept is never undone.
func TestStaleWentBackWriteDoesNotUndoAnAccept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	n, err := New(Options{Name: "n1", Addr: srv.Addr(), Critical: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	if err := n.Probe(ctx); err != nil {
		t.Fatalf("first probe: %v", err)
	}
	read, _ := n.Mark()
	if _, err := n.Accept(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	n.recordWentBack(ctx, n.probeClient(), read, n.rolledBack(errors.New("stale")))
	direct := srv.Client(t)
	if v := direct.HGet(ctx, StampKey, wentBackField).Val(); v != "" {
		t.Fatalf("went_back written over an accept: %q", v)
	}
	if err := n.Probe(ctx); err != nil {
		t.Fatalf("probe after the accept: %v", err)
	}
	// found empty, then accepted before the record is written
	if err := direct.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := n.Probe(ctx); !errors.Is(err, ErrDataLost) {
		t.Fatalf("probe of the emptied node: %v, want ErrDataLost", err)
	}
	if err := direct.HDel(ctx, StampKey, wentBackField).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Accept(ctx, 2, ""); err != nil {
		t.Fatal(err)
	}
	n.recordWentBack(ctx, n.probeClient(), Mark{}, n.refusal(ErrDataLost))
	if v := direct.HGet(ctx, StampKey, wentBackField).Val(); v != "" {
		t.Fatalf("data_lost written over an accept: %q", v)
	}
	if err := n.Probe(ctx); err != nil {
		t.Fatalf("probe after the second accept: %v", err)
	}
}
