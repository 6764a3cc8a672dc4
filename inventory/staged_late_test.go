package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A one-round attempt whose stage reaches the home node late (queued
// behind groups, a stall), after its takes and after another actor met
// the order's existing record (staged.go, "A stage never takes over a
// record"). The stage is held back by a Faults (lateStage) until the
// scenario let the other actors run; nothing here waits on the clock but
// the reconciler, which waits, polling, for the parts to come due.

// lateStage is the Faults of the instance whose attempt's stage is late:
// it holds back the first "stage-take" call of order until release is
// closed, tells when that attempt's takes have returned, and, for the
// deadline test, delays every stage and take of order by delay and notes
// the instance's clock just before each is sent. mutation, when set, is
// re-introduced (the Mutator the schedule explorer's self-check uses) in
// every instance it is the Faults of.
type lateStage struct {
	order    string
	hold     bool          // hold back the first stage
	delay    time.Duration // delay every stage and take of order
	mutation Mutation
	takes    int           // taken closes once this many takes returned (0: one)
	release  chan struct{} // closed to let the held stage go
	held     chan struct{} // closed once the first stage is held
	taken    chan struct{} // closed once the held attempt's takes returned

	mu       sync.Mutex
	stages   int
	returned int                  // takes returned
	sent     map[string]time.Time // part id → the instance's clock when its call was sent
	heldOne  sync.Once
	tookOne  sync.Once
}

func newLateStage(order string) *lateStage {
	return &lateStage{order: order, hold: true, release: make(chan struct{}), held: make(chan struct{}),
		taken: make(chan struct{}), sent: map[string]time.Time{}}
}

// callOrder is the order of a stage-take or reserve call: its first key
// is the order's key (stage-take) or a part's (reserve), whose id begins
// with the order id.
func callOrder(c ScriptCall) string {
	if len(c.Keys) == 0 {
		return ""
	}
	if id, ok := strings.CutPrefix(c.Keys[0], orderKeyPrefix); ok {
		return id
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(c.Keys[0], partKeyPrefix), "|")
	return id
}

func (l *lateStage) Call(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if (c.Script != "stage-take" && c.Script != "reserve") || callOrder(c) != l.order {
		return send()
	}
	if c.Script == "stage-take" {
		l.mu.Lock()
		l.stages++
		first := l.stages == 1
		l.mu.Unlock()
		if first && l.hold {
			l.heldOne.Do(func() { close(l.held) })
			select {
			case <-l.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	if l.delay > 0 {
		time.Sleep(l.delay) // the call is late (an injected delay, not a synchronisation)
	}
	at := time.Now()
	l.mu.Lock()
	for _, k := range c.Keys {
		if id, ok := strings.CutPrefix(k, partKeyPrefix); ok {
			l.sent[id] = at
		}
	}
	l.mu.Unlock()
	v, err := send()
	if c.Script == "reserve" {
		l.mu.Lock()
		l.returned++
		all := l.returned >= max(l.takes, 1)
		l.mu.Unlock()
		if all {
			l.tookOne.Do(func() { close(l.taken) })
		}
	}
	return v, err
}

func (l *lateStage) Crash(context.Context, string) bool { return false }

func (l *lateStage) Mutated(m Mutation) bool { return l.mutation != "" && m == l.mutation }

// lateInstance is a second Inventory on e's router whose Faults is l: the
// instance whose attempt is late.
func (e *stagedEnv) lateInstance(l *lateStage) *Inventory {
	e.t.Helper()
	inv, err := New(e.r, Options{Logger: slog.New(slog.DiscardHandler), AttemptLease: stagedLease, Faults: l})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(inv.Close)
	return inv
}

// awayOrder returns an order id with prefix whose home node is not n2, so
// that an order of route b (on n2) is reserved by the one-round path with
// its stock part taken away from home.
func (e *stagedEnv) awayOrder(prefix string) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if e.inv.topo.cur.Load().homes.Home(id) != "n2" {
			return id
		}
	}
}

// wait waits for ch, failing the test after 10s.
func (e *stagedEnv) wait(ch <-chan struct{}, what string) {
	e.t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		e.t.Fatalf("%s did not happen within 10s", what)
	}
}

// expireOrder runs the reconciler's step (DueParts, ResolveExpired) on n2
// until a pending part of order with token's prefix ("" any) came due and
// was resolved, and returns the resolutions.
func (e *stagedEnv) expireOrder(order string) []Resolution {
	e.t.Helper()
	n2, _ := e.r.Node("n2")
	deadline := time.Now().Add(10 * time.Second)
	for {
		due, err := e.inv.DueParts(e.ctx, n2, 100)
		if err != nil {
			e.t.Fatal(err)
		}
		var out []Resolution
		for _, p := range due {
			if p.OrderID != order {
				continue
			}
			res, err := e.inv.ResolveExpired(e.ctx, p)
			if err != nil {
				e.t.Fatalf("ResolveExpired %+v: %v", p, err)
			}
			out = append(out, res)
		}
		if len(out) > 0 {
			return out
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no part of order %s came due on n2 within 10s", order)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// partsOf returns the state of every part of order on n2, by part id.
func (e *stagedEnv) partsOf(order string) map[string]string {
	e.t.Helper()
	c := e.clients["n2"]
	keys, err := c.Keys(e.ctx, partKey(order+"|*")).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		out[strings.TrimPrefix(k, partKeyPrefix)] = partFieldsOn(e.t, e.ctx, c, strings.TrimPrefix(k, partKeyPrefix))["state"]
	}
	return out
}

// checkConfirmed checks that every order Confirm answered for is backed by
// stock: each of its recorded parts is confirmed on its node, and the
// units confirmed by orders add up to at most the units loaded.
func (e *stagedEnv) checkConfirmed(route, sku string, loaded int64, confirmed ...string) (problems []string) {
	e.t.Helper()
	var units int64
	for _, id := range confirmed {
		home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), id)
		rec, err := DecodeOrder(id, orderFieldsOn(e.t, e.ctx, e.clients[home.Name()], id))
		if err != nil {
			e.t.Fatalf("order %s: %v", id, err)
		}
		for _, p := range rec.Parts {
			if p.Kind != PartStock {
				continue
			}
			units += p.Qty
			if st := partFieldsOn(e.t, e.ctx, e.clients[p.Node], p.ID)["state"]; st != "confirmed" {
				problems = append(problems, fmt.Sprintf("confirmed order %s: part %s on %s is %q", id, p.ID, p.Node, st))
			}
		}
	}
	if units > loaded {
		problems = append(problems, fmt.Sprintf("oversold: orders confirmed %d units of %s/%s, %d loaded", units, route, sku, loaded))
	}
	lvl, err := e.inv.GetStock(e.ctx, route, sku)
	if err != nil {
		e.t.Fatal(err)
	}
	if lvl.Available < 0 || lvl.Reserved < 0 || lvl.Available+lvl.Reserved+lvl.Confirmed != loaded {
		problems = append(problems, fmt.Sprintf("%s/%s: %+v does not add up to %d", route, sku, lvl, loaded))
	}
	return problems
}

// lateStageOverFailed is safety issue A1: order X has a failed record of
// another attempt; a new attempt's takes land, its stage is late; a
// reconciler pass finds the due part, reads the failed record (another
// token) and returns the part's stock, which another order reserves and
// confirms; then the stage lands. It returns what is wrong afterwards
// (nothing, when the stage cannot take over the failed record) and the
// late attempt's answer.
func lateStageOverFailed(t *testing.T, mutate bool) (problems []string, lateErr error) {
	e := newStagedEnv(t)
	const loaded = 2
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", loaded, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")

	// An earlier attempt of X failed (another order held the stock).
	if _, err := e.inv.Reserve(e.ctx, "y1", items, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Reserve(e.ctx, x, items, "", time.Minute); !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("Reserve %s while y1 holds the stock = %v, want ErrInsufficientStock", x, err)
	}
	if _, err := e.inv.Cancel(e.ctx, "y1"); err != nil {
		t.Fatal(err)
	}
	e.verify(x, "failed")

	// The late attempt: its take lands on n2, its stage is held back. A
	// short ttl makes its part due soon (by either clock).
	l := newLateStage(x)
	if mutate {
		l.mutation = MutationStageTakeover
	}
	late := e.lateInstance(l)
	type answer struct {
		res Reservation
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := late.Reserve(e.ctx, x, items, "", 2*time.Second)
		done <- answer{res, err}
	}()
	e.wait(l.held, "the late attempt's stage being held")
	e.wait(l.taken, "the late attempt's take")

	// The reconciler: X is failed under another token, so the part goes.
	for _, r := range e.expireOrder(x) {
		if r != Cancelled {
			t.Fatalf("the reconciler resolved the late attempt's part: %s, want cancelled", r)
		}
	}
	// Another order takes the returned stock and confirms it.
	if _, err := e.inv.Reserve(e.ctx, "y2", items, "", time.Minute); err != nil {
		t.Fatalf("Reserve y2 after the reconciler returned the stock: %v", err)
	}
	if _, err := e.inv.Confirm(e.ctx, "y2"); err != nil {
		t.Fatal(err)
	}

	// The stage lands.
	close(l.release)
	var a answer
	select {
	case a = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the late attempt did not answer within 10s of its stage landing")
	}
	late.Close() // its background commit, if any, has landed
	confirmed := []string{"y2"}
	if _, err := e.inv.Confirm(e.ctx, x); err == nil {
		confirmed = append(confirmed, x)
	} else if a.err == nil {
		problems = append(problems, fmt.Sprintf("Reserve %s answered OK, Confirm then: %v", x, err))
	}
	return append(problems, e.checkConfirmed("b", "t", loaded, confirmed...)...), a.err
}

