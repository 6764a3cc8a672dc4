package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardis/shardis/node"
)

// witnesses keeps, on every node of the inventory server, the marks of its
// peers (node/witness.go): each heartbeat it writes the mark of every node
// whose acknowledged writes moved on, and at once for a node that goes
// DOWN (the writes it acknowledged just before). It also answers probes'
// questions (node.Witnesses). Nodes outside the inventory server hold no
// data that must be kept and are not witnessed.
type witnesses struct {
	r       *Router
	mu      sync.Mutex
	written map[string]node.Mark // guarded by mu: the last mark written of each node
	wake    chan string
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

func newWitnesses(r *Router) *witnesses {
	return &witnesses{r: r, written: map[string]node.Mark{}, wake: make(chan string, 64),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// peers returns the witnessed nodes other than name.
func (w *witnesses) peers(name string) []*node.Node {
	var out []*node.Node
	for _, p := range w.r.names {
		if p != name && w.r.critical[p] {
			out = append(out, w.r.nodes[p])
		}
	}
	return out
}

// Witnessed implements node.Witnesses: the highest mark reachable peers
// hold of name, asked concurrently within half the probe timeout.
func (w *witnesses) Witnessed(ctx context.Context, name string) (node.Mark, bool) {
	var (
		mu    sync.Mutex
		best  node.Mark
		found bool
		wg    sync.WaitGroup
	)
	// Peers known to be DOWN cannot answer; peers not probed yet (a fresh
	// process) are asked. At most half the probe's time goes to this, so a
	// silent peer cannot fail the probe itself.
	ctx, cancel := context.WithTimeout(ctx, w.r.cfg.Health.Timeout/2)
	defer cancel()
	for _, p := range w.peers(name) {
		if p.State() != node.StateUp && p.Incarnation() != "" {
			continue
		}
		wg.Add(1)
		go func(p *node.Node) {
			defer wg.Done()
			m, ok, err := p.WitnessOf(ctx, name)
			if err != nil || !ok {
				return
			}
			mu.Lock()
			if !found || m.After(best) {
				best, found = m, true
			}
			mu.Unlock()
		}(p)
	}
	wg.Wait()
	return best, found
}

// run writes marks every heartbeat, and at once for a node named on wake.
func (w *witnesses) run(heartbeat time.Duration) {
	defer close(w.done)
	t := time.NewTicker(heartbeat)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case name := <-w.wake:
			w.write(name)
		case <-t.C:
			for _, name := range w.r.names {
				if w.r.critical[name] {
					w.write(name)
				}
			}
		}
	}
}

// write records name's mark on every reachable peer when it moved on since
// the last write.
func (w *witnesses) write(name string) {
	m, ok := w.r.nodes[name].Mark()
	if !ok {
		return
	}
	w.mu.Lock()
	last, had := w.written[name]
	w.mu.Unlock()
	if had && !m.After(last) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.r.cfg.Health.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	wrote := 0
	for _, p := range w.peers(name) {
		if p.State() != node.StateUp {
			continue
		}
		wg.Add(1)
		go func(p *node.Node) {
			defer wg.Done()
			if err := p.Witness(ctx, name, m); err == nil {
				mu.Lock()
				wrote++
				mu.Unlock()
			}
		}(p)
	}
	wg.Wait()
	if wrote > 0 {
		w.mu.Lock()
		if cur := w.written[name]; !had || m.After(cur) {
			w.written[name] = m
		}
		w.mu.Unlock()
	}
}

// nodeDown asks for name's mark to be written now.
func (w *witnesses) nodeDown(name string) {
	if !w.r.critical[name] {
		return
	}
	select {
	case w.wake <- name:
	default:
	}
}

// close stops run and waits for it; idempotent.
func (w *witnesses) close() {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
	})
}

// ErrNotWitnessed is wrapped by [Router.AcceptNode] for a node outside the
// inventory server: its writes are not witnessed, there is nothing to accept.
var ErrNotWitnessed = errors.New("node is not witnessed")

// AcceptNode makes a node's current data the truth after it was refused
// for having gone back (node.ErrRolledBack) or come back empty
// (node.ErrDataLost): the node gets a new incarnation at a generation above
// every one witnessed, and every reachable peer is told; its next probe
// passes. What the node lost stays lost (reload stock, check orders); the
// new incarnation starts a new redo-log generation. It fails for a node
// outside the inventory server (nothing is witnessed of it) or one that
// cannot be reached.
func (r *Router) AcceptNode(ctx context.Context, name string) (node.Mark, error) {
	n, err := r.Node(name)
	if err != nil {
		return node.Mark{}, err
	}
	if !r.critical[name] {
		return node.Mark{}, fmt.Errorf("%w: node %s is not a node of the inventory server", ErrNotWitnessed, name)
	}
	seen, _ := r.wit.Witnessed(ctx, name)
	gen := seen.Gen + 1
	if m, ok := n.Mark(); ok && m.Gen >= gen {
		gen = m.Gen + 1
	}
	m, err := n.Accept(ctx, gen)
	if err != nil {
		return node.Mark{}, err
	}
	told := 0
	for _, p := range r.wit.peers(name) {
		if p.Witness(ctx, name, m) == nil {
			told++
		}
	}
	r.log.Warn("node accepted", "node", name, "generation", m.Gen, "incarnation", m.Incarnation, "seq", m.Seq, "peers_told", told)
	r.sched.Trigger(name)
	return m, nil
}
