package explore

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
)

// stagingView is order x's view: a record staging under token T on n1,
// promising a stock part on promisedOn, and that part found on n2 in
// state st ("" none found).
func stagingView(promisedOn string, st inventory.PartState) *orderView {
	rec := &inventory.OrderRecord{ID: "x", Status: "staging", Token: "T",
		Parts: []inventory.OrderPart{{ID: "x|T|0", Node: promisedOn, Kind: inventory.PartStock, Qty: 1}}}
	ov := &orderView{recOn: []string{"n1"}, rec: rec, where: map[*inventory.PartRecord]string{}}
	if st != "" {
		p := &inventory.PartRecord{ID: "x|T|0", State: st, Kind: inventory.PartStock, Order: "x", Token: "T", Qty: 1}
		ov.parts = append(ov.parts, p)
		ov.where[p] = "n2"
	}
	return ov
}

// ackedView is order x's view at its home: a record in status with its
// deadline, promising 1 unit of s at offset 7 on n2, and that part found
// on n2 in state st (the receipt heldReceipt names).
func ackedView(homes *inventory.Homes, status inventory.OrderState, deadline time.Time, st inventory.PartState) *orderView {
	ov := stagingView("n2", st)
	ov.recOn = []string{homes.Home("x")}
	ov.rec.Status, ov.rec.Deadline = status, deadline
	ov.rec.Parts[0].SKU, ov.rec.Parts[0].Offset = "s", 7
	return ov
}

// heldReceipt is the receipt of ackedView's part.
var heldReceipt = inventory.Receipt{ItemIndex: 0, SKU: "s", Quantity: 1, Node: "n2", Offset: 7}

// emptyWorld is a world state with every node and nothing on them.
func emptyWorld() *worldState {
	st := &worldState{nodes: map[string]*nodeState{}}
	for _, n := range allNodes {
		st.nodes[n] = &nodeState{name: n, orders: map[string]*inventory.OrderRecord{}, parts: map[string]*inventory.PartRecord{}}
	}
	return st
}

// checkX runs checkOrder on order "x" of ov, with what obs observed and
// no data loss, and returns its violations.
func checkX(ov *orderView, obs *observed, homes *inventory.Homes) *violations {
	var v violations
	checkOrder(&v, "x", ov, obs, homes)
	return &v
}

// listed reports whether a violation in v holds substr.
func listed(v *violations, substr string) bool {
	return strings.Contains(strings.Join(v.list, "\n"), substr)
}

// TestCheckStagingRecord: a record left staging at quiescence is a
// violation when it cannot be decided (it promises a part on a node the
// topology no longer has: issue A2) or when a part of its attempt is
// still held; an aborted attempt (its parts cancelled before any record
// was decided, staged.go "Abort") is not one.
func TestCheckStagingRecord(t *testing.T) {
	homes, err := inventory.NewHomes(mustConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	home := homes.Home("x")
	for _, c := range []struct {
		name       string
		promisedOn string
		st         inventory.PartState
		want       string // a substring of the one violation; "" none
	}{
		{"aborted", "n2", inventory.PartCancelled, ""},
		{"nothing taken", "n2", "", ""},
		{"promised off the topology", "n4", "", "not in the topology"},
		{"part confirmed", "n2", inventory.PartConfirmed, "still staging at quiescence, with part"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ov := stagingView(c.promisedOn, c.st)
			ov.recOn = []string{home}
			v := checkX(ov, newObserved(), homes)
			var got []string
			for _, l := range v.list {
				if strings.Contains(l, "still staging") {
					got = append(got, l)
				}
			}
			switch {
			case c.want == "" && len(got) > 0:
				t.Errorf("violations %q, want none", got)
			case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want)):
				t.Errorf("violations %q, want one naming %q", got, c.want)
			}
		})
	}
}

