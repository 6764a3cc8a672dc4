package inventory

import (
	"strconv"

	"github.com/shardis/shardis/node"
)

// Key layout on every node. Route and SKU are part of stock keys so two
// routes may use the same SKU ids. All keys of one node live on that node:
// scripts span SKUs, so Redis Cluster hash tags would not help here.
const (
	// PendingKey is a node's pending index: a sorted set of the parts
	// reserved there whose settle is still due, scored by deadline (ms). A
	// part leaves it once it is settled (confirmed, cancelled or expired)
	// or set aside ([Inventory.SetAside]). A stock part's member is its
	// place in the node's redo log, "queue:offset" (a handful of bytes
	// against the tens of its id: the index is a skiplist whose every
	// entry holds its member), any other part's is its id
	// ([PendingMember]). The rule that keeps it exact: a place names one
	// part for good (offsets are gap-free and never handed out twice, and
	// a pending part's redo-log entry is never trimmed: only settled ones
	// are, and a trim keeps the entry of a part whose record is gone while
	// this index or the stuck index lists it: redolog.go, "What a trim
	// removes"), so
	// the scripts that list the index read the part's id at its
	// place (lua/pending_index.lua); those that remove a part name both its
	// member and its id, so a part a release before indexed by its id
	// leaves the index as well, and rescheduling such a part moves it to
	// its member. A member that names no part (its place has no entry) is
	// listed as a part whose record is gone and unindexed. A part held by
	// its place whose record names none (a lost record re-created by hand
	// without its redo and offset) is unindexed by the expiry: its ops
	// take the member the due listing read when the entry there names the
	// part, so the place of a settled part goes once it comes due, long
	// before its settled record expires (left, it read then as a pending
	// part whose record was lost: set aside, and settled a second time by
	// [Inventory.SettleStuckLost]).
	PendingKey  = "inv:pending"
	keyStuck    = "inv:stuck"     // zset: part id set aside → when (ms)
	keyStuckWhy = "inv:stuck:why" // hash: part id set aside → reason
	// zset: part id set aside → when it is retried by itself (ms, stuck.go)
	keyStuckRetry = "inv:stuck:retry"
	// RedoOffsetsKey is a node's hash of redo queue key → the last
	// offset handed out in that queue ([RedoLogKey]); it also holds each
	// queue's first offset in this release's segments (the queue key and
	// [RedoFirstSuffix]) and a padding field ([RedoOffsetsPad]) that keeps
	// it a hash table (redolog.go).
	RedoOffsetsKey = "inv:redo:offsets"
	keyRedoAcked   = "inv:redo:acked" // hash: redo queue key → acknowledged offset; redoAckedInc → their incarnation
	// SettledLogKey is a node's settled log: a stream whose entries have
	// one field, "p", the id of a part that left pending there, the
	// newest [SettledLogCap] or so kept (settledlog.go).
	SettledLogKey = "inv:settled"
)

// Prefixes of the key families; the constructors below and ParseKey
// (decode.go) are built from them, so the two cannot drift apart.
const (
	stockKeyPrefix      = "inv:stock:"   // hash, then route ":" sku
	quotaKeyPrefix      = "inv:quota:"   // string, see quotaKey
	orderKeyPrefix      = "inv:order:"   // packed string (orderrec.go), then order id
	redoLogKeyPrefix    = "inv:redo:"    // zset, then the queue number (and ":s" segment of 32 offsets, or the release before's ":" segment of 100; redolog.go)
	xferKeyPrefix       = "inv:xfer:"    // hash, then a transfer id (migrate.go)
	xferMarkerKeyPrefix = "inv:xfer:in:" // a destination's memory of a transfer id
	removedKeyPrefix    = "inv:removed:" // string, then a route: the epoch of the apply that removed it (apply_readd.go)
)

var stampKey = node.StampKey

// redoAckedInc is the field of keyRedoAcked that names the incarnation its
// offsets were acknowledged at (redo_log.lua, redo_acks_current).
const redoAckedInc = "inc"

func stockKey(route, sku string) string { return stockKeyPrefix + route + ":" + sku }

// StockKey returns the key of the stock counters (a hash: available,
// reserved, confirmed, loaded, limit, limit_ver) of sku of route, on
// every node of the route.
func StockKey(route, sku string) string { return stockKey(route, sku) }

// quotaKey names the units a user holds of a SKU. Route names cannot hold
// ':', but SKU and user ids can: the SKU's length keeps ("X", ":9") and
// ("X:", "9") apart.
func quotaKey(route, sku, user string) string {
	return quotaKeyPrefix + route + ":" + strconv.Itoa(len(sku)) + ":" + sku + ":" + user
}

func partKey(partID string) string { return partKeyPrefix + partID }

// PartKey returns the key of a part's record (one packed string, or a hash
// written by a release before: [ReadPart], [DecodePart]) on the node that
// holds the part.
func PartKey(partID string) string { return partKey(partID) }

// partKeyPrefix starts every part key; scripts get it as ARGV[3] (lua.go).
const partKeyPrefix = "inv:part:"

func orderKey(orderID string) string { return orderKeyPrefix + orderID }

// OrderKey returns the key of an order's record ([ReadOrder], [DecodeOrder]) on
// the order's home node. OrderKey("*") is the SCAN pattern of every order
// record; [ParseKey] gives a scanned key's order id back.
func OrderKey(orderID string) string { return orderKey(orderID) }

// RedoLogKey returns the name of redo-log queue q (0-based) on every node:
// the key of its offsets in [RedoOffsetsKey] and the acknowledgements, and
// the prefix of its segments. The entries live in segments of 32
// consecutive offsets, sorted sets RedoLogKey(q) + ":s" + offset/32 (each
// small enough for Redis to keep as a listpack); the release before wrote
// them to segments of 100, RedoLogKey(q) + ":" + offset/100, and the one
// before that to RedoLogKey(q) itself, where they stay until trimmed
// (redolog.go).
func RedoLogKey(q int) string {
	if q >= 0 && q < len(redoLogKeys) {
		return redoLogKeys[q]
	}
	return redoLogKeyPrefix + strconv.Itoa(q)
}

// redoLogKeys are RedoLogKey's names of the queues inventory.redo_queues
// allows (1..1024), made once.
var redoLogKeys = func() []string {
	k := make([]string, 1024)
	for q := range k {
		k[q] = redoLogKeyPrefix + strconv.Itoa(q)
	}
	return k
}()

// xferKey names the record of transfer id on its source node, and
// xferMarkerKey the destination's memory that it applied it.
func xferKey(id string) string       { return xferKeyPrefix + id }
func xferMarkerKey(id string) string { return xferMarkerKeyPrefix + id }

// stockPartID names the part of item i of one attempt. It is the same on
// every node the item is split over; (node, part id) is unique.
func stockPartID(orderID, token string, item int) string {
	return orderID + "|" + token + "|" + strconv.Itoa(item)
}

// quotaPartID names the per-user quota part of one (route, sku) of one
// attempt.
func quotaPartID(orderID, token, route, sku string) string {
	return orderID + "|" + token + "|q|" + route + "|" + sku
}
