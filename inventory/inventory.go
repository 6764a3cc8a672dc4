// Package inventory reserves stock across standalone Redis nodes.
//
// A SKU belongs to a route of the inventory server key; its stock is split
// over the route's nodes so a hot SKU spreads over several Redis processes.
// Each node keeps counters per SKU (available, reserved, confirmed; and
// loaded, with the per-user limit beside them: keys.go StockKey),
// changed only by Lua scripts that also keep the state of every part (one
// deduction on one node) in the same atomic step: the part record is the
// TCC fence. Every reserve appends the part to a redo log (queues with
// gap-free offsets, each kept in sorted-set segments of 32 offsets:
// redolog.go) that a database sync consumer can replay.
//
// An order's outcome is decided by its order record on the order's home
// node (the node an id minted by NewOrderID names, else consistent
// hashing over all nodes of the inventory server: homes.go): begin
// (or stage), commit, confirm, cancel and expiry are compare-and-set steps
// on that one key, and parts follow the decision (the states of both and
// the one transition table: state.go). Reserve takes one of
// three paths: one script on the home node when it can meet the whole
// order (local.go), one round over the items' first nodes with a staged
// record (staged.go, whose comment holds the protocol's states and safety
// rule), or the general begin → take → commit (order_ops.go, take.go).
// Concurrent calls of the reserve, order and settle scripts on one node
// share one script call (group commit, group.go: the calls run one after
// the other inside it, each deciding on its own). Parts that cannot be settled at once
// (their node is down) go to a [Deferrer]; every pending part carries a
// deadline, so the reconciler in package rollback settles whatever is left
// by the decision recorded for its order. Nothing is lost when a process
// dies at any point: the worst case is stock held until the reservation
// deadline.
//
// Records an earlier release wrote (hash part records, an order's JSON
// part list, pending-index members by part id, the redo log's older
// segments) are read, settled, expired and moved as today's; a
// writer writes today's layout of the whole record it read (partrec.go,
// parts.go, redolog.go, [PendingKey]). A record re-created by hand is
// read the same way, and what it leaves out is never read as a state: a
// stock part's pending-index place is found by the redo entry there when
// its record names none ([PendingKey]).
//
// A caller that gives up (its context cancelled, its deadline passed) ends
// its own wait, never a step that must follow one that may have landed:
// the commit of a reserve, the roll-back of an attempt's parts, a staged
// record's decision once its probe has a verdict, with the cancels after
// a failure (order_ops.go, resolveStaged), and a Confirm's or Cancel's
// decision once sent, with the settles after it (order.go, decideOn), run
// under its context's values without its cancellation, within
// commitTimeout (2s) each (detached); a settle that does not land then
// goes to the Deferrer. A step cut while
// under way has an unknown outcome, and the error says so (it wraps the
// context's error): retry with the same order id. Only what a crash would
// leave is left for the deadline.
package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Limits on requests. Larger inputs are refused with [ErrInvalid].
const (
	// MaxIDLen is the longest order, SKU, route or user id, in bytes.
	MaxIDLen = 128
	// MaxItems is the most items one order may hold.
	MaxItems = 100
	// MaxQuantity is the largest quantity of one item or one LoadStock.
	MaxQuantity = 1_000_000_000
)

