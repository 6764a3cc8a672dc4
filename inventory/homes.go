package inventory

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Order homes: the one node that holds an order's record.
//
// An order's record carries its one decision (reserved, confirmed,
// cancelled, expired, failed), so every instance, every retry and every
// reader must find it on the same node. The home is therefore a pure
// function of the order id and the topology's member list, never of which
// node happens to be up:
//
//   - An id minted by [Inventory.NewOrderID] names a node: the home is that
//     node while it is a member of the topology.
//   - Any other id (and a minted id whose node left the topology) is
//     placed by the order home ring over every member, weighted, by
//     hashing "order:" + id.
//
// Both rules read only (id, members), so the single-decision argument of
// reserve.go and staged.go holds unchanged: there is one home per order
// per topology epoch, and a topology change moves records from the old
// home to the new one (migrate.go) by this same function.
//
// Availability comes from minting, not from failing over: while a node is
// down, NewOrderID names only usable nodes, so an order whose id is minted
// during the outage has its record on a healthy node and succeeds when its
// stock is on healthy nodes. An order whose id the caller made up still
// lives on its ring home and fails with ErrUnavailable while that node is
// down. Failing over the home of an existing id instead would let a retry
// create a second record on the other node; a minted id never moves, so it
// cannot.
//
// Minted ids look like "@n2#9f1c2ab3e4d5f607a1b2c3d4": "@", the node name,
// "#", 16 hex digits of randomness and 8 hex digits of a checksum over the
// rest. Node names hold neither '@' nor '#', and an id that merely looks
// minted but whose checksum does not match is an ordinary id (ring
// placed), so ids made up by callers before minting existed keep their
// home with probability 1 - 2⁻³².

// Homes places order records over the members of one topology. It is
// immutable and safe for concurrent use.
type Homes struct {
	ring  *router.Ring
	names []string       // member names, sorted; ring member i is names[i]
	index map[string]int // name → ring member index
}

// NewHomes returns the order homes of cfg's inventory server: every node of
// its routes, sorted by name, with its configured weight.
func NewHomes(cfg *config.Config) (*Homes, error) { return homesOf(topology.Of(cfg)) }

// homesOf builds the order homes of topology t: every member, sorted by
// name, with its weight.
func homesOf(t topology.Topology) (*Homes, error) {
	names := t.Nodes()
	w := t.Weights()
	ms := make([]router.Member, len(names))
	for i, n := range names {
		ms[i] = router.Member{Name: n, Weight: w[n]}
	}
	r, err := router.NewRing(ms)
	if err != nil {
		return nil, err
	}
	return newHomes(r, names), nil
}

func newHomes(ring *router.Ring, names []string) *Homes {
	h := &Homes{ring: ring, names: names, index: make(map[string]int, len(names))}
	for i, n := range names {
		h.index[n] = i
	}
	return h
}

// Home returns the name of the node that holds orderID's record.
func (h *Homes) Home(orderID string) string { return h.names[h.member(orderID)] }

// member returns the index of orderID's home among h.names.
func (h *Homes) member(orderID string) int {
	if name, ok := MintedHome(orderID); ok {
		if i, ok := h.index[name]; ok {
			return i
		}
	}
	return h.ring.Home("order:" + orderID)
}

const (
	mintRandHex  = 16
	mintCheckHex = 8
)

// mintIDFrom is the minted order id naming node with randomness b:
// "@node#" and b in hex (the body), then the body's mintCheck, built in
// one buffer.
func mintIDFrom(node string, b [mintRandHex / 2]byte) string {
	const digits = "0123456789abcdef"
	var arr [96]byte // on the stack for a node name of up to 70 bytes
	id := slices.Grow(arr[:0], 2+len(node)+mintRandHex+mintCheckHex)
	id = append(append(append(id, '@'), node...), '#')
	id = hex.AppendEncode(id, b[:])
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(mintSumPrefix)
	_, _ = d.Write(id)
	s := uint32(d.Sum64())
	id = id[:len(id)+mintCheckHex]
	for i := len(id) - 1; i >= len(id)-mintCheckHex; i-- {
		id[i] = digits[s&0xf]
		s >>= 4
	}
	return string(id)
}

// mintSumPrefix is hashed before a minted id's body by its checksum.
const mintSumPrefix = "shardis order home\x00"

// mintSum is the checksum of a minted id's body ("@node#rand").
func mintSum(body string) uint32 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(mintSumPrefix)
	_, _ = d.WriteString(body)
	return uint32(d.Sum64())
}

// mintCheck is mintSum(body) as mintCheckHex lowercase hex digits.
func mintCheck(body string) string {
	const digits = "0123456789abcdef"
	var out [mintCheckHex]byte
	s := mintSum(body)
	for i := mintCheckHex - 1; i >= 0; i-- {
		out[i] = digits[s&0xf]
		s >>= 4
	}
	return string(out[:])
}