// TestStagedLateStageOverFailedRecord: the late stage must not take over
// the failed record, so nothing is confirmed beyond the stock; the late
// attempt takes the general path and finds the stock gone.
func TestStagedLateStageOverFailedRecord(t *testing.T) {
	t.Parallel()
	problems, err := lateStageOverFailed(t, false)
	for _, p := range problems {
		t.Error(p)
	}
	if !errors.Is(err, ErrInsufficientStock) {
		t.Errorf("the late attempt answered %v, want ErrInsufficientStock (y2 holds the stock)", err)
	}
}

// TestMutationStageTakeoverOversells: with MutationStageTakeover
// re-introduced the same schedule oversells, so the mutation the schedule
// explorer's self-check looks for is the bug.
func TestMutationStageTakeoverOversells(t *testing.T) {
	t.Parallel()
	problems, err := lateStageOverFailed(t, true)
	if err != nil {
		t.Errorf("with the mutation the late attempt answered %v, want OK (its stage took over the failed record)", err)
	}
	oversold := false
	for _, p := range problems {
		oversold = oversold || strings.HasPrefix(p, "oversold:")
	}
	if !oversold {
		t.Errorf("with MutationStageTakeover no oversell was seen; problems: %v", problems)
	}
}

// lateRefusal is how a retry is refused while a late attempt holds what
// refuses it: the stock loaded on route b (one node) and its per-user
// limit, the order's user, and the refusal the retry answers. spread adds
// an item of route c (n3, with the same stock and limit), so the order's
// quota parts are on two nodes and the retry is refused by its reads
// before any take (soldout.go): behind a fence, its only write.
type lateRefusal struct {
	loaded, limit int64
	user          string
	want          error
	spread        bool
}