var (
	// ErrInvalid is wrapped by errors for malformed requests; the message
	// names the field.
	ErrInvalid = errors.New("invalid argument")
	// ErrInsufficientStock is wrapped when an item cannot be met; the
	// message names the SKU.
	ErrInsufficientStock = errors.New("insufficient stock")
	// ErrUnknownSKU is wrapped when an order names a SKU whose stock was
	// never loaded on its route (LoadStock never added units of it to any
	// node of the route): a typo or a SKU not yet stocked, not a sold-out
	// one. The message names the SKU and the route. Told apart by the
	// read-only check (soldout.go), which writes nothing; when that check
	// cannot run (a node of the route unusable, a topology change) the
	// order is refused with ErrInsufficientStock as before. The check runs
	// before any write for an order a refusal marked short or whose items
	// are all on its home; an order placed in one round across nodes may
	// have taken its other items first and given them back (a failed
	// record, its parts cancelled: refused attempts stay out of the
	// system of record, pgsync) before the check names the SKU.
	ErrUnknownSKU = errors.New("sku never loaded")
	// ErrLimitExceeded is wrapped when an order would take a user past the
	// SKU's per-user limit, and when an order without a user includes a
	// SKU with a per-user limit (the message says it needs user_id). Before,
	// the latter wrapped ErrInvalid, which the service answered
	// invalid_argument though the same request is valid for a SKU without
	// a limit: it answers failed_precondition for both.
	ErrLimitExceeded = errors.New("per-user limit exceeded")
	// ErrUnavailable is router.ErrUnavailable: no node could serve (a node
	// needed is down, answered with an error, or timed out).
	ErrUnavailable = router.ErrUnavailable
	// ErrNotFound is wrapped by Confirm of an order that holds no
	// reservation: never reserved, or its last Reserve attempt failed and
	// took nothing.
	ErrNotFound = errors.New("order not reserved")
	// ErrCancelled is wrapped when an order id was cancelled (or tombstoned
	// by a cancel that came before any reserve): it cannot be reserved or
	// confirmed.
	ErrCancelled = errors.New("order cancelled")
	// ErrExpired is wrapped by Confirm of an order whose reservation ran
	// past its deadline (its stock was or will be returned).
	ErrExpired = errors.New("reservation expired")
	// ErrConfirmed is wrapped by Cancel of a confirmed order.
	ErrConfirmed = errors.New("order already confirmed")
	// ErrOrderMismatch is wrapped by Reserve of an order id already used
	// with other items or another user.
	ErrOrderMismatch = errors.New("order id reused with different items")
	// ErrInProgress is wrapped by Confirm of an order whose Reserve is
	// still running. Retry later.
	ErrInProgress = errors.New("reservation in progress")
	// ErrPartlyApplied is wrapped, with ErrUnavailable, by the error of a
	// LoadStock that failed on some node of the route after another added
	// its share (or may have: an outcome unknown). A retry of the same
	// call adds again where units were added: read GetStock and load what
	// is missing. The message names the nodes that added their share and
	// the ones that failed. It is wrapped too, with the read's error, by
	// that of a LoadStock whose every share was added but whose read of
	// the stock afterwards failed (the message says so).
	ErrPartlyApplied = errors.New("partly applied")
	// ErrCorrupt is wrapped when a node holds a value the scripts cannot
	// read (a counter that is not an integer, a key of the wrong type, a
	// part record whose state code is none: SHARDIS_CORRUPT and WRONGTYPE
	// replies; a part record's error names its key): nothing was changed
	// (but for a Confirm or Cancel whose order record's parts list was
	// found unreadable after the decision was written: the message names
	// the record's status; the decision stands, and the reconciler sets
	// the order's other parts aside at their deadlines until the record
	// is repaired), and a retry meets it again until the value is
	// repaired (the reconciler sets such a part aside, [Unsettleable]). A
	// record that exists but cannot be read is never read as missing. The
	// reads that go on past one such record report it instead of failing
	// ([RedoQueueRead].Problem, [PartSnapshot].Problem, [StuckPart]). The decoders
	// (ParseStockKey, DecodePart …) wrap it for what they reject. A reply
	// of the wrong shape is not this but [ErrMalformedReply] (outcome
	// unknown).
	ErrCorrupt = errors.New("corrupt value on node")
	// ErrStockMissing is wrapped when a SKU's stock hash does not exist on
	// a node while parts there still hold units of it (the hash was
	// deleted): a settle of such a part is refused and changes nothing
	// (the reconciler sets the part aside, see [StuckPart]), and GetStock
	// reports it in the node's [NodeStock.Err]. Restore the hash's
	// counters by hand, then retry the parts (`shardis parts retry`).
	ErrStockMissing = errors.New("stock missing on node")
	// ErrDataLoss is wrapped by Confirm when the order is confirmed but a
	// part it recorded no longer exists on its node before the part's
	// retention could have removed it (its deadline plus 1s plus
	// inventory.retention): that node lost data (restarted empty or from
	// an older snapshot). The order stays confirmed; the error names the
	// parts.
	ErrDataLoss = errors.New("data loss")
	// ErrTopology is wrapped (together with [ErrUnavailable]) when a node
	// is at another topology epoch than this instance: the instance runs
	// with an older or newer configuration than the nodes and must not act
	// on them. Nothing was changed.
	ErrTopology = errors.New("topology epoch mismatch")
	// ErrNotApplied is wrapped (together with [ErrInvalid]) when a request
	// names a route that this instance's configuration has but the
	// topology applied on the nodes does not: it is served once
	// `shardis topology apply` has run (the service answers it
	// failed_precondition: a state, not a bad argument). Nothing was
	// changed.
	ErrNotApplied = errors.New("route not in the applied topology")
)

