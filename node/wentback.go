package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A loss seen by one process.
//
// The marks on the peers make a node's loss visible to every process
// (witness.go), and the hold after a new server process gives every
// running process time to write them ("A new server process",
// identity.go). A process that reaches the node but not its peers (a
// partition between it and them, the peers busy or DOWN) cannot write
// them: it refuses the node itself (its probe compares the stamp with
// what it saw acknowledged), but the others, holding no mark of what it
// saw, used the node once the hold ended, their writes advanced its
// sequence past what the cut-off process saw, and from then on nobody,
// that process included, could tell that acknowledged writes were gone.
//
// So the process that finds the node gone back records that on the node
// itself: a probe that refuses a node whose data must be kept
// (Options.Critical) for having gone back ([ErrRolledBack]) or come back
// empty ([ErrDataLost]) writes the field went_back into the node's stamp
// (recordWentBack), conditionally on the stamp it compared being still
// there (the same generation and incarnation; for an empty node, still
// no stamp), so an accept in between is never undone. From then on the
// stamp script refuses the node to every probe and every new connection
// of every process (SHARDIS_WENT_BACK, read as the same error), and no
// probe stamps an empty node that has it, until an operator accepts the
// node's data ([Node.Accept] deletes the field).
//
// The rule that makes it safe: a node's stamp is read on a new server
// process only by probes and by new connections' dial checks (readStamp),
// which never stamp and write no data: on first contact with a server
// process they record only its run, run_at and replid (the hold's start, as a
// probe would; stampSrc), which no comparison here reads; every
// process that uses the node probes it at least once per heartbeat while
// it is UP, and while it is DOWN, if it saw writes acknowledged there, at
// least every half of what the hold leaves past a probe's timeout
// (soonProbe, identity.go: the backoff of a DOWN node, 1.5 s by default,
// outlasted the 800 ms hold, and another instance's writes hid a loss
// only this process knew of: found by a review), and the hold
// (Options.Settle, at least a heartbeat and a probe timeout) keeps every
// process off the node until then; so a process that saw
// writes the node lost and can reach it compares the stamp before any
// other process writes, and records what it found before the hold ends.
// The field is only ever written on a refusal a probe proved (the stamp
// behind what this process or the peers saw), so a current node never
// gets it. What it cannot see: a process cut off from the node and its
// peers for the whole hold (then neither marks nor this field reach
// anyone); witness.go's other limits.

// A dataset replaced in the same server process. A server keeps its
// run_id when it becomes a replica and back (REPLICAOF, SLAVEOF: an
// operator, a Sentinel that monitors a node configured as standalone),
// yet a full resync replaces its whole dataset with its master's: made a
// replica of a lagging copy of itself and promoted back, the node holds
// the copy's older stamp, whose run (replicated from the node itself) is
// the node's own run_id, so the hold after a new server process
// (identity.go) never began, and a process that saw less could write to
// the older data at once, hiding the loss as described there. So the
// stamp also records the server's master_replid (field replid), which
// every promotion (REPLICAOF NO ONE) and every full resync changes: a
// stamp read with another replid on the same server process starts the
// hold as a new server process does (stampSrc;
// TestFullResyncFromALaggingCopyIsHeldBack). Other changes of the replid
// cost one hold of a node that lost nothing: a promotion that lost
// nothing (a coordinated FAILOVER and back), and a master's first
// replica after it had none for repl-backlog-ttl (Redis gives the master
// a new replication id as it creates its backlog). A stamp written
// before replids were recorded only records it. Not covered: the hold by
// this process's clock (identity.go) is kept per run_id, so a dataset
// replaced in the same process is held by the node's clock only.

// wentBackField is the stamp's field that records a loss ("A loss seen
// by one process", above).
const wentBackField = "went_back"

// wentBackReply begins the stamp script's error reply for a node whose
// stamp has wentBackField: the field's value follows.
const wentBackReply = "SHARDIS_WENT_BACK "

// The loss kinds wentBackField's value begins with, then a space and the
// probe's reason.
const (
	wentBackRolled = "rolled_back"
	wentBackEmpty  = "data_lost"
)

// markWentBackScript writes wentBackField when the stamp KEYS[1] is still
// the one a probe refused: ARGV[1] the kind; for wentBackRolled, ARGV[2]
// and ARGV[3] the stamp's incarnation and generation as read; for
// wentBackEmpty, no name. ARGV[4] is the reason. Returns 1 when written.
// The HDEL first takes no memory, so the write is let through on a node
// over its maxmemory (stampSrc says why).
var markWentBackScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'name', 'incarnation', 'gen')
if ARGV[1] == '` + wentBackEmpty + `' then
  if f[1] then return 0 end
elseif f[2] ~= ARGV[2] or (tonumber(f[3]) or 0) ~= tonumber(ARGV[3]) then
  return 0
end
redis.call('HDEL', KEYS[1], '` + wentBackField + `')
redis.call('HSET', KEYS[1], '` + wentBackField + `', ARGV[1] .. ' ' .. ARGV[4])
return 1
`)

// recordWentBack writes what a probe found (refused, its refusal of the
// stamp read as stamp; a zero stamp for a missing one) into the node's
// stamp, when it is a loss of a node whose data must be kept. It is best
// effort: a failure is logged, the node stays refused by this process
// either way.
func (n *Node) recordWentBack(ctx context.Context, probe *redis.Client, stamp Mark, refused error) {
	if !n.opts.Critical {
		return
	}
	kind := wentBackRolled
	switch {
	case errors.Is(refused, ErrDataLost):
		kind = wentBackEmpty
	case !errors.Is(refused, ErrRolledBack):
		return
	}
	why := refused.Error()
	var e *Error
	if errors.As(refused, &e) {
		why = e.Err.Error()
	}
	wrote, err := markWentBackScript.Run(ctx, probe, []string{StampKey}, kind, stamp.Incarnation,
		strconv.FormatInt(stamp.Gen, 10), why).Int64()
	switch {
	case err != nil:
		n.log.Error("could not record on the node that it went back; other processes may use it", "err", err)
	case wrote == 1:
		n.log.Error("recorded on the node that it went back: refused by every process until accepted", "why", why)
	}
}

// wentBack is the refusal of a node whose stamp records a loss: reply is
// the stamp script's error reply, or nil when it is another error.
func (n *Node) wentBack(reply string) error {
	v, ok := strings.CutPrefix(reply, wentBackReply)
	if !ok {
		return nil
	}
	kind, why, _ := strings.Cut(v, " ")
	cause := ErrRolledBack
	if kind == wentBackEmpty {
		cause = ErrDataLost
	}
	why = strings.TrimPrefix(why, cause.Error()+": ")
	return n.refusal(fmt.Errorf("%w (recorded on the node by the process that found it): %s", cause, why))
}
