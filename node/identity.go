package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A new server process. A node's write sequence counts its writes; it
// does not name them. A node that came back with older data (a restart
// from an older RDB/AOF, a promoted replica that missed writes) is behind
// the writes some process saw acknowledged, but the marks of them reach
// the peers up to a heartbeat late; a process that saw less and wrote to
// the older data within that lag advanced the sequence past them, and
// the node's loss could no longer be seen by anyone: not by the marks,
// not by the process that saw the lost writes (its probe finds the stamp
// at or after what it saw). So the first read of the stamp on a server
// process other than the one recorded in the stamp (field run, the
// server's run_id) records when (run_at), and the node is refused, by
// every probe and every new connection of every process, until Settle
// passed since then: by then every running process has marked on the
// peers what it saw acknowledged (every heartbeat, and at once when it
// finds the node DOWN), and the marks are read again before the stamp
// by every new connection (dialcheck.go); a process that cannot reach
// the peers records what it found on the node itself (wentback.go). A
// node stamped before runs were recorded, or a new one, is not held back.

// The hold by this process's clock. The hold above is counted by the
// node's clock, and a node's clock may step (NTP setting the clock of a
// host that just rebooted): stepped forward past run_at + Settle, it ends
// the hold at once, and a process that saw less writes to the older data
// before the others marked what they saw (as above). So a process that
// saw the node on one server process and now finds it on another (the
// stamp script returns the run_id) also holds the node back, by its own
// monotonic clock, for Settle from when it first found the new one
// (localHold); the node is refused while either hold lasts. Every process
// that was using the node before it restarted is one that could write to
// the older data early, and each finds the new process on its first probe
// or new connection, by then at most a heartbeat and a probe timeout
// after the restart: its hold outlasts the others' marking as the
// node's own does. Not covered: a process that first contacts the node
// after the restart, during a hold its clock step ended. A clock stepped
// back instead would make the node's hold last the whole step: a read
// that finds run_at ahead of the node's clock counts the hold from then
// (stampSrc), so it ends at most Settle after the step
// (TestHoldBackEndsAfterTheNodeClockStepsBack).

// identity remembers what this process last saw of the node's stamp.
type identity struct {
	mu          sync.Mutex
	incarnation string    // guarded by mu; "" until the first successful probe
	gen         int64     // guarded by mu
	run         string    // guarded by mu: the server process's run_id last read with the stamp; "" before
	heldUntil   time.Time // guarded by mu: the end of this process's own hold of run (monotonic)
}

// localHold records run as the node's server process and returns how
// much longer this process holds the node back by its own clock: Settle
// from when it first found run, when it had seen another one before
// ("The hold by this process's clock"); 0 otherwise.
func (n *Node) localHold(run string) time.Duration {
	n.ident.mu.Lock()
	defer n.ident.mu.Unlock()
	if run != n.ident.run {
		if n.ident.run != "" && run != "" {
			n.ident.heldUntil = time.Now().Add(n.opts.Settle)
		}
		n.ident.run = run
	}
	return max(0, time.Until(n.ident.heldUntil))
}

// ServerRun returns the run_id of the node's server process as last read
// with its stamp, or "" before that, and always for a node whose stamp is
// not read (one without inventory data) or held back (Options.Settle 0).
// It changes when the server restarts or another server answers at the
// node's address (a promoted replica).
func (n *Node) ServerRun() string {
	n.ident.mu.Lock()
	defer n.ident.mu.Unlock()
	return n.ident.run
}

// Incarnation returns the node's stamp incarnation as last seen by a probe
// that read it and did not refuse the node for its identity or for being
// behind what was witnessed (those refusals name the stamp they read in
// their error, [Node.DownReason]; a node held back is included), or ""
// before any probe read it.
func (n *Node) Incarnation() string {
	n.ident.mu.Lock()
	defer n.ident.mu.Unlock()
	return n.ident.incarnation
}

// Mark returns what this process knows of the node's writes: the stamp's
// generation and incarnation as last seen by a probe, and the highest
// write sequence acknowledged to this process ([Node.ObserveSeq]). ok is
// false before any probe read the stamp (as Incarnation).
func (n *Node) Mark() (m Mark, ok bool) {
	n.ident.mu.Lock()
	defer n.ident.mu.Unlock()
	if n.ident.incarnation == "" {
		return Mark{}, false
	}
	return Mark{Gen: n.ident.gen, Incarnation: n.ident.incarnation, Seq: n.MaxSeq()}, true
}

