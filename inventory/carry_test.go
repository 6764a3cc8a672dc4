package inventory

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/node"
)

// Carried commits (carry.go) against real nodes: a one-round
// reservation's commit waits in its home node's buffer, the next write
// group on that node applies it, and whatever a group leaves as it was,
// fails to run, or no group takes, is sent by itself; Close sends what
// waits.

// carryEnv is a staged env whose commits wait for a group up to wait.
func carryEnv(t *testing.T, wait time.Duration) *stagedEnv {
	return newStagedEnvWith(t, Options{CarryWait: wait})
}

// reserveBuffered reserves id in one round and returns its home node and
// the commit waiting in that node's buffer.
func (e *stagedEnv) reserveBuffered(id string) (*node.Node, carriedCommit) {
	e.t.Helper()
	if _, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", time.Minute); err != nil {
		e.t.Fatal(err)
	}
	home, err := e.inv.orderHome(e.inv.topo.cur.Load(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	b := e.inv.carries.buf(home)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.commits) != 1 || b.commits[0].orderID != id {
		e.t.Fatalf("home %s's carry buffer holds %d commits, want order %s's alone", home.Name(), len(b.commits), id)
	}
	if st := orderFieldsOn(e.t, e.ctx, e.clients[home.Name()], id)["status"]; st != "staging" {
		e.t.Fatalf("order %s is %s before its commit, want staging", id, st)
	}
	return home, b.commits[0]
}

// writeGroup sends one call of a grouped write script to n: a carrier.
func (e *stagedEnv) writeGroup(n *node.Node) error {
	_, err := e.inv.run(e.ctx, n, groupTestScript, []string{"carry-test"}, 1)
	return err
}

// wantCarried checks how many commits groups applied (Stats.CarriedCommits).
func (e *stagedEnv) wantCarried(want int64, why string) {
	e.t.Helper()
	if got := e.inv.Stats().CarriedCommits; got != want {
		e.t.Errorf("%d commits carried, want %d%s", got, want, why)
	}
}

func TestCommitRidesTheNextWriteGroup(t *testing.T) {
	e := carryEnv(t, time.Minute)
	home, _ := e.reserveBuffered("o1")
	if err := e.writeGroup(home); err != nil {
		t.Fatal(err)
	}
	e.wantCarried(1, "")
	if n := len(e.inv.carries.buf(home).commits); n != 0 {
		t.Errorf("%d commits still buffered after a group, want 0", n)
	}
	e.verify("o1", "reserved") // before any Close: the group wrote it
	if _, err := e.inv.Confirm(e.ctx, "o1"); err != nil {
		t.Fatal(err)
	}
	e.verify("o1", "confirmed")
	e.stock()
}

func TestCarriedCommitLeftAsItWasIsSentByItself(t *testing.T) {
	e := carryEnv(t, time.Minute)
	home, _ := e.reserveBuffered("o1")
	// The commit's fast path applies to the packed layout only: in the
	// hash layout of the releases before, the group leaves the record as
	// it was and the commit op, sent by itself, decodes and commits it.
	if n := orderRecordsToHashLayout(t, e.ctx, e.clients); n == 0 {
		t.Fatal("no order record rewritten in the hash layout")
	}
	if err := e.writeGroup(home); err != nil {
		t.Fatal(err)
	}
	e.inv.Close() // waits for the commit sent by itself
	e.wantCarried(0, " (the group left the record as it was)")
	e.verify("o1", "reserved")
}

