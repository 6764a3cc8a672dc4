package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// Connections dialled while the node is in use.
//
// go-redis drops a pooled connection whose server went away without any
// command noticing (its health check when it takes an idle connection
// from the pool) and dials a new one in its place. A node that restarted
// between two probes (from an older snapshot, after losing writes not yet
// on disk, or empty) would then serve commands before any probe saw its
// stamp: writes applied to older data and acknowledged, stock taken
// twice.
//
// The rule: once this process has seen the stamp of a node whose data
// must be kept (Options.Critical), every command connection dialled to it
// reads the stamp, on that connection, before go-redis hands it to a
// command (checkDial, called by the dial hooks: hook.DialHook and the
// gated client's dialer), and the stamp is compared with what this
// process saw acknowledged before the read and with the marks the node's
// peers hold of it (Options.Witnesses), read after the dial: what other
// processes saw acknowledged, up to their marks' lag (witness.go). Both
// are read before the stamp, never after it: every write they name was
// then acknowledged before the stamp was read, so a current node's stamp
// is at or after them, where a mark read after the stamp could name a
// write acknowledged in between and a current node would look rolled
// back (TestDialCheckReadsMarksBeforeStamp). A
// server's data does not go back while it runs, and a connection reaches
// one server process, so a connection whose first read found the stamp
// at or after both serves nothing older. A stamp that went back
// ([ErrRolledBack]), a missing one ([ErrDataLost]), one naming another
// node ([ErrIdentity]) and, for a Sentinel node, a server that is not a
// master ([ErrNotMaster]) fail the dial, and so the command that needed
// the connection, before the command was sent: a node failure, which
// makes the health scheduler probe the node at once and mark it DOWN with
// the reason (the probe compares with the marks just read too). A stamp
// of a later generation (accepted since) is used, as a probe would.
//
// The stamp read is one round trip on the new connection, before
// go-redis's own handshake (so it authenticates and selects the database
// itself): it waits where the command would have waited (a paused or
// busy server) and is bounded like it, by the command timeout. The
// peers' marks are one round trip to each UP peer, concurrently, bounded
// by the probe timeout; the dials that wait while one read runs share the
// next (peerRead). New connections only: a pooled connection pays
// nothing.

// checkDial applies the rule above to conn, a command connection just
// dialled: nil when it may be used, else why not.
func (n *Node) checkDial(conn net.Conn) error {
	if !n.opts.Critical {
		return nil
	}
	dialed := time.Now()
	seen, ok := n.Mark() // before the read: the stamp can only be at or after it
	if !ok {
		return nil // nothing seen yet that could go back: first contact is the scheduler's probe
	}
	// the peers' marks before the stamp too: a mark read after it may be
	// of a write acknowledged in between, which the stamp read missed
	if n.opts.Witnesses != nil {
		n.readPeers(dialed)
	}
	view, witnessed := n.Witnessed()
	res, err := n.readStamp(conn)
	if err != nil {
		var reply respError
		if errors.As(err, &reply) {
			if refused := n.wentBack(string(reply)); refused != nil {
				return refused // a loss recorded on the node (wentback.go)
			}
		}
		return n.refusal(fmt.Errorf("reading the stamp on a new connection: %w", err))
	}
	stamp, _, err := n.verifyStamp(res, witnessed, view) // identity, a missing stamp, the peers' marks
	if err != nil {
		return err
	}
	if err := behind(stamp, seen, "this process saw acknowledged"); err != nil {
		return n.rolledBack(err)
	}
	return n.settling(res) // a new server process: held back (identity.go)
}

// peerRead is the bookkeeping of the dial checks' reads of the peers'
// marks: one at a time, and a read that began after a connection was
// dialled serves it (the marks only rise), so a burst of dials shares one
// or two reads.
type peerRead struct {
	mu    sync.Mutex // held while a dial check reads the peers
	began time.Time  // when the last read began; guarded by mu
}

