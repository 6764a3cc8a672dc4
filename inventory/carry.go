package inventory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardis/shardis/node"
)

// Carried commits: a one-round reservation's commit rides the next write
// group sent to its home node instead of a script call of its own.
//
// The commit (orderOp commit, staged_reserve.go commitStaged) only saves
// work: a staging record whose parts are all taken is reserved whoever
// meets it next (resolveStaged), and the commit op changes nothing but a
// staging record of its token. So a commit may land late or not at all,
// and the protocol already allows both (a commit can be delayed by the
// network past any reader, or lost with its process). What it costs when
// sent by itself is a script call per few orders on the home node, and on
// the client a goroutine, a timer and a call per order.
//
// States of a commit (a buffered one counts as the inventory's background
// work, which Close waits for):
//
//	buffered ──a write group on its home node, same epoch token──▶ carried ──the group changed the record──▶ done
//	   │                                                             └──left it as it was, failed, refused──▶ sent by itself
//	   └──no group under way or waiting on its home node CarryWait after it, or none that carried it within
//	      ten times CarryWait of it, or Close──▶ sent by itself
//
// On a busy node the wait is each commit's own, counted from when it was
// buffered: a buffer that groups keep taking from but never empty, as
// under a steady load, sends by itself only what waited its time out, not
// whatever it holds once its first commit did (that sent 6 to 10 % of a
// 3-item load's commits by themselves, a few each time, however new).
//
// "Left it as it was": not the exact staging record the order's stage
// wrote (its value, which the client knows but for created, which the
// stage's reply gives: stagedCommitValues). "Refused": a node out of memory refuses a reserve group
// whole. "Sent by itself" is the commit op (orderOp commit, grouped with
// the node's other order ops), which decides what any record means and
// runs on a node out of memory too.
//
// Why every interleaving is safe: the group script applies a carried
// commit with order_commit_exact before the group's calls: it writes the
// record the commit op's own fast path (order_commit_staged) writes for
// that staging record (TestCommitExactAsSpliced), under a narrower guard
// (that exact value, where the commit op takes any staging record of the
// commit's token in the packed layout): the same as that commit sent by
// itself, arriving just before the group, which is a time the commit
// could have arrived at anyway; a record it does not recognise is left to
// the commit op, sent by itself. The group's stamp check covers it (a group at another epoch
// token never carries it: takeCarried matches the token it was made under). A
// commit sent by itself after it was carried (the group's reply was lost)
// finds the record reserved and changes nothing, as a commit delivered
// twice by the network would.
//
// Each commit carried saves its own script call; a group carries at most
// inventory.group_commit of them, so its script stays bounded.

// defaultCarryWait is Options.CarryWait's default: about two groups' round
// trips on a busy node, short enough that a reader rarely meets a
// commit still waiting.
const defaultCarryWait = 2 * time.Millisecond

// carriedCommit is one buffered commit of a staged order.
type carriedCommit struct {
	ctx     context.Context // the committing caller's, without its cancellation, with its pinned view (faults attribute a commit sent by itself to it; sendCommits)
	home    *node.Node
	orderID string
	token   string // the attempt's
	parts   string // encodeOrderParts of the parts taken
	// what a carried commit sends (stagedCommitValues): the staging
	// record's value, the reserved record's up to reserved_at, and created
	staged, prefix, created string
	epoch                   string    // the topology epoch token the order was placed under
	at                      time.Time // when it was buffered (carry)
}

// carryBuf is one node's buffered commits.
type carryBuf struct {
	mu      sync.Mutex // guards the fields below, and writes of size
	commits []carriedCommit
	armed   bool         // timer will send what is left by itself
	timer   *time.Timer  // the latest armCarry's; Close stops it
	size    atomic.Int32 // len(commits): a group finds an empty buffer without the lock
}

// carries holds the carry buffers, one per node, made on first use. The
// zero value is ready.
type carries struct {
	m sync.Map // *node.Node → *carryBuf
}

func (c *carries) buf(n *node.Node) *carryBuf {
	if b, ok := c.m.Load(n); ok {
		return b.(*carryBuf)
	}
	b, _ := c.m.LoadOrStore(n, &carryBuf{})
	return b.(*carryBuf)
}

// carry buffers c on its home node and reports true, or reports false
// once Close was called (the caller sends it by itself).
func (inv *Inventory) carry(c carriedCommit) bool {
	if inv.opts.CarryWait < 0 {
		return false
	}
	inv.bg.Lock()
	defer inv.bg.Unlock()
	if inv.bg.closed {
		return false
	}
	inv.bg.wg.Add(1) // done once applied or sent by itself
	c.at = time.Now()
	b := inv.carries.buf(c.home)
	b.mu.Lock()
	b.commits = append(b.commits, c)
	b.size.Store(int32(len(b.commits)))
	arm := !b.armed
	b.armed = true
	b.mu.Unlock()
	if arm {
		inv.armCarry(c.home, b)
	}
	return true
}

