package router

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardis/shardis/node"
)

// witnesses keeps, on every node that keeps data (Options.KeepData: an inventory's server), the marks of its
// peers (node/witness.go): each heartbeat it writes the mark of every node
// whose acknowledged writes moved on, and at once for a node that goes
// DOWN (the writes it acknowledged just before). It holds the first write
// of each incarnation on a peer before that write is acknowledged
// (node.Witnesses). And it reads the marks peers hold of every node, off
// the probes' path: once before the first probes (router.New), then every
// heartbeat, handing them to the nodes (node.SetWitnessed) for their
// probes; a node's new connections read them too (node/dialcheck.go,
// through Witnessed). None of it changes a node's state. Nodes outside
// Options.KeepData's servers hold no data that must be kept and are not
// witnessed.
type witnesses struct {
	r       *Router
	mu      sync.Mutex
	written map[markOn]node.Mark // guarded by mu: the last mark of each node written on each peer
	wake    chan string
	// quit is cancelled by close before it stops run: a pass under way
	// (writes and reads the budget bounds, one node after another) ends
	// at once instead of holding close for a budget per hung peer
	quit context.Context
	stop context.CancelFunc
	done chan struct{}
	once sync.Once
	// inflight counts spread's goroutines, which a pass cut short leaves
	// behind: Router.Close waits for them once the nodes are closed
	inflight sync.WaitGroup
}

func newWitnesses(r *Router) *witnesses {
	quit, stop := context.WithCancel(context.Background())
	return &witnesses{r: r, written: map[markOn]node.Mark{}, wake: make(chan string, 64),
		quit: quit, stop: stop, done: make(chan struct{})}
}

// budget bounds one exchange of marks with the peers. It is the command
// timeout, not the probe's: marks travel off the probes' path, on a slow
// link a connection's handshake and a script's first load take round
// trips of their own, and nothing here waits on a probe.
func (w *witnesses) budget() time.Duration { return w.r.cfg.Client.CommandTimeout }

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

// askable reports whether a peer may answer: peers known to be DOWN
// cannot; peers not probed yet (a fresh process) are asked.
func askable(p *node.Node) bool { return p.State() == node.StateUp || p.Incarnation() == "" }

// isUp reports whether a peer is UP: the only peers a node's new
// connection waits for (Witnessed).
func isUp(p *node.Node) bool { return p.State() == node.StateUp }

// Witnessed implements node.Witnesses: the highest mark the UP peers of
// name hold of it, asked concurrently within ctx and the budget, and
// whether any holds one. A node's new command connection waits for it
// (node/dialcheck.go), so peers known DOWN, or never reached, are not
// asked.
func (w *witnesses) Witnessed(ctx context.Context, name string) (node.Mark, bool) {
	return w.witnessedBy(ctx, name, isUp)
}