// Options configures [New]. The zero value works.
type Options struct {
	// Deferrer receives settle work for parts whose node could not be
	// reached. Package rollback's Queue is the usual one.
	// default: none (the reconciler still settles such parts after their
	// deadline)
	Deferrer Deferrer
	// AttemptLease is how long a Reserve attempt owns its order before
	// another attempt may take the order over.
	// default: inventory.attempt_lease from the router's configuration
	AttemptLease time.Duration
	// GroupCommit is the most calls of one grouped script one node runs
	// as one script call (group.go); 1 sends every call alone (a
	// one-round reservation's commit still rides another call: see
	// CarryWait); 0..1000, anything else makes New fail.
	// default: inventory.group_commit from the router's configuration (32)
	GroupCommit int
	// CarryWait is how long a one-round reservation's commit waits in its
	// home node's buffer for a write group to carry it (carry.go): ten
	// times CarryWait from when it was buffered while the node has calls
	// under way or waiting, else CarryWait or less; then it is sent by
	// itself.
	// Negative sends every commit by itself; above 1m makes New fail.
	// default: inventory.carry_wait from the router's configuration (2ms)
	CarryWait time.Duration
	// Logger receives rollback and corruption reports.
	// default: slog.Default()
	Logger *slog.Logger
	// Faults injects faults into every script call and crash point
	// (faults.go): for tests and the schedule explorer only.
	// default: none
	Faults Faults
}

// Deferrer takes settle work that could not be done now. Enqueue must not
// block for long; it is called from request paths.
type Deferrer interface {
	// Enqueue takes s, to be settled later (SettleNow); it must not block
	// for long.
	Enqueue(Settle)
}

// Settle is deferred work: settle these parts of one order on one node.
type Settle struct {
	Node    string   // the configured name of the node holding the parts
	Action  Action   // Confirm or Cancel
	OrderID string   // the order the parts belong to
	PartIDs []string // the ids of the parts to settle, all on Node
	// Members, nil or one per PartIDs entry, is each part's member of
	// Node's [PendingKey] ([PendingMember]: "queue:offset" for a stock
	// part whose redo-log place is known), "" where it is not known. A
	// cancel of a part whose record is gone writes a tombstone (a take
	// still on its way takes nothing) only when the node lists the part
	// neither by the member given here (the redo-log entry there checked
	// to name the part) nor by its id, pending or set aside; a part it
	// lists had its record lost while pending: it answers "lost" and
	// writes nothing (see [Inventory.SettleNow]). Without its member, a
	// stock part listed by its place alone is not seen listed and gets
	// its tombstone, which the node's readers that meet the part listed
	// read as its lost record (the expiry sets it aside once due): a
	// caller that knows the place passes it, so the answer is "lost" at
	// once, and a [Deferrer] keeps it.
	Members []string
}

// Action is what a settle does to pending parts.
type Action string

const (
	// Confirm moves pending parts to confirmed.
	Confirm Action = "confirm"
	// Cancel moves pending parts to cancelled and returns their stock.
	Cancel Action = "cancel"
)

// Inventory is the inventory service over a router. It is safe for
// concurrent use and holds no state of its own beyond configuration: every
// instance over the same nodes sees the same orders.
type Inventory struct {
	stats counters
	r     *router.Router
	cfg   config.Inventory
	opts  Options
	log   *slog.Logger
	// nodes are the inventory server's nodes in this instance's
	// configuration, sorted by name; cfgSets its routes' sets. Where
	// orders and stock live comes from the applied topology instead: the
	// view's placement (epoch.go, served.go).
	nodes   []*node.Node
	cfgSets map[string]*router.Set
	// topo is the topology epoch this instance acts at (epoch.go).
	topo topoState
	// bg tracks one-round reservations' commits (staged_reserve.go).
	bg background
	// groups queues the calls of grouped scripts (group.go).
	groups groups
	// workers runs the goroutines that start sends (workers.go).
	workers workers
	// carries buffers one-round reservations' commits for the next write
	// group on their home node (carry.go).
	carries carries
	// soldOut is the hint of SKUs seen short lately, limited that of SKUs
	// seen with a per-user limit (soldout.go).
	soldOut, limited skuHint
	// peeks queues refuseShort's reads per node (peekbatch.go).
	peeks peekQueues
	// sourceWarned is, per node name, when this instance last logged that
	// the node would not load or run a script's function (luafunc.go's
	// sourceSent): an *atomic.Int64 of unix nanoseconds.
	sourceWarned sync.Map
	// limitClock is this process's clock as limitVersion reads it
	// (time.Now; a test moves its own instance's to play one whose clock
	// runs ahead).
	limitClock func() time.Time
}