// readPeers raises the node's view of its peers' marks
// ([Node.SetWitnessed]) with a read that began after dialed: its own,
// unless one did already. Peers that do not answer within the probe
// timeout (and the implementation's own bound) leave the view as it was
// (witness.go: what it cannot see).
func (n *Node) readPeers(dialed time.Time) {
	n.peerRead.mu.Lock()
	defer n.peerRead.mu.Unlock()
	if n.peerRead.began.After(dialed) {
		return
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ProbeTimeout)
	defer cancel()
	if m, ok := n.opts.Witnesses.Witnessed(ctx, n.opts.Name); ok {
		n.SetWitnessed(m)
	}
	n.peerRead.began = began
}

// rolledBack is the refusal of a node whose stamp is behind a mark (why).
func (n *Node) rolledBack(why error) *Error {
	return n.refusal(fmt.Errorf("%w: %v; accept its data with `shardis node accept %s`", ErrRolledBack, why, n.opts.Name))
}

// readStamp reads the stamp on conn in one round trip, in the shape of the
// stamp script's reply (verifyStamp): {name ("" when missing),
// incarnation, 0, seq, gen, settle, run}. It authenticates and selects the node's
// database first when configured; for a Sentinel node it refuses a server
// whose role is not master.
func (n *Node) readStamp(conn net.Conn) ([]any, error) {
	// The command timeout, not the dial's context: go-redis dials under
	// the dial timeout, and the read waits as long as a command would.
	if err := conn.SetDeadline(time.Now().Add(n.opts.CommandTimeout)); err != nil {
		return nil, err
	}
	var cmds [][]string
	switch {
	case n.opts.Password != "" && n.opts.Username != "":
		cmds = append(cmds, []string{"AUTH", n.opts.Username, n.opts.Password})
	case n.opts.Password != "":
		cmds = append(cmds, []string{"AUTH", n.opts.Password})
	}
	if n.opts.DB != 0 {
		cmds = append(cmds, []string{"SELECT", strconv.Itoa(n.opts.DB)})
	}
	if n.IsSentinel() {
		cmds = append(cmds, []string{"ROLE"})
	}
	// the stamp script, never stamping (the scheduler's probe does), its
	// role check done by ROLE above
	cmds = append(cmds, []string{"EVAL", stampSrc, "1", StampKey, n.opts.Name, "-", "0", "0", "0", n.settleMs()})
	if _, err := conn.Write(appendCommands(nil, cmds)); err != nil {
		return nil, err
	}
	rd := bufio.NewReaderSize(conn, 256)
	var last any
	for _, c := range cmds {
		v, err := readRESP(rd, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c[0], err)
		}
		if c[0] == "ROLE" {
			if role, _ := first(v).(string); role != "master" {
				return nil, fmt.Errorf("%w: the server reached has role %q", ErrNotMaster, role)
			}
		}
		last = v
	}
	if rd.Buffered() != 0 {
		return nil, errors.New("unexpected data after the replies")
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	f, _ := last.([]any)
	if len(f) != 7 {
		return nil, fmt.Errorf("unexpected stamp reply %v", last)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	num := func(v any) int64 { i, _ := v.(int64); return i }
	return []any{str(f[0]), str(f[1]), int64(0), num(f[3]), num(f[4]), num(f[5]), str(f[6])}, nil
}

// first is v's first element when v is a non-empty array, else nil.
func first(v any) any {
	if a, ok := v.([]any); ok && len(a) > 0 {
		return a[0]
	}
	return nil
}

// afterDial is what the dial hooks do with a dial's outcome: a connection
// is checked (checkDial) and closed when refused; a failed or refused
// dial is recorded (clients.dialed), so the next DOWN→UP renews the
// client. A Sentinel group's dial that found no master is a node failure
// (noMaster).
func (n *Node) afterDial(conn net.Conn, err error) (net.Conn, error) {
	err = n.noMaster(err)
	if err == nil {
		if err = n.checkDial(conn); err != nil {
			_ = conn.Close()
			conn = nil
		}
	}
	n.client.dialed(err)
	return conn, err
}