// Probe checks that the node answers and is the node it is configured to
// be, bounded by the probe timeout, with the data it is known to have. It
// is one round trip to the node: one pipeline on a dedicated connection
// that bypasses the state gate and the breaker carries the stamp script,
// the drain read and, on first contact and every reconnect, the settings
// read (probeTrip). It never talks to peers: the marks they hold of the
// node were read off its path ([Node.SetWitnessed], witness.go). A
// Sentinel node's probe also asks its sentinels who the master is: on a
// reconnect each that answers must name the server reached, and while UP
// none may name another (sentinelsAgree). It
// changes no state itself: the caller (the health scheduler) calls
// [Node.SetUp] or [Node.SetDown].
//
// A stamp naming another node is an [ErrIdentity] error. On every probe of
// a node whose data must be kept the stamp is compared with the highest
// mark its peers were last seen to hold and with what this process saw
// acknowledged. A node whose data went back (its stamp's sequence is
// below a witnessed one, or its incarnation or generation differs from
// the witnessed) is refused with
// [ErrRolledBack]; one found without a stamp while peers witnessed it,
// with [ErrDataLost] (it is not re-stamped). Both stay refused, whichever
// process probes and after every process restarted, until an operator
// accepts the node's current data ([Node.Accept], `shardis node accept`).
// A node nobody witnessed is stamped on first contact. Probe is safe to
// call concurrently (probes serialize on the single probe connection).
//
// A failed probe of a node whose data is held back on a new server
// process (Critical, Settle above 0), on which this process saw writes
// acknowledged, asks to be probed again within half of what the hold
// leaves past a probe's timeout (soonProbe): its probe is what records a
// loss only this process knows of (its marks may not reach the peers:
// wentback.go), and it must land within the hold another process starts,
// whatever the scheduler's backoff for a DOWN node says.
func (n *Node) Probe(ctx context.Context) error {
	return n.soonProbe(n.probeOnce(ctx))
}

// soonProbe gives err (a failed probe's, nil passes) a RetryAfter of
// max((Settle - ProbeTimeout) / 2, 50ms) when the node is Critical, held
// back (Settle above 0), this process saw writes acknowledged on it, and
// err carries no RetryAfter of its own (a hold's). Before, a DOWN node was
// probed on the backoff list (1.5 s apart by default, past the 800 ms
// hold): another instance's hold ended, its writes took the node's
// sequence past what this process saw acknowledged before its next
// probe, and a loss only it knew of was never recorded
// (TestLossSeenByAProcessOnItsBackoffStaysRefused, found by a review).
func (n *Node) soonProbe(err error) error {
	if err == nil || !n.opts.Critical || n.opts.Settle <= 0 || n.MaxSeq() <= 0 {
		return err
	}
	var own interface{ RetryAfter() time.Duration }
	if errors.As(err, &own) {
		return err
	}
	return &probeSoonError{err: err, after: max((n.opts.Settle-n.opts.ProbeTimeout)/2, 50*time.Millisecond)}
}

// probeSoonError is a failed probe's error (err) asking to be probed again
// after at most after (health.RetryAfterError): soonProbe.
type probeSoonError struct {
	err   error
	after time.Duration
}

func (e *probeSoonError) Error() string             { return e.err.Error() }
func (e *probeSoonError) Unwrap() error             { return e.err }
func (e *probeSoonError) RetryAfter() time.Duration { return e.after }

// probeOnce is Probe without soonProbe.
func (n *Node) probeOnce(ctx context.Context) error {
	probe := n.probeClient()
	if err := n.connectProbe(ctx, probe); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, n.opts.ProbeTimeout)
	defer cancel()
	// A Sentinel group whose probe reached another master is met anew
	// too: its settings read, its sentinels asked to agree.
	reconnect := n.State() != StateUp || (n.IsSentinel() && n.masterMoved())
	// What was acknowledged before the stamp is read: the node's sequence
	// can only be at least that (a write acknowledged during the read may
	// be past the sequence the read returns).
	ackedBefore := n.MaxSeq()
	var seen Mark
	var witnessed bool
	if n.opts.Critical {
		seen, witnessed = n.Witnessed()
	}
	// Stamp a missing stamp only on a node nobody is known to have seen:
	// not witnessed by peers and, for a node whose data must be kept, not
	// seen by this process either.
	allow := !witnessed && !(n.opts.Critical && n.Incarnation() != "")
	withSettings := reconnect || n.settings.Load() == nil
	trip, err := n.probeTrip(ctx, probe, allow, withSettings)
	if err != nil {
		return err
	}
	n.seeRun(trip.stamp)
	stamp, created, err := n.verifyStamp(trip.stamp, witnessed, seen)
	if err != nil {
		n.recordWentBack(ctx, probe, stamp, err) // missing, or behind the peers' marks
		return err
	}
	prev, err := n.checkLocal(stamp, ackedBefore)
	if err != nil {
		n.recordWentBack(ctx, probe, stamp, err) // behind what this process saw
		return err
	}
	if err := n.settling(trip.stamp); err != nil {
		return err
	}
	if n.IsSentinel() {
		if err := n.sentinelsAgree(ctx, n.MasterAddr(), !reconnect); err != nil {
			if errors.Is(err, errMasterNamedElsewhere) {
				n.resetProbe(probe) // the next probe dials anew through the sentinels
			}
			return &Error{Node: n.opts.Name, Addr: n.opts.Addr, Err: fmt.Errorf("probe: %w", err)}
		}
	}
	if withSettings {
		n.applySettings(trip.config, trip.info) // first contact and every reconnect
	}
	n.applyDrains(trip.drains, trip.drainGen)
	if prev == "" && created {
		n.log.Info("node stamped", "incarnation", stamp.Incarnation)
	}
	return nil
}

