package node

import (
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// The batch gate refuses a batch at once while the node is DOWN, counts a
// failed batch as one node failure, pairs each report with the oldest
// admission, and ignores a report it never admitted.
func TestBatchGate(t *testing.T) {
	t.Parallel()
	var failures atomic.Int32
	n, err := New(Options{Name: "n1", Addr: "127.0.0.1:1", BreakerFailures: 1000, BreakerOpenTimeout: time.Second,
		OnFailure: func() { failures.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	g := &batchGate{n: n}
	if err := g.Allow(); !errors.Is(err, ErrDown) {
		t.Fatalf("Allow on a node never probed UP: %v, want ErrDown", err)
	}
	n.SetUp()
	for range 3 {
		if err := g.Allow(); err != nil {
			t.Fatalf("Allow on an UP node: %v", err)
		}
	}
	g.ReportResult(io.EOF) // a batch that failed on the network
	g.ReportResult(nil)
	g.ReportResult(io.ErrUnexpectedEOF)
	g.ReportResult(io.EOF) // nothing admitted: ignored
	if f := failures.Load(); f != 2 {
		t.Errorf("OnFailure called %d times for 2 failed batches, want 2", f)
	}
	if len(g.open) != 0 {
		t.Errorf("%d admissions still open after every report", len(g.open))
	}
	n.SetDown(errors.New("drill"))
	if err := g.Allow(); !errors.Is(err, ErrDown) {
		t.Errorf("Allow on a DOWN node: %v, want ErrDown", err)
	}
}