func TestCarrierRefusedOutOfMemory(t *testing.T) {
	e := carryEnv(t, time.Minute)
	home, _ := e.reserveBuffered("o1")
	c := e.clients[home.Name()]
	if err := c.ConfigSet(e.ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	// A grow script's group is refused whole; the commit, sent by itself,
	// is a release that runs on a full node.
	if err := e.writeGroup(home); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("a group on a node out of memory: %v, want ErrOutOfMemory", err)
	}
	e.inv.Close()
	if err := c.ConfigSet(e.ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	e.wantCarried(0, "")
	e.verify("o1", "reserved")
}

func TestCommitSentByItselfWhenNoGroupComes(t *testing.T) {
	e := carryEnv(t, 0) // the default wait
	if _, err := e.inv.Reserve(e.ctx, "o1", stagedItems(), "", time.Minute); err != nil {
		t.Fatal(err)
	}
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), "o1")
	deadline := time.Now().Add(10 * time.Second)
	for orderFieldsOn(t, e.ctx, e.clients[home.Name()], "o1")["status"] != "reserved" {
		if time.Now().After(deadline) {
			t.Fatal("the commit of a lone order did not land in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.wantCarried(0, " (no group came)")
	e.verify("o1", "reserved")
}

// On a busy node each commit waits ten times CarryWait from when it was
// buffered, not from when its buffer was armed: a commit that waited its
// time out is sent by itself while a newer one stays for a group; once
// no group is under way or waiting, what is left is sent. (The buffer
// armed by the old commit used to send the new one with it.)
func TestBusyNodeSendsOnlyCommitsThatWaited(t *testing.T) {
	// the new commit is due 10×wait after it was buffered: a margin for a
	// busy machine's late timers before the first firing, which takes the
	// old one
	const wait = 500 * time.Millisecond
	e := carryEnv(t, wait)
	home, _ := e.reserveBuffered("o1")
	q := e.inv.groups.queue(home)
	setBusy := func(d int) {
		q.mu.Lock()
		q.inflight += d
		q.mu.Unlock()
	}
	setBusy(1) // a group under way on home, as far as the buffer's timer can tell
	busy := true
	defer func() {
		if busy {
			setBusy(-1)
		}
	}()
	b := e.inv.carries.buf(home)
	b.mu.Lock()
	b.commits[0].at = time.Now().Add(-10*wait + wait/2) // due at the timer's first firing
	fresh := b.commits[0]
	fresh.at = time.Now() // the same commit again, new: applied twice it changes nothing more
	// made under another epoch token, so no group carries it (the due
	// one's own, the order op's, would at once): it leaves the buffer
	// only by itself
	fresh.epoch = "0:another"
	b.commits = append(b.commits, fresh)
	b.size.Store(2)
	b.mu.Unlock()
	e.inv.bg.wg.Add(1) // as carry does for each commit it buffers

	// The first firing takes the due commit out and leaves the new one.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.commits)
		freshLeft := n > 0 && b.commits[0].at.Equal(fresh.at)
		b.mu.Unlock()
		if n < 2 {
			if n != 1 || !freshLeft {
				t.Fatalf("after the due commit was taken out, %d commits are buffered (the new one among them: %v), want the new one alone", n, freshLeft)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the commit that waited ten times CarryWait was not sent in 10s")
		}
		time.Sleep(time.Millisecond)
	}
	setBusy(-1) // no group under way: a later firing sends what is left
	busy = false
	for b.size.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the commit left on an idle node was not sent in 10s")
		}
		time.Sleep(time.Millisecond)
	}
	e.inv.Close() // waits for the sends
	e.verify("o1", "reserved")
	e.wantCarried(0, " (both were sent by themselves)")
}

func TestCloseSendsBufferedCommits(t *testing.T) {
	e := carryEnv(t, time.Minute)
	home, _ := e.reserveBuffered("o1")
	e.inv.Close()
	e.verify("o1", "reserved")
	b := e.inv.carries.buf(home)
	b.mu.Lock()
	armed := b.timer.Stop() // false: Close stopped it
	b.mu.Unlock()
	if armed {
		t.Error("the carry buffer's timer was still armed after Close")
	}
	// After Close a commit is sent at once, on the caller's path.
	if _, err := e.inv.Reserve(e.ctx, "o2", stagedItems(), "", time.Minute); err != nil {
		t.Fatal(err)
	}
	e.verify("o2", "reserved")
}

func TestCarryNever(t *testing.T) {
	e := carryEnv(t, -1)
	if _, err := e.inv.Reserve(e.ctx, "o1", stagedItems(), "", time.Minute); err != nil {
		t.Fatal(err)
	}
	e.inv.Close()
	e.verify("o1", "reserved")
	e.wantCarried(0, " (CarryWait < 0)")
}

