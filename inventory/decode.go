package inventory

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Decoders of what the inventory keeps on a node, for tools that read
// nodes directly (the chaos checker, operator tools). They are the one
// definition of each stored format: the package writes with the same
// constructors (keys.go) and types. Every decoder rejects malformed input
// with an error that wraps [ErrCorrupt] and names the key or field.

// KeyKind is the family of a key on an inventory node.
type KeyKind int

const (
	// KeyOther is any key the inventory does not write, or one of its
	// families whose name after the prefix is malformed.
	KeyOther KeyKind = iota
	// KeyStock is a SKU's stock counters (hash); rest is "route:sku".
	KeyStock
	// KeyQuota is a user's per-SKU quota counter (string); rest is
	// "route:len(sku):sku:user", see [ParseQuotaKey].
	KeyQuota
	// KeyPart is a part record (a packed string, or a hash written by a
	// release before: [ReadPart], [DecodePart]); rest is the part id.
	KeyPart
	// KeyOrder is an order record (a packed string, or a hash written by a
	// release before: [ReadOrder], [DecodeOrder]); rest is the order id.
	KeyOrder
	// KeyRedoLog is a redo-log queue's own key (zset: part id by offset),
	// which holds only entries written by a release before the segments
	// ([RedoLogKey]); rest is the queue number, as [RedoLogKey] writes it.
	KeyRedoLog
	// KeyRedoOffsets is the hash of the last offset handed out per redo
	// queue key; rest is "".
	KeyRedoOffsets
	// KeyRedoAcked is the hash of the acknowledged offset per redo queue
	// key; rest is "".
	KeyRedoAcked
	// KeyPending is the index of pending parts (zset: part id by
	// deadline ms); rest is "".
	KeyPending
	// KeyStuck is the index of parts set aside (zset: part id by ms); rest
	// is "".
	KeyStuck
	// KeyStuckWhy is the hash of why each stuck part was set aside; rest
	// is "".
	KeyStuckWhy
	// KeyLimitsTodo is the set of stock keys with a limit change to
	// apply; rest is "".
	KeyLimitsTodo
	// KeyTransfer is the source's record of an unfinished topology
	// transfer; rest is the transfer id.
	KeyTransfer
	// KeyTransferMarker is a destination's memory of an applied topology
	// transfer; rest is the transfer id.
	KeyTransferMarker
	// KeyStuckRetry is the index of when each stuck part is retried by
	// itself (zset: part id by ms, stuck.go); rest is "".
	KeyStuckRetry
	// KeyRedoSegment is one segment of a redo-log queue (zset: part id by
	// offset, [RedoLogKey]); rest is the queue number, ":s", the segment
	// number (offset / 32), or, for a segment of the release before, the
	// queue number, ":", the segment number (offset / 100).
	KeyRedoSegment
	// KeySettledLog is the node's settled log (stream: the ids of parts
	// that left pending, [SettledLogKey]); rest is "".
	KeySettledLog
	// KeyRouteRemoved is a node's mark of the topology apply that removed
	// a route it served (string: that apply's epoch, apply_readd.go); rest
	// is the route.
	KeyRouteRemoved
)

var keyKindNames = [...]string{KeyOther: "other", KeyStock: "stock", KeyQuota: "quota", KeyPart: "part",
	KeyOrder: "order", KeyRedoLog: "redo-log", KeyRedoOffsets: "redo-offsets", KeyRedoAcked: "redo-acked",
	KeyPending: "pending", KeyStuck: "stuck", KeyStuckWhy: "stuck-why", KeyLimitsTodo: "limits-todo",
	KeyTransfer: "transfer", KeyTransferMarker: "transfer-marker", KeyStuckRetry: "stuck-retry",
	KeyRedoSegment: "redo-segment", KeySettledLog: "settled-log", KeyRouteRemoved: "route-removed"}

