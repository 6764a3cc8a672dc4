package node_test

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// heldLink forwards connections to a server and holds, on the one that
// carries a SLAVEOF NO ONE, every byte from that command on, both ways,
// until released: a link cut between a sentinel and the replica it
// promotes, whose command TCP delivers once the cut heals.
type heldLink struct {
	ln       net.Listener
	to       string
	mu       sync.Mutex
	held     bool
	released chan struct{}
}

// startHeldLink listens on a free loopback port and forwards to to.
func startHeldLink(t *testing.T, to string) *heldLink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &heldLink{ln: ln, to: to, released: make(chan struct{})}
	t.Cleanup(func() { _ = ln.Close(); l.release() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go l.serve(c)
		}
	}()
	return l
}

// port is the port the link listens on.
func (l *heldLink) port() int { return l.ln.Addr().(*net.TCPAddr).Port }

// isHeld reports whether a SLAVEOF NO ONE is held.
func (l *heldLink) isHeld() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.held }

// release delivers what is held and forwards from then on.
func (l *heldLink) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.released:
	default:
		close(l.released)
	}
}

// serve forwards c to the server, holding from the first SLAVEOF NO ONE
// seen until release; what it held reaches the server even when c closed
// meanwhile (the kernel of a sentinel that closed its link still delivers
// what it had sent).
func (l *heldLink) serve(c net.Conn) {
	s, err := net.Dial("tcp", l.to)
	if err != nil {
		_ = c.Close()
		return
	}
	hold := make(chan struct{})
	go func() { // server to client: stops once the command is held, until released
		buf := make([]byte, 32<<10)
		for {
			k, err := s.Read(buf)
			select {
			case <-hold:
				<-l.released
			default:
			}
			if k > 0 {
				if _, werr := c.Write(buf[:k]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = c.Close()
	}()
	buf := make([]byte, 32<<10)
	var pending []byte
	held := false
	for {
		k, err := c.Read(buf)
		data := buf[:k]
		if !held && bytes.Contains(bytes.ToUpper(data), []byte("SLAVEOF\r\n$2\r\nNO")) {
			l.mu.Lock()
			first := !l.held
			l.held = true
			l.mu.Unlock()
			if first {
				held = true
				close(hold)
			}
		}
		if held {
			pending = append(pending, data...)
		} else if k > 0 {
			if _, werr := s.Write(data); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if held {
		<-l.released
		_, _ = s.Write(pending)
		time.Sleep(2 * time.Second) // the server reads what it was sent before it sees the close
	}
	_ = s.Close()
}

// heldGroup is a priority group (startPriorityGroup) whose replica p
// every sentinel and this process reach through a heldLink, and a node
// of it.
type heldGroup struct {
	*hiddenGroup
	link   *heldLink
	pAddr  string
	mc, pc *redis.Client
	n      *node.Node
	run    string
}

// startHeldGroup starts the group, has p announce the link's port (and,
// with repl, replicate as the user repl, which the test can turn off),
// resets the sentinels so they list p at the link only, and starts a
// node of the group.
func startHeldGroup(t *testing.T, ctx context.Context, name string, repl bool) *heldGroup {
	h := &heldGroup{hiddenGroup: startPriorityGroup(t, ctx, redistest.GroupOptions{Name: name, Replicas: 2, FailoverTimeout: 6 * time.Second})}
	h.link = startHeldLink(t, h.p.Addr())
	h.pAddr = "127.0.0.1:" + strconv.Itoa(h.link.port())
	h.pc = h.g.Client(t, h.p.Addr())
	h.mc = h.g.Client(t, h.m.Addr())
	if repl {
		if err := h.mc.Do(ctx, "acl", "setuser", "repl", "on", ">repl-pw", "+psync", "+replconf", "+ping", "+sync").Err(); err != nil {
			t.Fatal(err)
		}
		if err := h.pc.ConfigSet(ctx, "masteruser", "repl").Err(); err != nil {
			t.Fatal(err)
		}
		if err := h.pc.ConfigSet(ctx, "masterauth", "repl-pw").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.pc.ConfigSet(ctx, "replica-announce-port", strconv.Itoa(h.link.port())).Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.pc.Do(ctx, "client", "kill", "type", "master").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the master lists p at the link's port", func() bool {
		info, err := h.mc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "port="+strconv.Itoa(h.link.port())+",state=online")
	})
	for _, c := range h.sentinels {
		if err := c.Reset(ctx, h.g.Name()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 40*time.Second, "every sentinel lists p at the link only, r, and the other sentinels", func() bool {
		for _, c := range h.sentinels {
			m, err := c.Master(ctx, h.g.Name()).Result()
			reps, err2 := c.Replicas(ctx, h.g.Name()).Result()
			if err != nil || err2 != nil || m["num-other-sentinels"] != "2" || len(reps) != 2 {
				return false
			}
			for _, rep := range reps {
				a := rep["ip"] + ":" + rep["port"]
				if a != h.pAddr && (a != h.r.Addr() || rep["slave-priority"] != "0") {
					return false
				}
			}
		}
		return true
	})
	h.n = newNode(t, node.Options{
		Name:         "s1",
		Sentinel:     &node.SentinelOptions{Master: name, Addrs: h.g.SentinelAddrs()},
		ProbeTimeout: 2 * time.Second,
	}, nil)
	probeUntil(t, h.n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	info, err := h.mc.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	h.run = node.InfoRunID(info)
	return h
}

// abortHeld makes the master look down until a leader's REPLICAOF NO ONE
// to p is held on the link and its failover aborted, then up again.
func (h *heldGroup) abortHeld(t *testing.T, ctx context.Context) {
	setPing(t, ctx, h.mc, false)
	waitFor(t, 40*time.Second, "a leader sent p REPLICAOF NO ONE, held on its link", h.link.isHeld)
	h.waitAborted(t, ctx)
	setPing(t, ctx, h.mc, true)
}

// writeAcked writes the reservation on the master and waits for one
// replica.
func (h *heldGroup) writeAcked(t *testing.T, ctx context.Context) {
	if err := h.mc.Set(ctx, "reservation", "acked", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if w, err := h.mc.Wait(ctx, 1, 2*time.Second).Result(); err != nil || w < 1 {
		t.Fatalf("WAIT: %d, %v", w, err)
	}
}

// releaseAndPromote delivers the held command (p becomes a master), then
// makes the master look down until an election promotes p and the old
// master resynced from it, and fails the test when the reservation is
// not on p.
func (h *heldGroup) releaseAndPromote(t *testing.T, ctx context.Context, what string) {
	h.link.release()
	waitFor(t, 10*time.Second, "p ran the held REPLICAOF NO ONE", func() bool {
		info, err := h.pc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	})
	setPing(t, ctx, h.mc, false)
	h.waitPromotedAndResynced(t, ctx, h.mc, h.link.port())
	if v, err := h.pc.Get(ctx, "reservation").Result(); err != nil || v != "acked" {
		t.Fatalf("a write ConfirmMaster acknowledged on the master %s, %s, is gone from p %s, which a later election "+
			"promoted (GET: %q, %v)", h.m.Addr(), what, h.pAddr, v, err)
	}
}

// A failover whose REPLICAOF NO ONE is held on the link from its leader
// to p (a cut that TCP heals later): the leader, never seeing p report
// master, aborts after failover-timeout; every sentinel is then idle with
// the old configuration, sees the master up, and p (reached by this
// process, not by the leader's link) answers role:slave, so the vote
// ends early. The link then delivers the command: p is a master of its
// own, still within electionBound of the vote. A write confirmed on the
// master now is not on p, and once the master looks down again the
// sentinels' next election promotes p (r has replica-priority 0) and the
// old master is resynced from it: the write is gone. Within the bound a
// vote's early end must hold in every round, not once.
func TestReplicaPromotedByAHeldCommandAfterAnEarlyEndRefusesWrites(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	h := startHeldGroup(t, ctx, "heldpromo", false)
	h.abortHeld(t, ctx)
	first := time.Now()
	waitFor(t, 15*time.Second, "the vote ended early", func() bool { return h.n.ConfirmMaster(ctx, h.run) == nil })
	h.link.release()
	waitFor(t, 10*time.Second, "p ran the held REPLICAOF NO ONE", func() bool {
		info, err := h.pc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	})
	h.writeAcked(t, ctx)
	refused := h.n.ConfirmMaster(ctx, h.run)
	t.Logf("the write's round ran %v after the first round that saw the vote", time.Since(first))
	if refused != nil {
		t.Logf("ConfirmMaster refused the write while p, promoted by the held command, is a master: %v", refused)
		return
	}
	h.releaseAndPromote(t, ctx, "after the held REPLICAOF NO ONE made p a master within the bound of the vote")
}

// As above, but p is also cut off from the master (its replication
// user turned off): p still answers role:slave, its link to the master
// down, when the vote would end early. A write confirmed then is not on
// p, and the held command, delivered after, makes p a master without
// it, which the next election promotes. A replica that follows must
// also be linked to the master.
func TestReplicaCutFromTheMasterDoesNotEndAVote(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	h := startHeldGroup(t, ctx, "heldcut", true)
	h.abortHeld(t, ctx)
	if err := h.mc.Do(ctx, "acl", "setuser", "repl", "off").Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.mc.Do(ctx, "client", "kill", "user", "repl").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "p's link to the master is down", func() bool {
		info, err := h.pc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:down")
	})
	first := time.Now()
	h.writeAcked(t, ctx)
	acked, refused := false, error(nil)
	for end := time.Now().Add(8 * time.Second); !acked && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		refused = h.n.ConfirmMaster(ctx, h.run)
		acked = refused == nil
	}
	t.Logf("the write's last round ran %v after the first round that saw the vote", time.Since(first))
	if !acked {
		t.Logf("ConfirmMaster refused the write while p, holding the aborted failover's REPLICAOF NO ONE, is cut off "+
			"from the master: %v", refused)
		return
	}
	h.releaseAndPromote(t, ctx, "while p, cut off from it, had the held REPLICAOF NO ONE on its way")
}