// witnessedBy returns the highest mark the peers of name that ask lets
// through hold of it, asked concurrently within ctx and the budget, and
// whether any holds one.
func (w *witnesses) witnessedBy(ctx context.Context, name string, ask func(*node.Node) bool) (node.Mark, bool) {
	var (
		mu    sync.Mutex
		best  node.Mark
		found bool
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(ctx, w.budget())
	defer cancel()
	for _, p := range w.peers(name) {
		if !ask(p) {
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

// errNoPeerHolds is wrapped by Hold when no peer holds the mark.
var errNoPeerHolds = errors.New("no peer holds the mark")

// markOn names the mark of node of held on peer on.
type markOn struct{ of, on string }

// Hold implements node.Witnesses: it asks every UP peer to hold m of name,
// concurrently within the budget, and returns nil as soon as one holds it
// (or at once when name has no peers); the writes still under way are
// cancelled, and the writer brings m to those peers at its next
// heartbeat (write keeps what each peer holds).
func (w *witnesses) Hold(ctx context.Context, name string, m node.Mark) error {
	peers := w.peers(name)
	if len(peers) == 0 {
		return nil // nothing can witness a node without peers (node/witness.go)
	}
	ctx, cancel := context.WithTimeout(ctx, w.budget())
	defer cancel()
	results := make(chan error, len(peers))
	asked := 0
	for _, p := range peers {
		if p.State() != node.StateUp {
			continue
		}
		asked++
		go func(p *node.Node) {
			held, err := p.Witness(ctx, name, m)
			if err == nil && held {
				w.noteWritten(name, p.Name(), m)
			}
			if err == nil && !held {
				err = fmt.Errorf("peer %s holds a mark of another incarnation", p.Name())
			} else if err != nil {
				err = fmt.Errorf("peer %s: %w", p.Name(), err)
			}
			results <- err
		}(p)
	}
	var errs []error
	for i := 0; i < asked; i++ {
		err := <-results
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	if asked == 0 {
		errs = append(errs, fmt.Errorf("none of its %d peers is UP", len(peers)))
	}
	return fmt.Errorf("%w of node %s: %w", errNoPeerHolds, name, errors.Join(errs...))
}

// readViews reads the marks every askable node of the server holds, one
// command per node, concurrently within the budget, and raises
// each node's view of what its peers witnessed (node.SetWitnessed).
func (w *witnesses) readViews(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.budget())
	defer cancel()
	var from []*node.Node
	for _, name := range w.r.names {
		if p := w.r.nodes[name]; w.r.critical[name] && askable(p) {
			from = append(from, p)
		}
	}
	w.spread(ctx, from, func(p *node.Node) {
		marks, err := p.WitnessMarks(ctx)
		if err != nil {
			return // a silent peer: its marks are read at a later heartbeat
		}
		for of, m := range marks {
			if of != p.Name() && w.r.critical[of] {
				w.r.nodes[of].SetWitnessed(m)
			}
		}
	})
}

// run writes marks every heartbeat, and at once for a node named on wake,
// and reads the views every heartbeat: every probe compares its node's
// stamp with them, so a node another instance saw go back (and marked at
// once when it went DOWN there) is refused here within a heartbeat or
// two, even if this instance never saw it fail.
func (w *witnesses) run(heartbeat time.Duration) {
	defer close(w.done)
	t := time.NewTicker(heartbeat)
	defer t.Stop()
	for {
		select {
		case <-w.quit.Done():
			return
		case name := <-w.wake:
			w.write(w.quit, name)
		case <-t.C:
			for _, name := range w.r.names {
				if w.r.critical[name] && w.quit.Err() == nil {
					w.write(w.quit, name)
				}
			}
			w.readViews(w.quit)
		}
	}
}

// write records name's mark on every UP peer that does not hold it yet
// (as far as this process wrote): a peer whose write failed, or that was
// DOWN, gets it at the next call, even when the mark has not moved on.
// The budget bounds it, and ctx's end too.
func (w *witnesses) write(ctx context.Context, name string) {
	m, ok := w.r.nodes[name].Mark()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, w.budget())
	defer cancel()
	var to []*node.Node
	for _, p := range w.peers(name) {
		if p.State() == node.StateUp && !w.holds(name, p.Name(), m) {
			to = append(to, p)
		}
	}
	w.spread(ctx, to, func(p *node.Node) {
		if ok, err := p.Witness(ctx, name, m); err == nil && ok {
			w.noteWritten(name, p.Name(), m)
		}
	})
}

// spread runs f for each of ps, each in a goroutine of its own, and
// returns once every f has, or once ctx ends: a peer that does not answer
// is not waited for (a go-redis command ends at its read deadline, not
// when its context is cancelled), so close cuts a pass short at once.
// Such an f still ends within the budget that bounds its command, or when
// Router.Close closes the nodes; Close waits for it then (inflight).
func (w *witnesses) spread(ctx context.Context, ps []*node.Node, f func(p *node.Node)) {
	left := make(chan struct{}, len(ps))
	for _, p := range ps {
		w.inflight.Add(1)
		go func() {
			defer w.inflight.Done()
			f(p)
			left <- struct{}{}
		}()
	}
	for range ps {
		select {
		case <-left:
		case <-ctx.Done():
			return
		}
	}
}

// holds reports whether this process wrote m of name on peer, or a later
// mark.
func (w *witnesses) holds(name, peer string, m node.Mark) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, had := w.written[markOn{name, peer}]
	return had && !m.After(last)
}

// noteWritten records that peer holds m of name: the writer skips that
// peer until the mark moves on, and name's writes of m's incarnation are
// acknowledged without waiting for a peer.
func (w *witnesses) noteWritten(name, peer string, m node.Mark) {
	w.mu.Lock()
	if cur, had := w.written[markOn{name, peer}]; !had || m.After(cur) {
		w.written[markOn{name, peer}] = m
	}
	w.mu.Unlock()
	w.r.nodes[name].NoteHeld(m)
}

// nodeDown asks for name's mark to be written now, and forgets what was
// written on name: it may come back without the marks it held (a restart
// without them), so the writer writes them all again once it is UP.
func (w *witnesses) nodeDown(name string) {
	if !w.r.critical[name] {
		return
	}
	w.mu.Lock()
	for k := range w.written {
		if k.on == name {
			delete(w.written, k)
		}
	}
	w.mu.Unlock()
	select {
	case w.wake <- name:
	default:
	}
}

// close stops run (ending the pass under way: quit), waits for it, and
// writes every mark that moved on since its last write (flush): it takes
// at most about one budget, however many peers hang. Idempotent.
func (w *witnesses) close() {
	w.once.Do(func() {
		w.stop()
		<-w.done
		w.flush()
	})
}

// flush writes, on every reachable peer, each node's mark that moved on
// since it was last written. Marks lag the writes by up to a heartbeat:
// without it a process that closes (a `shardis topology apply`, a
// service shutting down) would leave its last writes unmarked, and a node
// that then lost them would not be refused (SECURITY.md). Router.Close
// stops the nodes acknowledging first (node.Node.StopAcknowledging), so
// the marks read here cover every write it acknowledged. The nodes'
// writes run concurrently, each bounded by the witness budget.
func (w *witnesses) flush() {
	var wg sync.WaitGroup
	for _, name := range w.r.names {
		if w.r.critical[name] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.write(context.Background(), name)
			}()
		}
	}
	wg.Wait()
}