// shortByHold: the late attempt holds all the stock.
var shortByHold = lateRefusal{loaded: 2, want: ErrInsufficientStock}

// limitByHold: the late attempt holds all of the user's limit, so the
// retry's quota part is over it (limitMayBeOwn).
var limitByHold = lateRefusal{loaded: 10, limit: 2, user: "u", want: ErrLimitExceeded}

// spreadLimitByHold is limitByHold over routes b and c, refused by reads.
var spreadLimitByHold = lateRefusal{loaded: 10, limit: 2, user: "u", want: ErrLimitExceeded, spread: true}

// lateStageAfterRefusal: a late attempt R0 of order X holds X's stock and
// quota (its take landed, its stage is held back) when a retry R1 of X,
// finding no record, is refused (rc) and leaves X failed; then R0's stage
// lands. R1's answer says X is not reserved; a reservation made of the
// units R0 held while R1 answered would mean X was reserved all along (R1
// should have returned its receipts). It returns what is wrong.
func lateStageAfterRefusal(t *testing.T, rc lateRefusal, m Mutation) (problems []string) {
	e := newStagedEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", rc.loaded, rc.limit); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")
	if rc.spread {
		if _, err := e.inv.LoadStock(e.ctx, "c", "t", rc.loaded, rc.limit); err != nil {
			t.Fatal(err)
		}
		items = append(items, Item{Route: "c", SKU: "t", Quantity: 1})
		x = e.homedOn("x", "n1") // its stage holds no part: both takes land while it is held
	}
	l := newLateStage(x)
	l.mutation = m
	if rc.spread {
		l.takes = 2
	}
	late := e.lateInstance(l)
	retry := e.inv
	if m != "" && m != MutationStageTakeover {
		retry = e.lateInstance(newLateStage("")) // refuses with the mutation too
		retry.opts.Faults.(*lateStage).mutation = m
		retry.limited.mark(stockRef{"b", "t"}) // as e.inv's LoadStock did for it
	}
	done := make(chan error, 1)
	go func() {
		_, err := late.Reserve(e.ctx, x, items, rc.user, time.Minute)
		done <- err
	}()
	e.wait(l.held, "the late attempt's stage being held")
	e.wait(l.taken, "the late attempt's take")

	if _, err := retry.Reserve(e.ctx, x, items, rc.user, time.Minute); !errors.Is(err, rc.want) {
		t.Fatalf("retry of %s while the late attempt holds what it wants = %v, want %v", x, err, rc.want)
	}
	held := map[string]bool{}
	for id, st := range e.partsOf(x) {
		if st == "pending" {
			held[id] = true
		}
	}
	if len(held) == 0 {
		t.Fatal("no part of the late attempt is pending when the retry answered")
	}

	close(l.release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the late attempt did not answer within 10s of its stage landing")
	}
	late.Close()
	if _, err := e.inv.Confirm(e.ctx, x); err == nil {
		problems = e.checkConfirmed("b", "t", rc.loaded, x)
	}
	for id, st := range e.partsOf(x) {
		if held[id] && st != "cancelled" {
			problems = append(problems, fmt.Sprintf("part %s, held when a Reserve of %s was refused with %v, ended %s", id, x, rc.want, st))
		}
	}
	return problems
}