// String returns the kind's short name ("stock", "part", "redo-log" …).
func (k KeyKind) String() string {
	if k < 0 || int(k) >= len(keyKindNames) {
		return "KeyKind(" + strconv.Itoa(int(k)) + ")"
	}
	return keyKindNames[k]
}

// fixedKeys are the keys of which a node holds one each.
var fixedKeys = map[string]KeyKind{RedoOffsetsKey: KeyRedoOffsets, keyRedoAcked: KeyRedoAcked,
	PendingKey: KeyPending, keyStuck: KeyStuck, keyStuckWhy: KeyStuckWhy, keyStuckRetry: KeyStuckRetry,
	keyLimitsTodo: KeyLimitsTodo, SettledLogKey: KeySettledLog}

// keyFamilies are the prefixed families, a longer prefix before any
// prefix of it.
var keyFamilies = []struct {
	prefix string
	kind   KeyKind
}{
	{stockKeyPrefix, KeyStock}, {quotaKeyPrefix, KeyQuota}, {partKeyPrefix, KeyPart},
	{orderKeyPrefix, KeyOrder}, {redoLogKeyPrefix, KeyRedoLog},
	{xferMarkerKeyPrefix, KeyTransferMarker}, {xferKeyPrefix, KeyTransfer}, {removedKeyPrefix, KeyRouteRemoved},
}

// ParseKey classifies a key of an inventory node and returns what follows
// its family's prefix (the part or order id, the transfer id, the redo
// queue number, "route:sku" of a stock key …; "" for a key of which a
// node holds one). A key of no family, with an empty rest, or whose rest
// is malformed (a stock or quota key that [ParseStockKey] or
// [ParseQuotaKey] rejects, a redo queue that is not a number) is
// [KeyOther] with rest "".
func ParseKey(key string) (kind KeyKind, rest string) {
	if k, ok := fixedKeys[key]; ok {
		return k, ""
	}
	for _, f := range keyFamilies {
		rest, ok := strings.CutPrefix(key, f.prefix)
		if !ok {
			continue
		}
		kind, err := f.kind, error(nil)
		switch f.kind {
		case KeyStock:
			_, _, err = ParseStockKey(key)
		case KeyQuota:
			_, _, _, err = ParseQuotaKey(key)
		case KeyRedoLog:
			kind, err = parseRedoKey(rest)
		}
		if rest == "" || err != nil {
			return KeyOther, ""
		}
		return kind, rest
	}
	return KeyOther, ""
}

// parseRedoKey classifies what follows the redo-log prefix: a queue
// number as [RedoLogKey] writes it ([KeyRedoLog]), or that and ":s" or
// ":" a segment number ([KeyRedoSegment]: this release's, the release
// before's); ErrCorrupt for anything else.
func parseRedoKey(rest string) (KeyKind, error) {
	queue, seg, isSeg := strings.Cut(rest, ":")
	if q, err := strconv.Atoi(queue); err != nil || q < 0 || strconv.Itoa(q) != queue {
		return KeyOther, ErrCorrupt
	}
	if !isSeg {
		return KeyRedoLog, nil
	}
	seg = strings.TrimPrefix(seg, "s")
	if s, err := strconv.ParseInt(seg, 10, 64); err != nil || s < 0 || strconv.FormatInt(s, 10) != seg {
		return KeyOther, ErrCorrupt
	}
	return KeyRedoSegment, nil
}

// ParseStockKey splits a stock key ([StockKey]) into its route and SKU.
// Route names hold no ':', SKU ids may.
func ParseStockKey(key string) (route, sku string, err error) {
	rest, ok := strings.CutPrefix(key, stockKeyPrefix)
	route, sku, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || route == "" {
		return "", "", fmt.Errorf("%w: %q is not a stock key (%sROUTE:SKU)", ErrCorrupt, key, stockKeyPrefix)
	}
	return route, sku, nil
}