// MintedHome reports the node named by an id minted by
// [Inventory.NewOrderID], and false for any other id (including one that
// only looks minted: its checksum must match). Whether that node is the
// order's home also depends on the topology: see [Homes.Home].
func MintedHome(orderID string) (string, bool) {
	if len(orderID) < 3+mintRandHex+mintCheckHex || orderID[0] != '@' {
		return "", false
	}
	hash := strings.LastIndexByte(orderID, '#')
	if hash < 2 || len(orderID)-hash-1 != mintRandHex+mintCheckHex {
		return "", false
	}
	// every digit through the table, without a branch on its value
	// (random digits make such branches unpredictable): any byte that is
	// not a lowercase hex digit sets bit 4 of bad
	var bad byte
	for i := hash + 1; i < len(orderID)-mintCheckHex; i++ {
		bad |= hexValue[orderID[i]]
	}
	var sum uint32
	for i := len(orderID) - mintCheckHex; i < len(orderID); i++ {
		d := hexValue[orderID[i]]
		bad |= d
		sum = sum<<4 | uint32(d&0xf)
	}
	if bad > 0xf || mintSum(orderID[:len(orderID)-mintCheckHex]) != sum {
		return "", false
	}
	return orderID[1:hash], true
}

// hexValue maps a lowercase hex digit to its value and every other byte
// to 0x10 (MintedHome).
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0x10
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a') + 10
	}
	return t
}()

// NewOrderID returns a fresh order id whose record will live on a node
// that is usable now. Reserve, Confirm and Cancel find the record on that
// node for as long as it is a member of the topology, whichever nodes are
// up later (see the file comment); it moves, like any order's, only when a
// topology change removes its node.
//
// Without items, the nodes are tried in the order of the home ring from a
// random point, so ids spread over the nodes by weight (and the ids that
// would have gone to an unusable node spread over its successors). With
// the order's items (their routes are what counts), the id names the
// usable node that is in the most of the items' routes, ties broken the
// same random way: every item whose route has it is offered to that node
// first, so an order it can meet in full is reserved by one script there
// (local.go), and a flash sale on one SKU whose stock lives on one node
// puts every order's record on that node instead of two round trips away.
//
// Callers that mint ids keep placing orders while a node is down: only an
// order whose stock is on the down node fails. Store the id before you
// call Reserve and retry Reserve with the same id, as for any id. It
// fails with ErrInvalid naming an item whose route is not a route of the
// inventory server, with ErrUnavailable when no node of the inventory is
// usable, and with ErrUnavailable wrapping ErrTopology while this instance
// cannot act at the nodes' topology (Reserve would refuse too).
func (inv *Inventory) NewOrderID(ctx context.Context, items ...Item) (string, error) {
	v := inv.topology(ctx) // one view for every placement below
	var setsArr [4]*router.Set
	sets := setsArr[:0]
	for i, it := range items {
		set, err := inv.setIn(v, it.Route)
		if err != nil {
			return "", fmt.Errorf("%w (items[%d])", err, i)
		}
		sets = append(sets, set)
	}
	if err := v.refuse(); err != nil {
		return "", err
	}
	// one read: the ring walk's start, then the id's randomness
	var seed [8 + mintRandHex/2]byte
	randomFill(seed[:])
	best, bestScore := -1, -1
	w := v.homes.ring.Walk(string(seed[:8]))
	for i, ok := w.Next(); ok; i, ok = w.Next() {
		n := v.members[i]
		if !inv.usable(n) {
			continue
		}
		score := 0
		for _, set := range sets {
			if set.Contains(n) && n.RouteEnabled(set.Key()) {
				score++
			}
		}
		if score > bestScore {
			best, bestScore = i, score
		}
		if score == len(sets) {
			break // in every item's route: no node can do better
		}
	}
	if best < 0 {
		return "", fmt.Errorf("%w: no node of server %q can hold a new order's record", ErrUnavailable, inv.cfg.Server)
	}
	return mintIDFrom(v.members[best].Name(), [mintRandHex / 2]byte(seed[8:])), nil
}

// homeFor returns the node that decides an order, after moving its record
// there when the topology is migrating and the record's home moved.
func (inv *Inventory) homeFor(ctx context.Context, orderID string) (*node.Node, error) {
	v := inv.topology(ctx)
	if err := v.refuse(); err != nil {
		return nil, err
	}
	home, err := inv.orderHome(v, orderID)
	if err != nil {
		return nil, err
	}
	if !v.migrating() {
		return home, nil
	}
	prevName := v.prevHomes.Home(orderID)
	if prevName == home.Name() {
		return home, nil
	}
	if _, err := inv.moveOrder(ctx, v, orderID, prevName, home); err != nil {
		return nil, err
	}
	return home, nil
}

// OrderHomes returns the names of the nodes that may hold orderID's live
// record in the instance's current view of the topology: its home, and
// while a change migrates, its home in the previous topology as well (a
// record moves when first touched, migrate.go). ok is false when the
// instance has no ready view (the topology not read yet, or refused): no
// node can be ruled out then. A record found elsewhere is a leftover (a
// copy a move marked, or one a restore or a rejoining node brought back)
// and tells nothing for certain about the order's current attempt.
func (inv *Inventory) OrderHomes(ctx context.Context, orderID string) (names []string, ok bool) {
	v := inv.topology(ctx)
	if v.notReady != nil || v.homes == nil {
		return nil, false
	}
	names = []string{v.homes.Home(orderID)}
	if v.migrating() {
		if prev := v.prevHomes.Home(orderID); prev != names[0] {
			names = append(names, prev)
		}
	}
	return names, true
}

// orderHome returns the node holding an order's record in the placement
// of v (Homes.member). It never fails over: an order's decision lives on one
// node.
func (inv *Inventory) orderHome(v *view, orderID string) (*node.Node, error) {
	n := v.members[v.homes.member(orderID)]
	if !inv.usable(n) {
		return nil, fmt.Errorf("%w: order %q: its home node %s is unavailable: %v", ErrUnavailable, orderID, n.Name(), inv.unusableReason(n))
	}
	return n, nil
}
