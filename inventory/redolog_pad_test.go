package inventory

import (
	"testing"
	"time"
)

// The redo offsets hash is a hash table once stock is loaded (its pad,
// redolog.go), stays one, and gets its pad back from the first script
// call that records a queue's first offset when it lost it; the pad is
// no queue's head for RedoHeads, and the heads read as before.
func TestRedoOffsetsPad(t *testing.T) {
	e := newStagedEnv(t)
	cl := e.clients["n1"]
	if _, err := e.inv.LoadStock(e.ctx, "a", "pad", 1000, 0); err != nil {
		t.Fatal(err)
	}
	if enc := cl.ObjectEncoding(e.ctx, RedoOffsetsKey).Val(); enc != "hashtable" {
		t.Fatalf("%s is a %q after a stock load, want a hashtable", RedoOffsetsKey, enc)
	}
	if v := cl.HGet(e.ctx, RedoOffsetsKey, RedoOffsetsPad).Val(); v != redoOffsetsPadText {
		t.Fatalf("%s %s = %q, want %q", RedoOffsetsKey, RedoOffsetsPad, v, redoOffsetsPadText)
	}
	// lost (a hand-made HDEL): the first take of a new queue sets it again
	cl.HDel(e.ctx, RedoOffsetsKey, RedoOffsetsPad)
	res, err := e.inv.Reserve(e.ctx, "pad-1", []Item{{Route: "a", SKU: "pad", Quantity: 1}}, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Receipts[0]
	if v := cl.HGet(e.ctx, RedoOffsetsKey, r.RedoLog+RedoFirstSuffix).Val(); v != "1" {
		t.Fatalf("%s%s = %q, want 1 (the queue's first take)", r.RedoLog, RedoFirstSuffix, v)
	}
	if v := cl.HGet(e.ctx, RedoOffsetsKey, RedoOffsetsPad).Val(); v != redoOffsetsPadText {
		t.Fatalf("after the first take of %s: %s = %q, want the pad", r.RedoLog, RedoOffsetsPad, v)
	}
	if enc := cl.ObjectEncoding(e.ctx, RedoOffsetsKey).Val(); enc != "hashtable" {
		t.Fatalf("%s is a %q, want a hashtable", RedoOffsetsKey, enc)
	}
	heads, err := RedoHeads("n1", cl.HGetAll(e.ctx, RedoOffsetsKey).Val())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := heads[RedoOffsetsPad]; ok || heads[r.RedoLog] != r.Offset || len(heads) != 1 {
		t.Fatalf("RedoHeads = %v, want only %s = %d", heads, r.RedoLog, r.Offset)
	}
}