// armCarry, after CarryWait, sends by itself what is left in n's buffer
// when no group is under way or waiting on n (none is coming to carry
// it), and otherwise each commit that has waited ten times CarryWait
// since it was buffered, and arms again while commits are left. A buffer
// flushed meanwhile (Close) is not armed again.
func (inv *Inventory) armCarry(n *node.Node, b *carryBuf) {
	wait := inv.opts.CarryWait
	b.mu.Lock() // held until b.timer is set: a timer that fires at once re-arms after
	defer b.mu.Unlock()
	if !b.armed {
		return
	}
	b.timer = time.AfterFunc(wait, func() {
		busy := inv.groups.queue(n).busy()
		b.mu.Lock()
		var left []carriedCommit
		if busy {
			cutoff := time.Now().Add(-10 * wait)
			left = b.takeIf(len(b.commits), func(c *carriedCommit) bool { return c.at.Before(cutoff) })
		} else {
			left = b.takeAll()
		}
		again := b.armed && len(b.commits) > 0
		if !again {
			b.armed = false
		}
		b.mu.Unlock()
		if again {
			inv.armCarry(n, b)
		}
		inv.sendCommits(left)
	})
}

// takeIf takes out of b, oldest first, up to limit commits for which
// want holds, keeping the others in their order. Called with b.mu held.
func (b *carryBuf) takeIf(limit int, want func(c *carriedCommit) bool) []carriedCommit {
	var out []carriedCommit
	kept := b.commits[:0]
	for i := range b.commits {
		c := b.commits[i] // read before kept's writes reach i
		if len(out) < limit && want(&b.commits[i]) {
			if out == nil {
				out = make([]carriedCommit, 0, min(limit, len(b.commits)))
			}
			out = append(out, c)
		} else {
			kept = append(kept, c)
		}
	}
	clear(b.commits[len(kept):])
	b.commits = kept
	b.size.Store(int32(len(kept)))
	return out
}

// takeAll empties b and disarms it, returning what it held. Called with
// b.mu held.
func (b *carryBuf) takeAll() []carriedCommit {
	left := b.commits
	b.commits, b.armed = nil, false
	b.size.Store(0)
	return left
}

// takeCarried takes up to limit of n's buffered commits made under epoch
// token token, oldest first, for a write group to carry.
func (inv *Inventory) takeCarried(n *node.Node, token string, limit int) []carriedCommit {
	b, ok := inv.carries.m.Load(n)
	if !ok {
		return nil
	}
	buf := b.(*carryBuf)
	if buf.size.Load() == 0 {
		return nil
	}
	buf.mu.Lock()
	defer buf.mu.Unlock()
	return buf.takeIf(limit, func(c *carriedCommit) bool { return c.epoch == token })
}

// carriedDone settles a group's carried commits: those it applied are
// done, the others (or all, when the group failed) are sent by themselves.
func (inv *Inventory) carriedDone(commits []carriedCommit, applied []bool, err error) {
	var again []carriedCommit
	for i, c := range commits {
		if err == nil && applied[i] {
			inv.stats.carried.Add(1)
			inv.bg.wg.Done()
			continue
		}
		again = append(again, c)
	}
	if len(again) > 0 {
		inv.sendCommits(again)
	}
}

// sendCommits sends each commit by itself (the commit op, grouped with
// the other order ops on its node), each on a goroutine of its own with
// its caller's values and commitTimeout, and marks it done: Close waits
// for them through the inventory's background work, no caller here does.
//
// The caller's values include the view its request pinned (served.go,
// pin), so a commit sent by itself, however late, runs under the
// topology its order was placed in, on the home node of that view, with
// that view's epoch token: a node that a later topology change reached
// refuses it (the stamp check's SHARDIS_EPOCH) before any write, and the
// order's next reader decides the staging record (resolveStaged), as
// for a commit lost with its process. It never runs under a newer view,
// whose home for the order may be another node.
func (inv *Inventory) sendCommits(commits []carriedCommit) {
	for _, c := range commits {
		go func() {
			defer inv.bg.wg.Done()
			ctx, cancel := context.WithTimeout(c.ctx, commitTimeout)
			defer cancel()
			inv.sendCommit(ctx, c)
		}()
	}
}

// sendCommit sends c by itself: the order script's commit op.
func (inv *Inventory) sendCommit(ctx context.Context, c carriedCommit) {
	if _, err := inv.orderOp(ctx, c.home, c.orderID, opCommit, c.token, c.parts, seconds(inv.cfg.Retention)); err != nil {
		inv.log.Debug("staged commit did not land; the next reader of the order commits it", "order", c.orderID, "err", err)
	}
}

// flushCarried sends every buffered commit by itself and stops the
// buffers' timers (Close: nothing is buffered after it).
func (inv *Inventory) flushCarried() {
	var left []carriedCommit
	inv.carries.m.Range(func(_, v any) bool {
		b := v.(*carryBuf)
		b.mu.Lock()
		left = append(left, b.takeAll()...)
		if b.timer != nil {
			b.timer.Stop()
		}
		b.mu.Unlock()
		return true
	})
	inv.sendCommits(left)
}