// TestStagedLateStageAfterInsufficientStock: a Reserve answered
// insufficient stock must not end up reserved (and confirmable) by the
// units whose hold made it answer so.
func TestStagedLateStageAfterInsufficientStock(t *testing.T) {
	for _, p := range lateStageAfterRefusal(t, shortByHold, "") {
		t.Error(p)
	}
}

// TestStagedLateStageAfterLimitRefusal: nor a Reserve answered limit
// exceeded by the quota its late attempt holds (the retry's round takes
// nothing: without the fence of limitMayBeOwn it withdrew its stage and
// the late stage landed).
func TestStagedLateStageAfterLimitRefusal(t *testing.T) {
	for _, p := range lateStageAfterRefusal(t, limitByHold, "") {
		t.Error(p)
	}
}

// TestSpreadLimitRefusalFencesLateStage: nor a Reserve over two routes
// refused by its reads (soldout.go) for the quota its late attempt holds:
// the refusal's fence makes the late stage roll back.
func TestSpreadLimitRefusalFencesLateStage(t *testing.T) {
	for _, p := range lateStageAfterRefusal(t, spreadLimitByHold, "") {
		t.Error(p)
	}
}

// TestMutationFenceSkipConfirmsRefusedHold: without the fence
// (MutationFenceSkip) the late stage lands and the held units end
// confirmed.
func TestMutationFenceSkipConfirmsRefusedHold(t *testing.T) {
	if p := lateStageAfterRefusal(t, spreadLimitByHold, MutationFenceSkip); len(p) == 0 {
		t.Error("with MutationFenceSkip the refused hold did not end reserved")
	}
}

// TestMutationStageTakeoverConfirmsRefusedHold: with the mutation the
// late stage takes over the failed record and the held units end
// confirmed.
func TestMutationStageTakeoverConfirmsRefusedHold(t *testing.T) {
	if p := lateStageAfterRefusal(t, shortByHold, MutationStageTakeover); len(p) == 0 {
		t.Error("with MutationStageTakeover the refused hold did not end reserved")
	}
}

// stagedDeadlines reserves stagedItems with every stage and take delayed
// by 100ms and returns, per part, how far its deadline (the node's
// 'deadline' field) is after the instance's clock when its call was sent
// plus ttl and partGrace (negative: the deadline was computed before the
// call was sent, i.e. from the instance's clock).
func stagedDeadlines(t *testing.T, mutate bool) map[string]time.Duration {
	e := newStagedEnv(t)
	x := e.awayOrder("dl")
	l := newLateStage(x)
	l.hold, l.delay = false, 100*time.Millisecond
	if mutate {
		l.mutation = MutationStageTakeover
	}
	const ttl = time.Minute
	if _, err := e.lateInstance(l).Reserve(e.ctx, x, stagedItems(), "", ttl); err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Duration{}
	for name, c := range e.clients {
		keys, _ := c.Keys(e.ctx, partKey(x+"|*")).Result()
		for _, k := range keys {
			id := strings.TrimPrefix(k, partKeyPrefix)
			dl, err := strconv.ParseInt(partFieldsOn(t, e.ctx, c, id)["deadline"], 10, 64)
			if err != nil {
				t.Fatalf("part %s on %s: deadline: %v", id, name, err)
			}
			sent, ok := l.sent[id]
			if !ok {
				t.Fatalf("part %s on %s was not sent through the faults", id, name)
			}
			out[name+"/"+id] = time.UnixMilli(dl).Sub(time.UnixMilli(sent.Add(ttl + partGrace).UnixMilli()))
		}
	}
	if len(out) != 3 {
		t.Fatalf("parts %v, want one per item", out)
	}
	return out
}