// verifyStamp reads the stamp script's reply res: the node's mark, and
// whether this probe created the stamp. A missing stamp (the node
// restarted empty while peers or this process had seen it), a node
// stamped under another name, or a mark behind the one peers witnessed
// (seen, when witnessed) is refused; a mark behind is returned with its
// refusal (recordWentBack writes it conditionally on it).
func (n *Node) verifyStamp(res []any, witnessed bool, seen Mark) (stamp Mark, created bool, err error) {
	if len(res) != 7 {
		return Mark{}, false, n.refusal(fmt.Errorf("%w: unexpected stamp reply %v", ErrIdentity, res))
	}
	name, _ := res[0].(string)
	inc, _ := res[1].(string)
	c, _ := res[2].(int64)
	seq, _ := res[3].(int64)
	gen, _ := res[4].(int64)
	if name == "" {
		if !witnessed {
			seen, _ = n.Mark()
		}
		return Mark{}, false, n.refusal(fmt.Errorf("%w: %s is missing, but incarnation %s was seen up to write %d: "+
			"the node restarted empty; accept its data with `shardis node accept %s`", ErrDataLost, StampKey,
			seen.Incarnation, seen.Seq, n.opts.Name))
	}
	if name != n.opts.Name {
		return Mark{}, false, n.refusal(fmt.Errorf("%w: %s is stamped as node %q, configured as %q (ports swapped?)",
			ErrIdentity, StampKey, name, n.opts.Name))
	}
	stamp = Mark{Gen: gen, Incarnation: inc, Seq: seq}
	if witnessed {
		if err := behind(stamp, seen, "other nodes witnessed"); err != nil {
			return stamp, false, n.rolledBack(err)
		}
	}
	return stamp, c == 1, nil
}

// seeRun starts this process's hold of the server process the stamp
// script's reply res names, if it is a new one (localHold), whatever the
// probe then finds: the hold runs from when a probe first met the
// process. A node refused on it (gone back, restarted empty) and
// accepted later is not held back again from its first probe after the
// accept: it was, that long after the restart that every process had
// marked what it saw, and the accept raised the generation above those
// marks.
func (n *Node) seeRun(res []any) {
	if !n.opts.Critical || n.opts.Settle <= 0 || len(res) != 7 {
		return
	}
	if run, _ := res[6].(string); run != "" {
		n.localHold(run)
	}
}

// settling refuses a node whose stamp script's reply res says its data is
// still held back ("A new server process"), or that this process holds
// back by its own clock ("The hold by this process's clock").
func (n *Node) settling(res []any) error {
	if !n.opts.Critical || n.opts.Settle <= 0 {
		return nil
	}
	run, _ := res[6].(string)
	left, _ := res[5].(int64)
	hold := max(time.Duration(left)*time.Millisecond, n.localHold(run))
	if hold > 0 {
		return n.refusal(&HeldBackError{Left: hold})
	}
	return nil
}

// connectProbe establishes the probe's connection when it has none: the
// TCP connection and go-redis's handshake (HELLO) before a PING, two round
// trips that a probe's own round trip must not pay on a slow link. It is
// bounded by the probe timeout and the dial timeout together, and each
// read by the probe timeout.
func (n *Node) connectProbe(ctx context.Context, probe *redis.Client) error {
	if probe.PoolStats().IdleConns > 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.opts.DialTimeout+n.opts.ProbeTimeout)
	defer cancel()
	err := probe.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		n.resetProbe(probe)
	}
	return &Error{Node: n.opts.Name, Addr: n.opts.Addr, Err: fmt.Errorf("probe: connecting: %w", err)}
}

// probeReply is what the one round trip of a probe read.
type probeReply struct {
	stamp  []any             // the stamp script's reply
	drains map[string]string // the drain hash
	// drainGen is the node's drain generation before the read (drain.go)
	drainGen uint64
	config   *redis.Cmd // settings (settingsCmds); nil unless asked for
	info     *redis.StringCmd
}

