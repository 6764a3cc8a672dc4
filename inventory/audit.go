package inventory

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Stock audit: what a node's stock counters must satisfy at every moment.
//
// Every script that changes a stock hash keeps, on that node,
// available + reserved + confirmed == loaded, each field ≥ 0: a take moves
// units from available to reserved, a settle from reserved to confirmed
// or available, a load adds to available and loaded, and a topology
// transfer moves available, confirmed and loaded together out of a hash
// with nothing reserved (xfer_out.lua) and into another. Each does so in
// one script, and Redis runs a script whole. A hash that breaks the sum
// was changed by half a script or by hand: after a crash cut the node's
// AOF inside a script's writes, Redis 7.0 with aof-load-truncated yes
// applies the first of them at the next restart (SECURITY.md,
// Persistence; chaos seed 415 ended with a/hot on n1 at 0 + 0 + 171, 170
// loaded). The reconciler audits every node once per server process
// (rollback, Reconciler) and logs each hash that does not add up: its
// units can be sold twice or never.

// StockImbalance is a stock hash on a node whose counters do not add up:
// available + reserved + confirmed != loaded, a field below zero, or a
// field that is not an integer (Err says which).
type StockImbalance struct {
	Node string // the node's name, as AuditStock was given it
	Key  string // the stock hash's Redis key, e.g. "inv:stock:a:hot"
	// The counters below are the hash's fields as read, in units of
	// stock; a missing field reads as 0. When Err is set, the field it
	// names and those after it are 0, not read (all four for a key that
	// is not a hash).
	Available int64 // units that a take may take
	Reserved  int64 // units held by parts not yet confirmed or cancelled
	Confirmed int64 // units of confirmed parts (sold)
	// Loaded is the units added to the hash by loads, plus those moved in
	// by topology transfers and minus those moved out.
	Loaded int64
	// Err says why the counters could not be read (a field that is not an
	// integer, or a key that is not a hash); "" otherwise.
	Err string
}

// String names the hash and its counters, e.g. "inv:stock:a:hot on n1:
// available 0 + reserved 0 + confirmed 171 = 171, loaded 170".
func (s StockImbalance) String() string {
	if s.Err != "" {
		return fmt.Sprintf("%s on %s: %s", s.Key, s.Node, s.Err)
	}
	return fmt.Sprintf("%s on %s: available %d + reserved %d + confirmed %d = %d, loaded %d",
		s.Key, s.Node, s.Available, s.Reserved, s.Confirmed, s.Available+s.Reserved+s.Confirmed, s.Loaded)
}

// auditBatch is how many stock hashes one pipeline reads.
const auditBatch = 500

// auditFields are the stock hash's counters the audit reads, in the
// order auditHash takes them.
var auditFields = []string{"available", "reserved", "confirmed", "loaded"}

// AuditStock reads every stock hash on node nodeName (scan, then their
// counters, auditBatch at a time) and returns those that do not add up
// (StockImbalance), none when all do; a stock key that is not a hash is
// one of them (its Err says so), and the others are still read. A hash a
// script changes while the audit reads it is read whole (HMGET is one
// command). It fails when the node is unknown or cannot be read; it
// writes nothing.
func (inv *Inventory) AuditStock(ctx context.Context, nodeName string) ([]StockImbalance, error) {
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return nil, err
	}
	keys, err := scan(ctx, n, stockKeyPrefix+"*")
	if err != nil {
		return nil, err
	}
	var out []StockImbalance
	for len(keys) > 0 {
		batch := keys[:min(len(keys), auditBatch)]
		keys = keys[len(batch):]
		cmds := make([]*redis.SliceCmd, len(batch))
		_, _ = n.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range batch {
				cmds[i] = p.HMGet(ctx, k, auditFields...)
			}
			return nil
		}) // each command's own error is read below
		for i, k := range batch {
			if err := cmds[i].Err(); isWrongType(err) {
				out = append(out, StockImbalance{Node: nodeName, Key: k, Err: "the key is not a hash (WRONGTYPE): its counters cannot be read"})
				continue
			} else if err != nil {
				return nil, fmt.Errorf("%w: node %s: auditing the stock: %w", ErrUnavailable, nodeName, err)
			}
			if s, ok := auditHash(nodeName, k, cmds[i].Val()); !ok {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// auditHash checks the fields of stock hash key (available, reserved,
// confirmed, loaded; a missing one is 0: reserved and confirmed appear
// with the first take); ok is false when they do not add up.
func auditHash(nodeName, key string, f []any) (StockImbalance, bool) {
	s := StockImbalance{Node: nodeName, Key: key}
	dst := []*int64{&s.Available, &s.Reserved, &s.Confirmed, &s.Loaded}
	for i, name := range auditFields {
		if i >= len(f) || f[i] == nil {
			continue
		}
		str, isStr := f[i].(string)
		v, err := strconv.ParseInt(str, 10, 64)
		if !isStr || err != nil {
			s.Err = fmt.Sprintf("%s is %#v, not an integer", name, f[i])
			return s, false
		}
		*dst[i] = v
	}
	ok := s.Available >= 0 && s.Reserved >= 0 && s.Confirmed >= 0 && s.Loaded >= 0 &&
		s.Available+s.Reserved+s.Confirmed == s.Loaded
	return s, ok
}