// ErrNotWitnessed is wrapped by [Router.AcceptNode] for a node outside the
// servers of Options.KeepData: its writes are not witnessed, there is nothing to accept.
var ErrNotWitnessed = errors.New("node is not witnessed")

// fenceOf returns n's topology token unless every peer's topology is
// n's own (the same token and apply attempt) or at an earlier epoch: a
// peer at a later epoch, or at the same epoch at another token or
// attempt, or one that cannot be read, fences n ("" for no fence). The
// accept cannot tell which of two copies of one epoch is the current one
// (the nodes' clocks are not to be trusted with it), so it fails closed:
// a fenced node serves no instance until `shardis topology apply` of the
// current topology brings it forward, which retires nothing on a node
// fenced at the apply's own token and attempt. A fenced peer counts by
// the topology under its fence, so the answer does not depend on the
// order of the accepts. A node without a token, or fenced already, is
// left as it is.
//
// A node whose own topology cannot be read is refused (an error wrapping
// node.ErrUnreachable: the accept writes nothing), not taken as one
// without a token: whether it is behind cannot be told, and unfenced it
// would serve an instance of an older topology.
func (r *Router) fenceOf(ctx context.Context, n *node.Node) (string, error) {
	own, err := n.Topology(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: node %s: its topology stamp could not be read, so whether it is behind its peers' cannot be told (nothing accepted; try again): %v",
			node.ErrUnreachable, n.Name(), err)
	}
	if own.Token == "" || strings.HasPrefix(own.Token, node.FencePrefix) {
		return "", nil
	}
	for _, p := range r.wit.peers(n.Name()) {
		peer, err := p.Topology(ctx)
		if err != nil {
			r.log.Warn("node accept: a peer's topology could not be read, so the node is fenced until topology apply brings it forward",
				"node", n.Name(), "peer", p.Name(), "err", err)
			return own.Token, nil
		}
		if topoNotBehind(peer, own) {
			return own.Token, nil
		}
	}
	return "", nil
}