// TestStagedPartDeadlinesFromNodeClock: a one-round attempt's parts come
// due by the clock of the node that holds them (now + ttl + partGrace when
// the script runs), not by a deadline the instance computed before its
// calls were sent, on the home node (the stage) and on the others (the
// takes).
func TestStagedPartDeadlinesFromNodeClock(t *testing.T) {
	for part, d := range stagedDeadlines(t, false) {
		if d < 0 {
			t.Errorf("part %s is due %v before its node's clock + ttl + grace when its call was sent", part, -d)
		}
	}
}

// TestMutationStageTakeoverInstanceDeadlines: with the mutation the
// deadlines are the instance's again (computed before the delayed calls).
func TestMutationStageTakeoverInstanceDeadlines(t *testing.T) {
	early := 0
	for _, d := range stagedDeadlines(t, true) {
		if d < 0 {
			early++
		}
	}
	if early != 3 {
		t.Errorf("with MutationStageTakeover %d of 3 parts are due before the node's clock + ttl + grace, want all", early)
	}
}

// TestStagedLateStageOverOwnFailure: an order without a record whose
// attempt's stage is later than its parts' deadline. The reconciler finds
// the due part, no record, and records the attempt failed under its token
// (orderScript's expire); the stage then finds that record. The attempt
// knows its outcome (failed, its parts cancelled): it takes the general
// path and reserves, instead of answering "outcome unknown".
func TestStagedLateStageOverOwnFailure(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 2, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("own")
	l := newLateStage(x)
	late := e.lateInstance(l)
	done := make(chan error, 1)
	go func() {
		_, err := late.Reserve(e.ctx, x, items, "", 100*time.Millisecond)
		done <- err
	}()
	e.wait(l.held, "the late attempt's stage being held")
	e.wait(l.taken, "the late attempt's take")
	for _, r := range e.expireOrder(x) {
		if r != Cancelled {
			t.Fatalf("the reconciler resolved the late attempt's part: %s, want cancelled", r)
		}
	}
	e.verify(x, "failed")
	close(l.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the late attempt, failed by the reconciler before its stage landed, answered %v; want it reserved by the general path", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the late attempt did not answer within 10s of its stage landing")
	}
	e.verify(x, "reserved", "cancelled") // cancelled: its 100ms ran out already
	if p := e.checkConfirmed("b", "t", 2); len(p) > 0 {
		t.Error(p)
	}
}

// heldAttempt is an attempt of one order on a lateInstance whose take has
// landed and whose stage is held back (startHeld).
type heldAttempt struct {
	e    *stagedEnv
	l    *lateStage
	inv  *Inventory
	done chan error
}

// startHeld starts an attempt of order (items, user, ttl) on a
// lateInstance and returns once its take landed and its stage is held.
func (e *stagedEnv) startHeld(order string, items []Item, user string, ttl time.Duration) *heldAttempt {
	e.t.Helper()
	a := &heldAttempt{e: e, l: newLateStage(order), done: make(chan error, 1)}
	a.inv = e.lateInstance(a.l)
	go func() {
		_, err := a.inv.Reserve(e.ctx, order, items, user, ttl)
		a.done <- err
	}()
	e.wait(a.l.held, "the late attempt's stage being held")
	e.wait(a.l.taken, "the late attempt's take")
	return a
}

// land lets the held stage land and returns the attempt's answer, once
// its instance closed (its background commit, if any, has landed).
func (a *heldAttempt) land() error {
	a.e.t.Helper()
	close(a.l.release)
	var err error
	select {
	case err = <-a.done:
	case <-time.After(10 * time.Second):
		a.e.t.Fatal("the late attempt did not answer within 10s of its stage landing")
	}
	a.inv.Close()
	return err
}
