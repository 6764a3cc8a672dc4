package inventory

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/node"
)

// refuseShort's reads in batches (peekbatch.go) against real nodes: one
// script call reads the batch's records and each distinct stock hash
// once, a wrong node at the address or a stale epoch refuses the whole
// batch (the order steps aside), a corrupt counter fails only its reads.

// peekEnvNode returns e's node named name and its client.
func peekEnvNode(t *testing.T, e *soldOutEnv, name string) *node.Node {
	t.Helper()
	for _, n := range e.r.Nodes() {
		if n.Name() == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}

// commandCalls returns how many times cmd ran on the node of c since its
// stats were reset (INFO commandstats counts the commands a script runs).
func commandCalls(t *testing.T, e *soldOutEnv, name, cmd string) int {
	t.Helper()
	s, err := e.clients[name].Info(e.ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(s, "\n") {
		var calls int
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "cmdstat_"+cmd+":calls=%d,", &calls); err == nil {
			return calls
		}
	}
	return 0
}

// TestPeekBatchReadsEachStockOnce: a batch of four orders' reads on one
// node, three wanting the same sold-out SKU and one a SKU never loaded,
// is one script call reading the stamp, two records and two distinct
// stock hashes, and every order gets its own record and its SKU's
// counters.
func TestPeekBatchReadsEachStockOnce(t *testing.T) {
	e := newSoldOutEnv(t)
	e.load("b", "gone", 2)
	e.sellOut("b", "gone", 1)
	n2 := peekEnvNode(t, e, "n2")
	if err := e.clients["n2"].Set(e.ctx, orderKey("known"), "rtok", 0).Err(); err != nil { // reserved, packed (orderrec.go)
		t.Fatal(err)
	}
	gone, never := stockKey("b", "gone"), stockKey("b", "never")
	batch := []*peekReq{
		{record: orderKey("known"), stocks: []string{gone}, done: make(chan struct{})},
		{stocks: []string{gone}, done: make(chan struct{})},
		{record: orderKey("new"), stocks: []string{gone, never}, done: make(chan struct{})},
		{stocks: []string{never}, done: make(chan struct{})},
	}
	token := e.inv.topology(e.ctx).token
	before := e.inv.Stats()
	e.inv.sendPeeks(e.ctx, n2, token, []*peekReq{{done: make(chan struct{})}}) // the node learns the script
	if err := e.clients["n2"].ConfigResetStat(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.inv.sendPeeks(e.ctx, n2, token, batch)
	if got := commandCalls(t, e, "n2", "evalsha") + commandCalls(t, e, "n2", "eval") + commandCalls(t, e, "n2", "fcall"); got != 1 {
		t.Errorf("%d script calls for one batch, want 1", got)
	}
	// The batches are counted (Stats, shardis_refusal_read*_total): 2
	// script calls carrying 1 + 4 orders' reads.
	if s := e.inv.Stats(); s.RefusalReadScripts-before.RefusalReadScripts != 2 || s.RefusalReads-before.RefusalReads != 5 {
		t.Errorf("Stats: %d refusal read scripts carrying %d reads, want 2 carrying 5",
			s.RefusalReadScripts-before.RefusalReadScripts, s.RefusalReads-before.RefusalReads)
	}
	if got := commandCalls(t, e, "n2", "hmget"); got != 2 {
		t.Errorf("%d HMGETs, want 2 (2 distinct stock hashes)", got)
	}
	if got := commandCalls(t, e, "n2", "get"); got != 2 {
		t.Errorf("%d GETs, want 2 (2 records)", got)
	}
	if got := commandCalls(t, e, "n2", "hget"); got != 2 {
		t.Errorf("%d HGETs, want 2 (the stamp's name and epoch)", got)
	}
	goneVals := stockVals{avail: 1, known: true}
	want := []struct {
		status string
		vals   []stockVals
	}{
		{"reserved", []stockVals{goneVals}},
		{"", []stockVals{goneVals}},
		{"", []stockVals{goneVals, {}}},
		{"", []stockVals{{}}},
	}
	for i, r := range batch {
		select {
		case <-r.done:
		default:
			t.Fatalf("read %d not answered", i)
		}
		if r.err != nil || r.status != want[i].status || fmt.Sprint(r.vals) != fmt.Sprint(want[i].vals) {
			t.Errorf("read %d: status %q vals %v err %v, want %q %v", i, r.status, r.vals, r.err, want[i].status, want[i].vals)
		}
	}
}

// TestPeekStepsAsideOnStamp: a sold-out SKU's order is refused by reads
// alone, but not while the node at the address is another node (its stamp
// names another) nor while the node is at another epoch: the reads fail
// with the typed errors (ErrUnavailable and node.ErrIdentity, ErrTopology)
// and refuseShort decides nothing.
func TestPeekStepsAsideOnStamp(t *testing.T) {
	e := newSoldOutEnv(t)
	e.load("b", "gone", 1)
	e.sellOut("b", "gone", 1)
	items := []Item{{Route: "b", SKU: "gone", Quantity: 1}}
	n2 := peekEnvNode(t, e, "n2")
	// An order whose home is n2: its record and the stock on one node.
	var id string
	for i := 0; id == ""; i++ {
		if h, err := e.inv.homeFor(e.ctx, fmt.Sprint("o-", i)); err != nil {
			t.Fatal(err)
		} else if h == n2 {
			id = fmt.Sprint("o-", i)
		}
	}
	if err := e.inv.refuseShort(e.ctx, n2, id, items, ""); !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("stamp as it is: got %v, want insufficient stock", err)
	}
	stamp, err := e.clients["n2"].HGetAll(e.ctx, stampKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		field, value string
		want         []error
	}{
		{"name", "n9", []error{ErrUnavailable, node.ErrIdentity}},
		{"epoch", "999:other", []error{ErrUnavailable, ErrTopology}},
	} {
		if err := e.clients["n2"].HSet(e.ctx, stampKey, c.field, c.value).Err(); err != nil {
			t.Fatal(err)
		}
		r := &peekReq{record: orderKey(id), stocks: []string{stockKey("b", "gone")}}
		err := e.inv.peekOn(e.ctx, n2, e.inv.topology(e.ctx).token, r)
		for _, w := range c.want {
			if !errors.Is(err, w) {
				t.Errorf("stamp %s %s: reads got %v, want %v", c.field, c.value, err, w)
			}
		}
		if err := e.inv.refuseShort(e.ctx, n2, id, items, ""); err != nil {
			t.Errorf("stamp %s %s: refuseShort decided %v, want it to step aside", c.field, c.value, err)
		}
		if err := e.clients["n2"].HSet(e.ctx, stampKey, c.field, stamp[c.field]).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPeekCorruptCounter: a stock counter that is not an integer fails
// the reads of that hash with ErrCorrupt naming the node and the key, and
// refuseShort steps aside; another hash of the same batch reads as usual.
func TestPeekCorruptCounter(t *testing.T) {
	e := newSoldOutEnv(t)
	e.load("b", "gone", 1)
	e.sellOut("b", "gone", 1)
	e.load("b", "bad", 1)
	n2 := peekEnvNode(t, e, "n2")
	if err := e.clients["n2"].HSet(e.ctx, stockKey("b", "bad"), "reserved", "01").Err(); err != nil {
		t.Fatal(err)
	}
	bad, good := &peekReq{stocks: []string{stockKey("b", "bad")}, done: make(chan struct{})}, &peekReq{stocks: []string{stockKey("b", "gone")}, done: make(chan struct{})}
	e.inv.sendPeeks(e.ctx, n2, e.inv.topology(e.ctx).token, []*peekReq{bad, good})
	if bad.err != nil || len(bad.vals) != 1 || !errors.Is(bad.vals[0].err, ErrCorrupt) ||
		!strings.Contains(bad.vals[0].err.Error(), "n2") || !strings.Contains(bad.vals[0].err.Error(), stockKey("b", "bad")) {
		t.Errorf("corrupt hash: err %v vals %+v, want ErrCorrupt naming n2 and the key", bad.err, bad.vals)
	}
	if good.err != nil || len(good.vals) != 1 || good.vals[0].err != nil || !good.vals[0].known {
		t.Errorf("sound hash of the same batch: err %v vals %+v", good.err, good.vals)
	}
	e.inv.soldOut.ttl = time.Hour
	if err := e.inv.refuseShort(e.ctx, n2, "o-bad", []Item{{Route: "b", SKU: "bad", Quantity: 5}}, ""); err != nil {
		t.Errorf("refuseShort over a corrupt counter decided %v, want it to step aside", err)
	}
}

// TestStrictInt: the counters' integer rule is the prelude's int.
func TestStrictInt(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "7": true, "-12": true, "120": true,
		"": false, "-0": false, "01": false, "+1": false, "1.0": false, " 1": false, "-": false, "1e3": false} {
		if got := strictInt(s); got != want {
			t.Errorf("strictInt(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestPeekQuotaCounters: the reads of an order with a user carry its
// per-user quota counters (soldout.go, "Per-user limits"): each distinct
// counter of a batch is read once, an absent one reads 0, and a counter
// that is not an integer (a bad string, a key of another type) fails only
// the reads of it with ErrCorrupt naming the node and the key.
func TestPeekQuotaCounters(t *testing.T) {
	e := newSoldOutEnv(t)
	e.load("b", "lim", 5)
	n2 := peekEnvNode(t, e, "n2")
	held, none, bad, hash := quotaKey("b", "lim", "u1"), quotaKey("b", "lim", "u2"), quotaKey("b", "lim", "u3"), quotaKey("b", "lim", "u4")
	for k, v := range map[string]string{held: "3", bad: "03"} {
		if err := e.clients["n2"].Set(e.ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.clients["n2"].HSet(e.ctx, hash, "f", "1").Err(); err != nil {
		t.Fatal(err)
	}
	stock := stockKey("b", "lim")
	batch := []*peekReq{
		{stocks: []string{stock}, quotas: []string{held}, done: make(chan struct{})},
		{stocks: []string{stock}, quotas: []string{held, none}, done: make(chan struct{})},
		{stocks: []string{stock}, quotas: []string{bad}, done: make(chan struct{})},
		{stocks: []string{stock}, quotas: []string{hash}, done: make(chan struct{})},
	}
	token := e.inv.topology(e.ctx).token
	e.inv.sendPeeks(e.ctx, n2, token, []*peekReq{{done: make(chan struct{})}}) // the node learns the script
	if err := e.clients["n2"].ConfigResetStat(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.inv.sendPeeks(e.ctx, n2, token, batch)
	if got := commandCalls(t, e, "n2", "get"); got != 4 {
		t.Errorf("%d GETs, want 4 (4 distinct quota counters)", got)
	}
	for i, want := range [][]int64{{3}, {3, 0}} {
		r := batch[i]
		if r.err != nil || fmt.Sprint(r.held) != fmt.Sprint(want) || len(r.vals) != 1 || r.vals[0].avail != 5 {
			t.Errorf("read %d: held %v vals %v err %v, want held %v and the stock", i, r.held, r.vals, r.err, want)
		}
	}
	for i, k := range map[int]string{2: bad, 3: hash} {
		if err := batch[i].err; !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "n2") || !strings.Contains(err.Error(), k) {
			t.Errorf("read %d of counter %s: err %v, want ErrCorrupt naming n2 and the key", i, k, err)
		}
	}
}
