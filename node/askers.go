package node

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// askers keeps one client per sentinel address for sentinelsAgree: every
// probe of an UP group asks the sentinels, and a connection kept saves a
// dial (and a socket in TIME_WAIT) per sentinel per heartbeat. A client
// whose connection failed (a read past its bound, a refused dial) drops it
// and dials again at its next use. Closed with the node; asking after
// Close gets no client.
//
// Each client's one connection asks SENTINEL MYID when it is dialled
// (identify), so every answer read on it is known to come from that
// sentinel: a confirm round counts sentinels, not addresses (a sentinel
// seeded by host name is learnt again by the IP it announces).
type askers struct {
	mu     sync.Mutex
	byAddr map[string]*askerConn // guarded by mu
	closed bool                  // guarded by mu
}

// askerConn is the kept client of one sentinel address and what the
// sentinel its connection reached said of its ID when it was last dialled
// (nil before the first dial).
type askerConn struct {
	c  *redis.SentinelClient
	id atomic.Pointer[sentinelID]
}

// sentinelID is a sentinel's answer to SENTINEL MYID, asked when an
// asker's connection is dialled: its ID, or, where it does not say, why.
// id is "" when it does not know the command (older than Redis 6.2:
// counted per address, README) and when it refuses it (refused holds the
// refusal: an ACL user without SENTINEL MYID gets NOPERM).
type sentinelID struct {
	id, refused string
}

// get returns the client of the sentinel at addr, built by build on first
// use with the OnConnect hook to put in its options; nil once closed.
func (a *askers) get(addr string, build func(onConnect func(context.Context, *redis.Conn) error) *redis.SentinelClient) *redis.SentinelClient {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	if e := a.byAddr[addr]; e != nil {
		return e.c
	}
	if a.byAddr == nil {
		a.byAddr = map[string]*askerConn{}
	}
	e := &askerConn{}
	e.c = build(e.identify)
	a.byAddr[addr] = e
	return e.c
}

// identify is an asker's OnConnect hook: it asks the sentinel just
// dialled SENTINEL MYID and keeps the answer as the ID every later answer
// on this connection comes from. A sentinel that does not know the
// command (older than Redis 6.2: "unknown subcommand") leaves the ID "";
// one that refuses it otherwise (NOPERM: an ACL user without it) leaves
// it "" with the refusal, and its answers count toward no majority
// (ConfirmMaster): counted by address, one sentinel known at two
// addresses (a seed by host name) would count twice
// (TestMinorityOfSentinelsRefusingMyIDDoesNotConfirm). The connection is
// kept either way: the node's probe does not need the ID. A connection
// that fails is dropped (the hook's error fails the dial).
func (e *askerConn) identify(ctx context.Context, cn *redis.Conn) error {
	id, err := cn.Do(ctx, "sentinel", "myid").Text()
	var rerr redis.Error
	s := sentinelID{id: id}
	switch {
	case errors.As(err, &rerr) && strings.Contains(strings.ToLower(rerr.Error()), "unknown"):
		s = sentinelID{}
	case errors.As(err, &rerr):
		s = sentinelID{refused: rerr.Error()}
	case err != nil:
		return err
	}
	e.id.Store(&s)
	return nil
}

// id returns what the sentinel the client of addr last dialled reached
// said of its ID (askerConn); the zero sentinelID before the first dial.
func (a *askers) id(addr string) sentinelID {
	a.mu.Lock()
	e := a.byAddr[addr]
	a.mu.Unlock()
	if e == nil {
		return sentinelID{}
	}
	if p := e.id.Load(); p != nil {
		return *p
	}
	return sentinelID{}
}

// close closes every client; get returns nil from then on.
func (a *askers) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	var errs []error
	for _, e := range a.byAddr {
		errs = append(errs, e.c.Close())
	}
	a.byAddr = nil
	return errors.Join(errs...)
}
