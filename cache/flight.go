package cache

import "sync"

// flightGroup runs one function per key at a time; concurrent callers of
// the same key wait for it and share its result (in-process single
// flight, as golang.org/x/sync/singleflight, without the dependency).
type flightGroup struct {
	mu    sync.Mutex
	calls map[string]*flightCall // guarded by mu
}

type flightCall struct {
	done chan struct{}
	val  []byte
	err  error
}

func (g *flightGroup) do(key string, fn func() ([]byte, error)) ([]byte, error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[string]*flightCall{}
	}
	if c, ok := g.calls[key]; ok {
		g.mu.Unlock()
		<-c.done
		return c.val, c.err
	}
	c := &flightCall{done: make(chan struct{})}
	g.calls[key] = c
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.calls, key)
		g.mu.Unlock()
		close(c.done)
	}()
	c.val, c.err = fn()
	return c.val, c.err
}