type atomicView = atomic.Pointer[view]

// New builds the inventory over r, using r.Config().Inventory. The
// inventory server key must be configured, and r must keep its nodes'
// data (router.Options.KeepData names it). With inventory.durability aof
// it fails when a node of the inventory reports a Redis older than 7.2
// (no WAITAOF), naming the node and its version. Call [Inventory.Close]
// before closing r: a one-round reservation's commit may still be running
// off its caller's path.
func New(r *router.Router, opts Options) (*Inventory, error) {
	return newInventory(r, opts, false)
}

// fill checks o and gives its zero fields their defaults (c: the
// router's inventory section); an out-of-range field is ErrInvalid
// naming it.
func (o *Options) fill(c config.Inventory) error {
	if o.AttemptLease <= 0 {
		o.AttemptLease = c.AttemptLease
	}
	if o.AttemptLease <= 0 {
		o.AttemptLease = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.GroupCommit < 0 || o.GroupCommit > 1000 {
		return fmt.Errorf("inventory: %w: Options.GroupCommit is %d, want 0 (the configured inventory.group_commit) to 1000", ErrInvalid, o.GroupCommit)
	}
	if o.GroupCommit == 0 {
		o.GroupCommit = c.GroupCommit
	}
	if o.GroupCommit == 0 {
		o.GroupCommit = 32
	}
	if o.CarryWait == 0 {
		o.CarryWait = c.CarryWait
	}
	if o.CarryWait > time.Minute {
		return fmt.Errorf("inventory: %w: Options.CarryWait (or inventory.carry_wait) is %v, want at most 1m (negative: commits are sent by themselves)", ErrInvalid, o.CarryWait)
	}
	if o.CarryWait == 0 {
		o.CarryWait = defaultCarryWait
	}
	return nil
}

// newInventory is New; with noInit the instance never initialises the
// nodes' topology records and reads them only when first used (the
// topology tool).
func newInventory(r *router.Router, opts Options, noInit bool) (*Inventory, error) {
	cfg := r.Config()
	srv, ok := cfg.Servers[cfg.Inventory.Server]
	if !ok {
		return nil, fmt.Errorf("inventory: server key %q (inventory.server) is not configured under servers", cfg.Inventory.Server)
	}
	for _, members := range srv.Routes {
		for _, m := range members {
			if !r.KeepsData(m) {
				return nil, fmt.Errorf("inventory: the router does not keep the data of node %s (server %q): build it with router.Options{KeepData: []string{%q}}, or a node that restarts empty is served as if nothing was lost",
					m, cfg.Inventory.Server, cfg.Inventory.Server)
			}
		}
	}
	if err := opts.fill(cfg.Inventory); err != nil {
		return nil, err
	}
	inv := &Inventory{r: r, cfg: cfg.Inventory, opts: opts, log: opts.Logger, cfgSets: map[string]*router.Set{}, limitClock: time.Now}
	inv.limited.ttl = limitHintTTL
	for route := range srv.Routes {
		set, err := r.Set(cfg.Inventory.Server, route)
		if err != nil {
			return nil, err
		}
		inv.cfgSets[route] = set
	}
	for _, name := range topology.Of(cfg).Nodes() {
		n, err := r.Node(name)
		if err != nil {
			return nil, err
		}
		inv.nodes = append(inv.nodes, n)
	}
	if err := checkAOFVersions(cfg.Inventory.Durability, inv.nodes); err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	inv.topo.self = topology.Of(cfg)
	inv.topo.noInit = noInit
	inv.topo.fp = inv.topo.self.Fingerprint()
	inv.topo.cur.Store(&view{notReady: errTopologyUnread})
	inv.topo.turn = make(chan struct{}, 1)
	if !noInit {
		ctx, cancel := context.WithTimeout(context.Background(), rereadNotReady)
		defer cancel()
		v := inv.resync(ctx, inv.topo.cur.Load())
		// A configuration that cannot serve the applied topology at all
		// is refused now, with the reason (served.go).
		var missing *MissingNodeError
		if errors.As(v.notReady, &missing) {
			return nil, fmt.Errorf("inventory: %w", v.notReady)
		}
	}
	return inv, nil
}

// usable reports whether the inventory may use n now: it admits commands,
// its maxmemory-policy cannot evict keys (inventory data must never be
// dropped by Redis; the node's settings are read at first contact and on
// every reconnect), and it can give the configured durability.
func (inv *Inventory) usable(n *node.Node) bool {
	if !n.Usable() || n.Evicts() {
		return false
	}
	_, old := inv.tooOld(n)
	return !old
}

// Unusable says why the inventory does not use n now, "" when it does:
// the node is down or its breaker is open, its maxmemory-policy can evict
// keys, or its Redis is too old for the configured durability. These are
// the nodes a call refuses, naming the same reason, in "no usable node"
// (LoadStock, Reserve); a readiness probe counts a node only when it is
// "" here and the node is enabled for the route ([node.Node.RouteEnabled]),
// since [node.Node.Usable] alone passes over the eviction policy and the
// Redis version.
func (inv *Inventory) Unusable(n *node.Node) string {
	if inv.usable(n) {
		return ""
	}
	return inv.unusableReason(n)
}

// unusableReason says why inv.usable(n) is false: its eviction policy,
// a Redis too old for the configured durability, down (with the probe's
// reason) or its breaker open.
func (inv *Inventory) unusableReason(n *node.Node) string {
	if s, _ := n.Settings(); s.Evicts() {
		return "maxmemory-policy " + s.MaxmemoryPolicy + " evicts keys: not used for inventory data (set noeviction)"
	}
	if why, old := inv.tooOld(n); old {
		return why
	}
	if n.State() != node.StateUp {
		if err := n.DownReason(); err != nil {
			return "down: " + err.Error()
		}
		return "down"
	}
	return "breaker open"
}

// unusableNodes says, for each node of set that is drained for the set's
// route or not usable, why ("n1: drained; n2: maxmemory-policy …"), in
// configuration order; nodes that are enabled and usable are left out.
func (inv *Inventory) unusableNodes(set *router.Set) string {
	var out []string
	for _, n := range set.Nodes() {
		switch {
		case !n.RouteEnabled(set.Key()):
			out = append(out, n.Name()+": drained (route "+set.Key().Route+" disabled on it)")
		case !inv.usable(n):
			out = append(out, n.Name()+": "+inv.unusableReason(n))
		}
	}
	return strings.Join(out, "; ")
}

// CheckOrderID returns nil when id is an order id Reserve, Confirm and
// Cancel accept, else an error wrapping [ErrInvalid] saying what is
// wrong with it (empty, over [MaxIDLen] bytes, a control byte).
func CheckOrderID(id string) error { return checkID("order_id", id) }

// idProblem says what is wrong with an id, or "" when nothing is. It does
// not allocate for a good id.
func idProblem(v string) string {
	if v == "" {
		return "is empty"
	}
	if len(v) > MaxIDLen {
		return fmt.Sprintf("is %d bytes, at most %d", len(v), MaxIDLen)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return fmt.Sprintf("holds a control byte at %d", i)
		}
	}
	// An order record's part list falls back to JSON (layout 1, parts.go),
	// which cannot carry invalid UTF-8: such ids would come back altered.
	if !utf8.ValidString(v) {
		return "is not valid UTF-8"
	}
	return ""
}

func checkQty(field string, q int64) error {
	if q <= 0 || q > MaxQuantity {
		return fmt.Errorf("%w: %s is %d, want 1..%d", ErrInvalid, field, q, MaxQuantity)
	}
	return nil
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func seconds(d time.Duration) int64 { return int64(d / time.Second) }

// atOnce runs f(0) … f(n-1), each on a goroutine of its own, and returns
// once every one returned: the inventory's fan-out over a set of nodes for
// work other than one script call per node, which sendRound sends (f
// writes only its own index's result, or locks what it shares).
func atOnce(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}
