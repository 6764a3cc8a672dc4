package node

import (
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// askers keeps one client per sentinel address for sentinelsAgree: every
// probe of an UP group asks the sentinels, and a connection kept saves a
// dial (and a socket in TIME_WAIT) per sentinel per heartbeat. A client
// whose connection failed (a read past its bound, a refused dial) drops it
// and dials again at its next use. Closed with the node; asking after
// Close gets no client.
type askers struct {
	mu     sync.Mutex
	byAddr map[string]*redis.SentinelClient // guarded by mu
	closed bool                             // guarded by mu
}

// get returns the client of the sentinel at addr, built by build on first
// use; nil once closed.
func (a *askers) get(addr string, build func() *redis.SentinelClient) *redis.SentinelClient {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	if c := a.byAddr[addr]; c != nil {
		return c
	}
	if a.byAddr == nil {
		a.byAddr = map[string]*redis.SentinelClient{}
	}
	c := build()
	a.byAddr[addr] = c
	return c
}

// close closes every client; get returns nil from then on.
func (a *askers) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	var errs []error
	for _, c := range a.byAddr {
		errs = append(errs, c.Close())
	}
	a.byAddr = nil
	return errors.Join(errs...)
}