// ParseQuotaKey splits a per-user quota key,
// "inv:quota:ROUTE:LEN(SKU):SKU:USER", into route, SKU and user; the
// SKU's length keeps SKU and user apart when either holds ':'.
func ParseQuotaKey(key string) (route, sku, user string, err error) {
	rest, ok := strings.CutPrefix(key, quotaKeyPrefix)
	route, rest, ok2 := strings.Cut(rest, ":")
	ls, rest, ok3 := strings.Cut(rest, ":")
	n, aerr := strconv.Atoi(ls)
	if !ok || !ok2 || !ok3 || route == "" || aerr != nil || n < 0 || len(rest) < n+1 || rest[n] != ':' {
		return "", "", "", fmt.Errorf("%w: %q is not a quota key (%sROUTE:LEN(SKU):SKU:USER)", ErrCorrupt, key, quotaKeyPrefix)
	}
	return route, rest[:n], rest[n+1:], nil
}

// PartKind is what a part holds: stock, or a per-user quota.
type PartKind string

const (
	// PartStock is a part holding units of a SKU's stock; it is in a
	// redo-log queue.
	PartStock PartKind = "s"
	// PartQuota is a part holding units of a user's per-SKU quota.
	PartQuota PartKind = "q"
)

// OrderPart is one part as an order record lists it (the record's "parts"
// field, layout 1 or 2 above; the JSON names are layout 1).
type OrderPart struct {
	ID     string   `json:"p"`           // part id, unique per node
	Node   string   `json:"n"`           // node holding the part
	Kind   PartKind `json:"k"`           // PartStock or PartQuota
	Item   int      `json:"i"`           // index of the order item; -1 for a quota part
	Route  string   `json:"r"`           // the route of the SKU's stock (stock part) or quota (quota part)
	SKU    string   `json:"s"`           // the SKU whose stock or per-user quota the part holds
	Qty    int64    `json:"q"`           // units held; at least 1
	Redo   string   `json:"l,omitempty"` // stock part: its redo-log queue key on Node
	Offset int64    `json:"o,omitempty"` // stock part: its offset in Redo; 0 while only promised (staged.go)
	// Incarnation is, in the parts a staged attempt promised (staged.go),
	// the incarnation of Node's stamp as the attempt knew it ("" unknown):
	// a probe that finds the part absent on a node of another incarnation
	// (its data loss was accepted since) reports it lost, not never taken.
	Incarnation string `json:"g,omitempty"`
}

func (p OrderPart) problem() string {
	switch {
	case p.ID == "":
		return "p (part id) is empty"
	case p.Node == "":
		return "n (node) is empty"
	case p.Qty < 1:
		return fmt.Sprintf("q (quantity) is %d", p.Qty)
	case p.Kind == PartStock:
		if p.Item < 0 {
			return fmt.Sprintf("i (item) is %d", p.Item)
		}
		if k, _ := ParseKey(p.Redo); k != KeyRedoLog {
			return fmt.Sprintf("l (redo log) %q is not a redo-log key", p.Redo)
		}
		if p.Offset < 0 {
			return fmt.Sprintf("o (offset) is %d", p.Offset)
		}
	case p.Kind == PartQuota:
		if p.Redo != "" || p.Offset != 0 {
			return fmt.Sprintf("a quota part has redo log %q offset %d", p.Redo, p.Offset)
		}
	default:
		return fmt.Sprintf("k (kind) is %q, want %q or %q", p.Kind, PartStock, PartQuota)
	}
	return ""
}