// mustConfig is topology T0 with placeholder addresses (no server).
func mustConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := worldConfig(map[string]string{"n1": "127.0.0.1:1", "n2": "127.0.0.1:2", "n3": "127.0.0.1:3", "n4": "127.0.0.1:4"}, routesT0)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCheckResurrectedRecord: a record a loss brought back live away from
// its order's home is passed over (dead by the rule; lossdiff.go), so the
// order's one live record is at its home; the same record at the home is
// the order's record and is checked (a stale state there fails).
func TestCheckResurrectedRecord(t *testing.T) {
	homes, err := inventory.NewHomes(mustConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	home, away := homes.Home("x"), ""
	for _, n := range nodesT0 {
		if n != home {
			away = n
			break
		}
	}
	stale := &inventory.OrderRecord{ID: "x", Status: inventory.OrderCancelled, Token: "T"}
	current := &inventory.OrderRecord{ID: "x", Status: inventory.OrderCancelled, Token: "U"}
	st := emptyWorld()
	st.nodes[away].orders["x"], st.nodes[home].orders["x"] = stale, current
	several := func(resurrected map[string]map[string]bool) bool {
		var v violations
		checkOrders(&v, st, newObserved(), nil, homes, resurrected)
		for _, l := range v.list {
			if strings.Contains(l, "live record on several nodes") {
				return true
			}
		}
		return false
	}
	if !several(nil) {
		t.Errorf("two live records of x, none resurrected: not reported")
	}
	if several(map[string]map[string]bool{away: {"x": true}}) {
		t.Errorf("x's record resurrected on %s, away from its home %s: reported", away, home)
	}
	if !several(map[string]map[string]bool{home: {"x": true}}) {
		t.Errorf("x's record resurrected on its home %s and another live on %s: not reported", home, away)
	}
}

// TestCheckToldDecisionExcusedOnlyByRecordLoss: a Cancel acknowledged
// before a data loss decided the order's record for good, so a record
// that ends in another state is a violation when the loss took only a
// part of the order (seed 130 with MUTATIONS=retire-skip PROFILE=calm
// TOPOLOGY=1 RESTART=-1 LOSS=1, when a client of T1 cancelled o1: its
// part on n1 lost, its stale record kept over the cancelled one), and excused
// when it took the order's record.
func TestCheckToldDecisionExcusedOnlyByRecordLoss(t *testing.T) {
	homes, err := inventory.NewHomes(mustConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ov := &orderView{recOn: []string{homes.Home("x")}, where: map[*inventory.PartRecord]string{},
		rec: &inventory.OrderRecord{ID: "x", Status: inventory.OrderFailed, Token: "T"}}
	obs := newObserved()
	obs.cancelled["x"] = "cancel-x"
	excusedOnlyByRecordLoss(t, ov, obs, homes, "cancel-x was told cancelled")
}

// excusedOnlyByRecordLoss checks order x of ov, with what obs observed,
// under no loss, a loss that took a part of x and one that took its
// record: the violation naming substr must be listed in the first two
// and excused in the last.
func excusedOnlyByRecordLoss(t *testing.T, ov *orderView, obs *observed, homes *inventory.Homes, substr string) {
	t.Helper()
	for _, c := range []struct {
		name        string
		exposed     bool // a loss took a write of x
		recordTaken bool // x's record among them
		wantListed  bool
	}{
		{"no loss", false, false, true},
		{"a part lost", true, false, true},
		{"the record lost", true, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := violations{exposed: map[string]bool{"x": c.exposed}, records: map[string]bool{"x": c.recordTaken}}
			checkOrder(&v, "x", ov, obs, homes)
			if got := listed(&v, substr); got != c.wantListed {
				t.Errorf("%q listed = %v, want %v (list %q, excused %q)", substr, got, c.wantListed, v.list, v.excused)
			}
		})
	}
}

// TestCheckFalseDataLoss: a Confirm that reported data loss is a
// violation unless a node's data loss exposed the order (the report would
// excuse the acknowledged reservation's checks): not where no node lost
// data, nor where a node lost data but none of this order's.
func TestCheckFalseDataLoss(t *testing.T) {
	homes, err := inventory.NewHomes(mustConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name          string
		lost, exposed bool
		want          bool
	}{
		{"no loss", false, false, true},
		{"another order's loss", true, false, true},
		{"its own loss", true, true, false},
	} {
		ov := stagingView("n2", inventory.PartConfirmed)
		ov.recOn = []string{homes.Home("x")}
		ov.rec.Status = "confirmed"
		obs := newObserved()
		obs.dataLoss["x"] = true
		if c.lost {
			obs.losses = []string{"n2"}
		}
		v := violations{exposed: map[string]bool{"x": c.exposed}}
		checkOrder(&v, "x", ov, obs, homes)
		if found := listed(&v, "false-data-loss"); found != c.want {
			t.Errorf("%s: false-data-loss listed %v, want %v; violations %q", c.name, found, c.want, v.list)
		}
	}
}

// TestCheckEveryReserveAnswer: each Reserve that answered success is held
// against the record's receipts, not only the first: a retry answered
// with receipts the record does not hold is a violation (the helper's
// replay-receipts mutation went unseen in 152 schedules when only the
// first answer was kept).
func TestCheckEveryReserveAnswer(t *testing.T) {
	homes, err := inventory.NewHomes(mustConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	held, other := heldReceipt, heldReceipt
	other.Offset = 1007
	for _, c := range []struct {
		name    string
		answers [][]inventory.Receipt
		want    bool
	}{
		{"one answer, as held", [][]inventory.Receipt{{held}}, false},
		{"a retry, as held", [][]inventory.Receipt{{held}, {held}}, false},
		{"a retry told other receipts", [][]inventory.Receipt{{held}, {other}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ov := ackedView(homes, inventory.OrderReserved, time.Now().Add(time.Hour), inventory.PartPending)
			obs := newObserved()
			obs.reserved["x"] = c.answers
			v := checkX(ov, obs, homes)
			if found := listed(v, "Reserve answered"); found != c.want {
				t.Errorf("acked-gone listed = %v, want %v (violations %q)", found, c.want, v.list)
			}
		})
	}
}

// TestCheckHeldToDeadlineOrCancel: an acknowledged order's record parts
// are held to its deadline while it is reserved or expired, and, when a
// Cancel cancelled it, to the deadline or the first Cancel call's start,
// whichever came first: a part cancelled earlier was released early.
func TestCheckHeldToDeadlineOrCancel(t *testing.T) {
	homes, err := inventory.NewHomes(mustConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Hour)
	for _, c := range []struct {
		name       string
		status     inventory.OrderState
		reason     inventory.DecisionReason
		settled    time.Time     // the part's cancel
		cancelFrom time.Duration // the first Cancel's start, before the deadline; 0 none
		want       bool
	}{
		{"reserved, part cancelled early", inventory.OrderReserved, "", deadline.Add(-time.Minute), 0, true},
		{"expired, part cancelled after the deadline", inventory.OrderCancelled, inventory.ReasonExpired, deadline.Add(time.Second), 0, false},
		{"expired, part cancelled early", inventory.OrderCancelled, inventory.ReasonExpired, deadline.Add(-time.Minute), 0, true},
		{"cancelled, part cancelled after the Cancel began", inventory.OrderCancelled, inventory.ReasonCancelled, deadline.Add(-29 * time.Minute), 30 * time.Minute, false},
		{"cancelled, part cancelled before the Cancel began", inventory.OrderCancelled, inventory.ReasonCancelled, deadline.Add(-31 * time.Minute), 30 * time.Minute, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ov := ackedView(homes, c.status, deadline, inventory.PartCancelled)
			ov.rec.Reason = c.reason
			ov.parts[0].SettledAt = c.settled
			obs := newObserved()
			obs.reserved["x"] = [][]inventory.Receipt{{heldReceipt}}
			if c.cancelFrom > 0 {
				obs.cancelFrom["x"] = deadline.Add(-c.cancelFrom)
			}
			v := checkX(ov, obs, homes)
			if found := listed(v, "was cancelled"); found != c.want {
				t.Errorf("early release listed = %v, want %v (violations %q)", found, c.want, v.list)
			}
		})
	}
}

// TestCheckOrdersToldOfOutsidePhaseOne: an order a caller was told was
// reserved is checked though it is not among the schedule's phase-1
// orders and nothing of it is left on the nodes (phase 2's order, the
// topology actor's): before, such an order was looked at only when a
// record or a part of it remained.
func TestCheckOrdersToldOfOutsidePhaseOne(t *testing.T) {
	homes, err := inventory.NewHomes(mustConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	obs := newObserved()
	obs.reserved["o3"] = [][]inventory.Receipt{{heldReceipt}}
	var v violations
	checkOrders(&v, emptyWorld(), obs, nil, homes, nil)
	if !listed(&v, "order o3: Reserve answered success, the order is") {
		t.Errorf("an acknowledged order with nothing left, outside phase 1: not reported (violations %q)", v.list)
	}
}

// TestCheckStuck: a part left in a node's stuck index after the heal is a
// violation naming the part, its state and why it was set aside, unless
// a node's data loss exposed its order; an empty stuck index is none.
func TestCheckStuck(t *testing.T) {
	st := emptyWorld()
	v := &violations{exposed: map[string]bool{}}
	checkQuiet(v, st)
	if listed(v, "part-stuck") {
		t.Fatalf("no part set aside, but: %v", v.list)
	}
	n2 := st.nodes["n2"]
	n2.parts["o1|T|0"] = &inventory.PartRecord{ID: "o1|T|0", Order: "o1", State: inventory.PartPending}
	n2.stuck = []redis.Z{{Score: 1, Member: "o1|T|0"}}
	n2.stuckWhy = map[string]string{"o1|T|0": "script failed"}
	checkQuiet(v, st)
	if !listed(v, "part-stuck: node n2: part o1|T|0 (pending) set aside") || !listed(v, "script failed") {
		t.Fatalf("part o1|T|0 left set aside, but: %v", v.list)
	}
	v = &violations{exposed: map[string]bool{"o1": true}}
	checkQuiet(v, st)
	if listed(v, "part-stuck") || len(v.excused) != 1 {
		t.Fatalf("o1 exposed by a data loss: want the violation excused, got %v (excused %v)", v.list, v.excused)
	}
}

// TestCheckRedo: a redo log gap-free to its head with each stock part
// once, at the offset its record names, passes; a gap, two parts at an
// offset, a part the log lacks or names elsewhere, an entry naming no
// part each fail, and a part's violation is excused for an order a data
// loss exposed.
func TestCheckRedo(t *testing.T) {
	const xk = "inv:redo:3"
	part := func(id string, off int64) *inventory.PartRecord {
		return &inventory.PartRecord{ID: id, Order: strings.Split(id, "|")[0], State: inventory.PartPending,
			Kind: inventory.PartStock, Redo: xk, Offset: off, Qty: 1}
	}
	good := func() *nodeState {
		return &nodeState{name: "n1", heads: map[string]int64{xk: 2},
			redo:  map[string]map[int64][]string{xk: {1: {"a|T|0"}, 2: {"b|T|0"}}},
			parts: map[string]*inventory.PartRecord{"a|T|0": part("a|T|0", 1), "b|T|0": part("b|T|0", 2)}}
	}
	for _, c := range []struct {
		name    string
		mangle  func(ns *nodeState)
		exposed string
		want    string // "" no violation
	}{
		{"agree", func(*nodeState) {}, "", ""},
		{"gap", func(ns *nodeState) { ns.heads[xk] = 3 }, "", "has no entry at offset 3 (head 3)"},
		{"two parts at an offset", func(ns *nodeState) { ns.redo[xk][2] = append(ns.redo[xk][2], "a|T|0") }, "", "holds parts [b|T|0 a|T|0] at offset 2"},
		{"part not logged", func(ns *nodeState) { ns.parts["c|T|0"] = part("c|T|0", 7) }, "", "part c|T|0's record names redo entry inv:redo:3@7, the log has it at []"},
		{"part not logged, exposed", func(ns *nodeState) { ns.parts["c|T|0"] = part("c|T|0", 7) }, "c", ""},
		{"logged elsewhere", func(ns *nodeState) { ns.parts["b|T|0"].Offset = 1 }, "", "the log has it at [inv:redo:3@2]"},
		{"entry with no part", func(ns *nodeState) { delete(ns.parts, "b|T|0") }, "", "names part b|T|0, which has no record"},
		{"past the head", func(ns *nodeState) { ns.redo[xk][5] = []string{"e|T|0"} }, "", "outside 1..2"},
		{"no head", func(ns *nodeState) { delete(ns.heads, xk) }, "", "name no head for it"},
	} {
		ns := good()
		c.mangle(ns)
		v := &violations{exposed: map[string]bool{c.exposed: c.exposed != ""}}
		checkRedo(v, ns)
		switch {
		case c.want == "" && len(v.list) > 0:
			t.Errorf("%s: want no violation, got %q", c.name, v.list)
		case c.want != "" && !listed(v, c.want):
			t.Errorf("%s: want a violation with %q, got %q", c.name, c.want, v.list)
		}
	}
}

// TestCheckOperatorDecisionExcusedOnlyByRecordLoss: a part the operator
// settled confirmed while its order's record reads failed is a violation
// ("operator-decision") unless a node's data loss took that record: seed
// 175273 (PROFILE=crash TOPOLOGY=0.6 LOSS=0.5 LOSS2=0.3 OPERATOR=0.5 ...),
// where o1's Confirm landed, its home went back to a copy from before
// the order, and the reconcilers decided the record they found by its
// parts failed, while the operator settled the parts the record-loss
// actor had orphaned by the system of record, which holds o1 paid. A loss
// that took only a part of the order excuses nothing.
func TestCheckOperatorDecisionExcusedOnlyByRecordLoss(t *testing.T) {
	homes, err := inventory.NewHomes(mustConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ov := ackedView(homes, inventory.OrderFailed, time.Now(), inventory.PartConfirmed)
	obs := newObserved()
	obs.operated = append(obs.operated, "n2 x|T|0")
	excusedOnlyByRecordLoss(t, ov, obs, homes, "operator-decision")
}