// takeCarried hands a group the oldest commits of its epoch token, at
// most max, and keeps the others in order.
func TestTakeCarriedMatchesTheEpoch(t *testing.T) {
	inv := &Inventory{}
	var n *node.Node
	b := inv.carries.buf(n)
	for i, ep := range []string{"1:a", "2:b", "1:a", "1:a", "2:b"} {
		b.commits = append(b.commits, carriedCommit{orderID: string(rune('p' + i)), epoch: ep})
	}
	b.size.Store(int32(len(b.commits)))
	ids := func(cs []carriedCommit) string {
		s := ""
		for _, c := range cs {
			s += c.orderID
		}
		return s
	}
	if got := ids(inv.takeCarried(n, "1:a", 2)); got != "pr" {
		t.Errorf("took %q, want pr", got)
	}
	if got := ids(b.commits); got != "qst" {
		t.Errorf("left %q, want qst", got)
	}
	if got := ids(inv.takeCarried(n, "3:c", 5)); got != "" {
		t.Errorf("took %q at another epoch, want none", got)
	}
	if got := ids(inv.takeCarried(n, "2:b", 5)); got != "qt" {
		t.Errorf("took %q, want qt", got)
	}
	if got := ids(b.commits); got != "s" {
		t.Errorf("left %q, want s", got)
	}
}

func TestCarryWaitOptionOutOfRange(t *testing.T) {
	e := newGroupEnv(t, 32)
	_, err := New(e.inv.r, Options{CarryWait: 2 * time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Options.CarryWait (or inventory.carry_wait) is 2m0s") {
		t.Errorf("CarryWait 2m: err %v, want ErrInvalid naming Options.CarryWait", err)
	}
}

// Options.CarryWait falls back to inventory.carry_wait, then to 2ms; a
// value of its own wins, and either above 1m is refused.
func TestCarryWaitFromConfig(t *testing.T) {
	tests := []struct {
		opt, cfg, want time.Duration
		bad            bool
	}{
		{0, 0, defaultCarryWait, false},
		{0, -1, -1, false},
		{0, 7 * time.Millisecond, 7 * time.Millisecond, false},
		{5 * time.Millisecond, -1, 5 * time.Millisecond, false},
		{-1, 7 * time.Millisecond, -1, false},
		{0, 2 * time.Minute, 0, true},
		{2 * time.Minute, 0, 0, true},
	}
	for _, tt := range tests {
		o := Options{CarryWait: tt.opt}
		err := o.fill(config.Inventory{CarryWait: tt.cfg})
		if tt.bad {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "inventory.carry_wait") {
				t.Errorf("option %v, config %v: err %v, want ErrInvalid naming inventory.carry_wait", tt.opt, tt.cfg, err)
			}
			continue
		}
		if err != nil || o.CarryWait != tt.want {
			t.Errorf("option %v, config %v: CarryWait %v, err %v; want %v", tt.opt, tt.cfg, o.CarryWait, err, tt.want)
		}
	}
}

// A group whose reply is lost after it applied a commit resends it by
// itself: the commit op finds the record reserved and changes nothing.
func TestCarriedCommitResentAfterLostReply(t *testing.T) {
	e := carryEnv(t, time.Minute)
	home, _ := e.reserveBuffered("o1")
	taken := e.inv.takeCarried(home, e.inv.topo.cur.Load().token, 1)
	if len(taken) != 1 {
		t.Fatalf("took %d commits, want 1", len(taken))
	}
	e.inv.sendCommit(e.ctx, taken[0]) // as the group applied it
	before := orderFieldsOn(t, e.ctx, e.clients[home.Name()], "o1")
	e.inv.carriedDone(taken, nil, errors.New("the group's reply was lost"))
	e.inv.Close() // waits for the resend
	after := orderFieldsOn(t, e.ctx, e.clients[home.Name()], "o1")
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("the resent commit changed the record:\n before %v\n after  %v", before, after)
	}
	e.wantCarried(0, "")
	e.verify("o1", "reserved")
	e.stock()
}
