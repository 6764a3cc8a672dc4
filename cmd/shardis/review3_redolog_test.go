package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// redo-log says on stderr the incarnation it read at, offsets trimmed
// before they were read, and a position past the queue's head; redo-log
// ack --incarnation is refused (exit 1, naming both incarnations) when the
// node is at another one, and goes through at the node's.
func TestReview3RedoLogIncarnationTrimmedRewound(t *testing.T) {
	t.Setenv(tokenEnv, "")
	nodes := redistest.StartN(t, 1, redistest.Options{})
	addr := startWith(t, nodes, map[string][]string{"clothes": {"n1"}}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "cap", "--qty", "30")
	var rc *v1.Receipt
	for _, id := range []string{"r3-1", "r3-2"} {
		rc = okJSON(t, addr, &v1.ReserveResponse{}, "reserve", "--order", id, "clothes:cap:1").Receipts[0]
		ok(t, addr, "confirm", id)
	}
	read := okJSON(t, addr, &v1.ReadRedoLogResponse{}, "redo-log", "--node", "n1", "--queue", rc.RedoLog)
	incA := read.Incarnation
	if incA == "" || len(read.Entries) != 2 || read.Head != rc.Offset {
		t.Fatalf("redo-log --json = %v; want 2 entries, head %d and the incarnation", read, rc.Offset)
	}
	code, _, errOut := cli(t, "redo-log", "--addr", addr, "--node", "n1", "--queue", rc.RedoLog)
	if code != 0 || !strings.Contains(errOut, "incarnation "+incA) {
		t.Fatalf("redo-log: exit %d, stderr %q; want the incarnation %s said", code, errOut, incA)
	}

	acc := okJSON(t, addr, &v1.AcceptNodeResponse{}, "node", "accept", "--force", "n1")
	off := strconv.FormatInt(rc.Offset, 10)
	errOut = fails(t, 1, incA, "redo-log", "ack", "--addr", addr, "--node", "n1", "--queue", rc.RedoLog, "--incarnation", incA, off)
	if !strings.Contains(errOut, acc.Incarnation) {
		t.Fatalf("redo-log ack at %s on a node at %s: stderr %q; want both named", incA, acc.Incarnation, errOut)
	}

	// offset 1 trimmed (as the trim removes a prefix)
	cl := nodes[0].Client(t)
	if err := cl.ZRemRangeByScore(ctx, rc.RedoLog+":s0", "1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "redo-log", "--addr", addr, "--node", "n1", "--queue", rc.RedoLog)
	if code != 0 || !strings.Contains(errOut, "offsets 1..1 are gone, not read (trimmed") || !strings.Contains(out, "\n"+off+" ") {
		t.Fatalf("redo-log after a trim: exit %d, stdout %q, stderr %q; want the trimmed range said and the entry left", code, out, errOut)
	}
	code, _, errOut = cli(t, "redo-log", "--addr", addr, "--node", "n1", "--queue", rc.RedoLog, "--after", "100")
	if code != 0 || !strings.Contains(errOut, "offset 100 is past the queue's last offset "+off) {
		t.Fatalf("redo-log --after 100: exit %d, stderr %q; want the position past the head said", code, errOut)
	}
	ack := okJSON(t, addr, &v1.AckRedoLogResponse{}, "redo-log", "ack", "--node", "n1", "--queue", rc.RedoLog, "--incarnation", acc.Incarnation, off)
	if ack.AckedOffset != rc.Offset {
		t.Fatalf("redo-log ack at the node's incarnation: acked %d, want %d", ack.AckedOffset, rc.Offset)
	}
}
