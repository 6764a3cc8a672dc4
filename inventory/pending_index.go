package inventory

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The pending index's members, in Go ([PendingKey] holds the rule;
// lua/pending_index.lua is the scripts' side).

// PendingMember returns the member of [PendingKey] that part partID, with
// record fields f (as [PartRead.Fields] returns them; empty when the record
// is gone), is indexed under: "queue:offset" for a stock part, the id for
// any other (pend_member of lua/pending_index.lua, the scripts' one).
func PendingMember(partID string, f map[string]string) string {
	q, ok := redoQueueNumber(f["redo"])
	off, err := strconv.ParseInt(f["offset"], 10, 64)
	if f["kind"] != string(PartStock) || !ok || err != nil || off <= 0 {
		return partID
	}
	return q + ":" + strconv.FormatInt(off, 10)
}

// PendingPartID returns the id of the part that member of [PendingKey]
// names, reading node c (a direct client of the node): member itself when
// it is an id, else the redo-log entry at its place ("" when the log has
// none there). For tools that read the index straight from a node.
func PendingPartID(ctx context.Context, c redis.Cmdable, member string) (string, error) {
	if strings.Contains(member, "|") {
		return member, nil
	}
	q, o, ok := strings.Cut(member, ":")
	qn, qerr := strconv.Atoi(q)
	off, oerr := strconv.ParseInt(o, 10, 64)
	if !ok || qerr != nil || oerr != nil || qn < 0 || off <= 0 {
		return member, nil // not a place: an id of an odd form
	}
	at := strconv.FormatInt(off, 10)
	for _, key := range []string{redoSegmentKey(RedoLogKey(qn), off), redoSegmentKeyV1(RedoLogKey(qn), off), RedoLogKey(qn)} {
		ids, err := c.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: at, Max: at}).Result()
		if err != nil {
			return "", err
		}
		if len(ids) > 0 {
			return ids[0], nil
		}
	}
	return "", nil
}