// OrderRecord is an order record (an order key's fields) as stored. Its
// fields: status, token, digest, deadline (ms), created (ms), parts (the
// part list, parts.go); user, absent for an order without one (records
// written before the compact layout hold it empty); reserved_at (ms),
// absent when the record was reserved when created (the one-script path,
// local.go); lease (ms) while an attempt holds it; reason and decided_at
// once decided; moved on a record a topology change moved (a record
// installed by a move holds reserved_at, its created if it had none:
// inline.go). Only status,
// token, deadline, parts, reason, lease, digest and moved are read by
// the scripts (orderBody); created, reserved_at and decided_at are for
// operators.
type OrderRecord struct {
	ID string // the order id, as DecodeOrder was given it
	// Status is the record's state (never OrderMissing in a decoded
	// record).
	Status OrderState
	Token  string         // the attempt that holds (or held) it; "" for a tombstone
	User   string         // the user id; "" for an order without one
	Reason DecisionReason // why it was decided; "" until it is
	// Deadline is when the reservation expires (node clock); zero if the
	// record has none (a tombstone).
	Deadline time.Time
	Parts    []OrderPart // the committed (or, staging, promised) parts
	// Moved is set (the move's epoch token) on a record a topology change
	// moved to another node: it is dead where it is.
	Moved string
}

// DecodeOrder decodes the fields of order id's record ([OrderRead.Fields],
// either layout, orderrec.go). It needs
// a known status, a deadline that is an integer (ms) when present, and a
// part list [DecodeOrderParts] accepts; the error names the order and
// field.
func DecodeOrder(id string, fields map[string]string) (OrderRecord, error) {
	r := OrderRecord{ID: id, Token: fields["token"], User: fields["user"],
		Reason: DecisionReason(fields["reason"]), Moved: fields["moved"]}
	wrap := func(err error) (OrderRecord, error) {
		return OrderRecord{}, fmt.Errorf("order record %s: %w", orderKey(id), err)
	}
	var err error
	if r.Status, err = ParseOrderState(fields["status"]); err != nil {
		return wrap(err)
	}
	if r.Deadline, err = msField(fields, "deadline"); err != nil {
		return wrap(err)
	}
	if r.Parts, err = DecodeOrderParts(id, fields["parts"]); err != nil {
		return wrap(err)
	}
	return r, nil
}

// PartRecord is a part record (a part key's fields) as stored. A tombstone
// (written by a cancel that came before the reserve) has only ID, State
// (cancelled), Order, Token (from the id), At and Tombstone.
type PartRecord struct {
	ID        string    // the part id, as DecodePart was given it; it starts with Order
	State     PartState // pending, confirmed or cancelled (never PartMissing)
	Kind      PartKind  // "" for a tombstone
	Order     string    // the id of the order the part belongs to
	Token     string    // the Reserve attempt that took it
	SKU       string    // the SKU of the stock or quota it holds; "" for a tombstone
	Qty       int64     // 0 for a tombstone
	Item      int       // index of the order item; -1 for a quota part
	Counter   string    // the stock key (stock part) or quota key (quota part) it counts in
	Redo      string    // stock part: its redo-log queue key; "" otherwise
	Offset    int64     // stock part: its offset in Redo; 0 otherwise
	Deadline  time.Time // when the reservation expires (node clock); zero for a tombstone
	At        time.Time // when it was written (node clock)
	SettledAt time.Time // when it was confirmed or cancelled; zero while pending
	Tombstone bool      // true for a tombstone: a cancel that came before the reserve, holding no units
}

// DecodePart decodes the fields of part id's record ([PartRead.Fields],
// either layout, partrec.go). It needs a
// known state; an order whose id starts the part id; a token (or, for a
// tombstone, one in the part id); integer qty ≥ 0, item, offset and
// times; and, unless a tombstone, a known kind and a counter of that
// kind's key family — a stock part also a redo-log key and an offset ≥ 1,
// but for a settled one that names neither (the record
// [Inventory.SettleStuckLost] writes for a part whose record was lost:
// its place is unknown; Redo "" and Offset 0). The error names the part
// key and the field.
func DecodePart(id string, fields map[string]string) (PartRecord, error) {
	p, err := decodePart(id, fields)
	if err != nil {
		return PartRecord{}, fmt.Errorf("part record %s: %w", partKey(id), err)
	}
	return p, nil
}