// topoNotBehind reports whether peer's topology differs from own's and
// is not at an earlier epoch (fenceOf).
func topoNotBehind(peer, own node.TopoStamp) bool {
	ptok := strings.TrimPrefix(peer.Token, node.FencePrefix)
	pe, oe := tokenEpoch(ptok), tokenEpoch(own.Token)
	switch {
	case ptok == "" || pe < oe:
		return false
	case pe > oe || ptok != own.Token:
		return true
	}
	return peer.Attempt != own.Attempt // one unknown (a release before's copy) fails closed too
}

// tokenEpoch is the epoch of a topology token "E:fingerprint" (0 when it
// is not one).
func tokenEpoch(tok string) int64 {
	e, _, _ := strings.Cut(tok, ":")
	v, err := strconv.ParseInt(e, 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// acceptGen is the generation AcceptNode gives n: above every mark of it
// that the askable peers hold now (peers not probed yet too), that n's
// view holds (marks read earlier from peers that may be DOWN now: n's
// probes compare its stamp with them), and than the stamp this process
// last saw.
func (r *Router) acceptGen(ctx context.Context, n *node.Node) int64 {
	seen, _ := r.wit.witnessedBy(ctx, n.Name(), askable)
	gen := seen.Gen + 1
	if v, ok := n.Witnessed(); ok && v.Gen >= gen {
		gen = v.Gen + 1
	}
	if m, ok := n.Mark(); ok && m.Gen >= gen {
		gen = m.Gen + 1
	}
	return gen
}

// AcceptNode makes a node's current data the truth after it was refused
// for having gone back (node.ErrRolledBack) or come back empty
// (node.ErrDataLost): the node gets a new incarnation at a generation above
// every one witnessed, and every reachable peer is told; its next probe
// passes. What the node lost stays lost (reload stock, check orders); the
// new incarnation starts a new redo-log generation. A node whose
// topology may be behind a peer's (the peer at a later epoch, or at the
// same one at another token or apply attempt, or unreadable: it may have
// gone back to a copy from before an apply; fenceOf) is fenced in the
// same step (node.FencePrefix): every
// instance, whatever topology it is at, refuses it until `shardis
// topology apply` of the current configuration brings it forward, which
// retires what came back on it and puts back what the apply had moved
// onto it first. It fails for a node
// outside the servers of Options.KeepData (nothing is witnessed of it) or one that
// cannot be reached (an error wrapping node.ErrUnreachable).
func (r *Router) AcceptNode(ctx context.Context, name string) (node.Mark, error) {
	n, err := r.Node(name)
	if err != nil {
		return node.Mark{}, err
	}
	if !r.critical[name] {
		return node.Mark{}, fmt.Errorf("%w: node %s keeps no data (not a node of a server of router.Options.KeepData)", ErrNotWitnessed, name)
	}
	gen := r.acceptGen(ctx, n)
	fence, err := r.fenceOf(ctx, n)
	if err != nil {
		return node.Mark{}, err
	}
	m, err := n.Accept(ctx, gen, fence)
	if err != nil {
		return node.Mark{}, err
	}
	if fence != "" {
		r.log.Warn("node accepted behind its peers' topology: fenced, every instance refuses it until `shardis topology apply` of the current configuration brings it forward",
			"node", name, "token", fence)
	}
	told := 0
	for _, p := range r.wit.peers(name) {
		if ok, err := p.Witness(ctx, name, m); err == nil && ok {
			told++
		}
	}
	r.log.Warn("node accepted", "node", name, "generation", m.Gen, "incarnation", m.Incarnation, "seq", m.Seq, "peers_told", told)
	r.sched.Reprobe(name) // a refused node is DOWN: Trigger would leave it to its backoff
	return m, nil
}
