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
	h := startPriorityGroup(t, ctx, redistest.GroupOptions{Name: "heldpromo", Replicas: 2, FailoverTimeout: 6 * time.Second})
	link := startHeldLink(t, h.p.Addr())
	pAddr := "127.0.0.1:" + strconv.Itoa(link.port())
	pc := h.g.Client(t, h.p.Addr())
	if err := pc.ConfigSet(ctx, "replica-announce-port", strconv.Itoa(link.port())).Err(); err != nil {
		t.Fatal(err)
	}
	if err := pc.Do(ctx, "client", "kill", "type", "master").Err(); err != nil {
		t.Fatal(err)
	}
	mc := h.g.Client(t, h.m.Addr())
	waitFor(t, 20*time.Second, "the master lists p at the link's port", func() bool {
		info, err := mc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "port="+strconv.Itoa(link.port())+",state=online")
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
				if a != pAddr && (a != h.r.Addr() || rep["slave-priority"] != "0") {
					return false
				}
			}
		}
		return true
	})
	n := newNode(t, node.Options{
		Name:         "s1",
		Sentinel:     &node.SentinelOptions{Master: "heldpromo", Addrs: h.g.SentinelAddrs()},
		ProbeTimeout: 2 * time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	info, err := mc.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	run := node.InfoRunID(info)

	if err := mc.Do(ctx, "acl", "setuser", "default", "-ping").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 40*time.Second, "a leader sent p REPLICAOF NO ONE, held on its link", link.isHeld)
	waitFor(t, 30*time.Second, "the failover aborted", func() bool {
		aborted := false
		for i := range h.sentinels {
			config, vote, under, ok := h.vote(ctx, i)
			if !ok || under {
				return false
			}
			aborted = aborted || vote > config
		}
		return aborted
	})
	if err := mc.Do(ctx, "acl", "setuser", "default", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	first := time.Now()
	waitFor(t, 15*time.Second, "the vote ended early", func() bool { return n.ConfirmMaster(ctx, run) == nil })
	link.release()
	waitFor(t, 10*time.Second, "p ran the held REPLICAOF NO ONE", func() bool {
		info, err := pc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	})
	if err := mc.Set(ctx, "reservation", "acked", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if w, err := mc.Wait(ctx, 1, 2*time.Second).Result(); err != nil || w < 1 {
		t.Fatalf("WAIT: %d, %v", w, err)
	}
	refused := n.ConfirmMaster(ctx, run)
	t.Logf("the write's round ran %v after the first round that saw the vote", time.Since(first))
	if refused != nil {
		t.Logf("ConfirmMaster refused the write while p, promoted by the held command, is a master: %v", refused)
		return
	}
	if err := mc.Do(ctx, "acl", "setuser", "default", "-ping").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "a later election promoted p", func() bool {
		named := 0
		for _, c := range h.sentinels {
			if v, err := c.GetMasterAddrByName(ctx, h.g.Name()).Result(); err == nil && len(v) == 2 && v[1] == strconv.Itoa(link.port()) {
				named++
			}
		}
		return named >= 2
	})
	if err := mc.Do(ctx, "acl", "setuser", "default", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the old master resynced from p", func() bool {
		role, err := mc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(role, "role:slave") &&
			strings.Contains(role, "master_port:"+strconv.Itoa(link.port())) && strings.Contains(role, "master_link_status:up")
	})
	if v, err := pc.Get(ctx, "reservation").Result(); err != nil || v != "acked" {
		t.Fatalf("a write ConfirmMaster acknowledged on the master %s, after the held REPLICAOF NO ONE made p %s a master "+
			"within the bound of the vote, is gone from p, which a later election promoted (GET: %q, %v)", h.m.Addr(), pAddr, v, err)
	}
}