// probeTrip sends a probe's commands as one pipeline: the stamp script
// (EVAL with its source, so that a restarted node's empty script cache
// costs no second round trip), the drain read and, withSettings, the
// settings read. allow lets the script stamp a node without a stamp.
func (n *Node) probeTrip(ctx context.Context, probe *redis.Client, allow, withSettings bool) (probeReply, error) {
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	var out probeReply
	out.drainGen = n.drainGen.Load()
	pipe := probe.Pipeline()
	st := stampScript.Eval(ctx, pipe, []string{StampKey}, n.opts.Name, newIncarnation(),
		strconv.FormatInt(time.Now().UnixMilli(), 10), flag(allow), flag(n.IsSentinel()), n.settleMs())
	dr := pipe.HGetAll(ctx, DrainKey)
	if withSettings {
		out.config, out.info = settingsCmds(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	res, err := st.Slice()
	if err != nil {
		var reply redis.Error
		if errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "SHARDIS_REPLICA") {
			// A demoted master on an old connection: dial through the
			// sentinels again.
			n.resetProbe(probe)
			return out, &Error{Node: n.opts.Name, Addr: n.opts.Addr, Err: fmt.Errorf("probe: %w (%s at %s)", ErrNotMaster,
				strings.TrimPrefix(reply.Error(), "SHARDIS_REPLICA "), n.MasterAddr())}
		}
		if errors.As(err, &reply) {
			if refused := n.wentBack(reply.Error()); refused != nil {
				return out, refused
			}
		} else {
			n.resetProbe(probe) // the connection failed, not the node's script
		}
		return out, &Error{Node: n.opts.Name, Addr: n.opts.Addr, Err: fmt.Errorf("probe: %w", err)}
	}
	if out.drains, err = dr.Result(); err != nil {
		var reply redis.Error
		if !errors.As(err, &reply) {
			n.resetProbe(probe)
		}
		return out, &Error{Node: n.opts.Name, Addr: n.opts.Addr, Err: fmt.Errorf("probe: reading %s: %w", DrainKey, err)}
	}
	out.stamp = res
	return out, nil
}

// checkLocal compares the stamp with what this process saw of the node
// (ackedBefore: the highest write sequence acknowledged before the stamp
// was read), records the stamp's incarnation and generation, and returns
// the incarnation seen before, or the refusal of a node that went back.
func (n *Node) checkLocal(stamp Mark, ackedBefore int64) (string, error) {
	n.ident.mu.Lock()
	defer n.ident.mu.Unlock()
	prev, prevGen := n.ident.incarnation, n.ident.gen
	if stamp.Gen > prevGen {
		n.maxSeq.Store(stamp.Seq) // accepted: a new generation starts from its own sequence
	}
	local := Mark{Gen: prevGen, Incarnation: prev, Seq: ackedBefore}
	if !n.opts.Critical && prev != "" && prev != stamp.Incarnation {
		// A node without data that must be kept (a cache) may come back
		// empty: say so and use it.
		n.log.Error("NODE LOST ITS DATA: stamp was missing, node re-stamped with a new incarnation",
			"previous_incarnation", prev, "incarnation", stamp.Incarnation)
	} else if prev != "" && stamp.Gen <= prevGen {
		if err := behind(stamp, local, "this process saw acknowledged"); err != nil {
			return prev, n.rolledBack(err)
		}
	}
	n.ident.incarnation, n.ident.gen = stamp.Incarnation, stamp.Gen
	return prev, nil
}

// behind says how stamp is behind mark (what was seen elsewhere), or nil
// when it is not.
func behind(stamp, mark Mark, who string) error {
	switch {
	case mark.Gen > stamp.Gen:
		return fmt.Errorf("its stamp is of generation %d, %s generation %d", stamp.Gen, who, mark.Gen)
	case mark.Gen < stamp.Gen:
		return nil // accepted since
	case mark.Incarnation != stamp.Incarnation:
		return fmt.Errorf("its stamp is incarnation %s, %s incarnation %s", stamp.Incarnation, who, mark.Incarnation)
	case mark.Seq > stamp.Seq:
		return fmt.Errorf("its write sequence is %d, %s up to %d: it came back with older data (restored snapshot, lost writes)",
			stamp.Seq, who, mark.Seq)
	}
	return nil
}

// settleMs is Options.Settle in ms, as the stamp script takes it.
func (n *Node) settleMs() string {
	if !n.opts.Critical {
		return "0"
	}
	return strconv.FormatInt(n.opts.Settle.Milliseconds(), 10)
}

func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