func decodePart(id string, f map[string]string) (PartRecord, error) {
	p := PartRecord{ID: id, Kind: PartKind(f["kind"]), Order: f["order"],
		Token: f["token"], SKU: f["sku"], Counter: f["counter"], Redo: f["redo"]}
	var err error
	if p.State, err = ParsePartState(f["state"]); err != nil {
		return p, err
	}
	switch t := f["tombstone"]; t {
	case "", "1":
		p.Tombstone = t == "1"
	default:
		return p, fmt.Errorf("%w: tombstone is %q, want \"1\" or none", ErrCorrupt, t)
	}
	rest, ok := strings.CutPrefix(id, p.Order+"|")
	if p.Order == "" || !ok {
		return p, fmt.Errorf("%w: order is %q, the part id does not start with it", ErrCorrupt, p.Order)
	}
	if p.Token == "" && p.Tombstone {
		p.Token, _, _ = strings.Cut(rest, "|")
	}
	if p.Token == "" || !strings.HasPrefix(rest, p.Token+"|") {
		return p, fmt.Errorf("%w: token is %q, the part id does not follow the order with it", ErrCorrupt, p.Token)
	}
	for _, n := range []struct {
		name string
		to   *int64
	}{{"qty", &p.Qty}, {"offset", &p.Offset}} {
		if *n.to, err = intField(f, n.name); err != nil {
			return p, err
		}
	}
	item, err := intField(f, "item")
	if err != nil {
		return p, err
	}
	p.Item = int(item)
	for _, t := range []struct {
		name string
		to   *time.Time
	}{{"deadline", &p.Deadline}, {"at", &p.At}, {"settled_at", &p.SettledAt}} {
		if *t.to, err = msField(f, t.name); err != nil {
			return p, err
		}
	}
	if p.Qty < 0 || (p.Tombstone && p.Qty != 0) {
		return p, fmt.Errorf("%w: qty is %d", ErrCorrupt, p.Qty)
	}
	if p.Tombstone {
		if p.State != PartCancelled || p.Kind != "" {
			return p, fmt.Errorf("%w: a tombstone with state %q kind %q", ErrCorrupt, p.State, p.Kind)
		}
		return p, nil
	}
	return p, p.checkKind()
}

// checkKind checks the fields that depend on a live part's kind.
func (p *PartRecord) checkKind() error {
	switch p.Kind {
	case PartStock:
		if _, _, err := ParseStockKey(p.Counter); err != nil {
			return fmt.Errorf("counter: %w", err)
		}
		if p.Redo == "" && p.Offset == 0 && p.State != PartPending {
			return nil // settled by SettleStuckLost: its lost record's place is unknown
		}
		if k, _ := ParseKey(p.Redo); k != KeyRedoLog {
			return fmt.Errorf("%w: redo %q is not a redo-log key", ErrCorrupt, p.Redo)
		}
		if p.Offset < 1 {
			return fmt.Errorf("%w: offset is %d", ErrCorrupt, p.Offset)
		}
	case PartQuota:
		if _, _, _, err := ParseQuotaKey(p.Counter); err != nil {
			return fmt.Errorf("counter: %w", err)
		}
		if p.Redo != "" || p.Offset != 0 {
			return fmt.Errorf("%w: a quota part has redo %q offset %d", ErrCorrupt, p.Redo, p.Offset)
		}
	default:
		return fmt.Errorf("%w: kind is %q, want %q or %q", ErrCorrupt, p.Kind, PartStock, PartQuota)
	}
	return nil
}

// intField reads an integer field; a missing one is 0, as for the scripts.
func intField(f map[string]string, name string) (int64, error) {
	s, ok := f[name]
	if !ok || s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s is %q, not an integer", ErrCorrupt, name, s)
	}
	return n, nil
}

// msField reads a time field (ms since the epoch); missing or 0 is the
// zero time.
func msField(f map[string]string, name string) (time.Time, error) {
	ms, err := intField(f, name)
	if err != nil || ms == 0 {
		return time.Time{}, err
	}
	return time.UnixMilli(ms), nil
}
