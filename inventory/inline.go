package inventory

import (
	"fmt"
	"strings"
)

// Inline parts. A stock part the local path takes (local.go: an order
// reserved whole on its home in one script, take_stock or write_parts) gets
// no part record: its order record, written by the same script on the
// same node, holds everything the record would (the part's entry in the
// part list: kind, item, node, route, SKU, quantity, redo queue and
// offset; the record's token; its created field, the part's "at"; its
// deadline, the part's deadline less partGrace). A quota part keeps its
// record (its id does not name its order unambiguously). The part's
// states: inline (no part record, the order record reserved), then, from
// the first write of its record on, a part like any other (pending, then
// confirmed or cancelled). What makes every interleaving safe:
//
//   - One reader. Every script that may meet one reads a part through
//     part_get (lua/inline_part.lua; reserve.lua and probe.lua read only
//     parts of one-round and general attempts, whose tokens never name
//     a record the local path wrote, with part_read), which, when the
//     part's key does not exist,
//     reads the inline part its id names (ORDER|TOKEN|ITEM): only from a
//     record on this node that is packed, reserved, not moved, of TOKEN,
//     written by this path (no reserved_at: a commit writes one, and so
//     does a move's install), with an
//     entry for ITEM, a stock part of this node (ARGV[1]) taken at an
//     offset. It is then read as the pending record the reserve would
//     have written (TestInlinePartAsRecord, TestTakeOneAsPlan). Any other
//     missing key reads as missing, as before.
//   - Written before it can vanish. A reserved record has no TTL and
//     nothing deletes it; every step that changes a reserved record —
//     its decision (order.lua's final: confirm, cancel, expire) and a
//     topology move (order_move_out.lua) — first writes, in the same
//     script, the record of each inline part it lists that has none.
//     A move writes the pending record part_get read (inline_write). A
//     Confirm's or Cancel's decision writes it settled as the order
//     (inline_settle): what settle.lua does to a pending part (its units
//     moved from reserved, its pending-index entry dropped, its
//     settled-log entry), so the Confirm or Cancel sends no settle for
//     it; the reply names those parts (orderRecord.toSettle). The
//     reconciler's expiry, which comes for one due part, settles that
//     part so and writes the others pending: each is settled, and
//     counted, by the pass that finds it due. A counter settle.lua would
//     refuse makes a decision write them all pending instead, for that
//     settle to refuse. So a part whose order was
//     decided or moved has a record of its own (a pending one then
//     settles, expires and syncs as every part does), and part_get never
//     reads an inline part from a record that is not reserved: a settled
//     part whose record outlived its retention is not read back as
//     pending. A part is settled once: by the decision, atomically with
//     it, or after it by a settle that meets its record; a settle that
//     comes after the decision's finds it settled ("already").
//   - Any write makes it a record. A step that changes a part (settle,
//     a stuck mark) writes the whole record with part_put; from then on
//     part_get reads that record, never the order's entry.
//   - Read where written. Only the record the local reserve wrote, on the
//     node it wrote it on, holds inline parts: the record a move installs
//     elsewhere gets its created as reserved_at (order_install.lua), so
//     no copy of it is read for inline parts again, there or, moved back,
//     on the node it left. That node may have lost the parts' records
//     since, with their takes (an older snapshot, accepted): read from the
//     record moved back, such a part was pending again, and deciding its
//     order took its units out of another order's reservation (a Cancel
//     made them available again: stock from nothing;
//     TestInlinePartLostAfterMoveBack). Now it is absent there, as every
//     part a node lost (a Confirm answers ErrDataLoss naming it).
//
// The part still has its redo entry and its pending-index member, written
// by the reserve as before. Why: the record is a key per order that
// nothing reads while the order waits for its decision, so the reserve,
// the step a sale's peak is made of, writes one key fewer, and a pending
// order holds a record fewer; the decision writes it instead (one SET
// more per confirm, cancel or expiry, which the settle after it rewrites
// as before). The checkers (internal/explore, internal/chaos,
// tests/invariant_test.go) count inline parts through [InlineParts].

// InlineParts returns the inline parts of order id's record, read on node
// nodeName ([OrderRead.Fields]): the parts that have no record of their
// own while the record is reserved, each as the pending record part_get
// reads for it (see above). A part listed here whose key exists on the
// node has a record: that record is the part. None for a record that is
// not reserved, is moved, or was not written by the local path (a record
// of the hash layout, which only releases before wrote, has none). It
// fails with [ErrCorrupt] for a part list or time field that does not
// decode. For tools and checkers that count a node's parts from its keys.
func InlineParts(nodeName, id string, fields map[string]string) ([]PartRecord, error) {
	token := fields["token"]
	if fields["status"] != string(OrderReserved) || fields["moved"] != "" || fields["reserved_at"] != "" || token == "" ||
		!strings.HasPrefix(fields["parts"], partsLayout2+token) {
		return nil, nil
	}
	parts, err := DecodeOrderParts(id, fields["parts"])
	if err != nil {
		return nil, fmt.Errorf("order record %s: %w", orderKey(id), err)
	}
	created, err := msField(fields, "created")
	if err != nil {
		return nil, fmt.Errorf("order record %s: %w", orderKey(id), err)
	}
	deadline, err := msField(fields, "deadline")
	if err != nil {
		return nil, fmt.Errorf("order record %s: %w", orderKey(id), err)
	}
	var out []PartRecord
	for _, p := range parts {
		if p.Kind != PartStock || p.Node != nodeName || p.Redo == "" || p.Offset == 0 {
			continue
		}
		out = append(out, PartRecord{ID: p.ID, State: PartPending, Kind: PartStock, Order: id, Token: token, SKU: p.SKU,
			Qty: p.Qty, Item: p.Item, Counter: stockKey(p.Route, p.SKU), Redo: p.Redo, Offset: p.Offset,
			Deadline: deadline.Add(partGrace), At: created})
	}
	return out, nil
}
