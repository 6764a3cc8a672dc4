package rollback

import (
	"context"
	"strings"
	"sync"

	"github.com/shardis/shardis/node"
)

// The stock audit (inventory.AuditStock, whose doc holds the invariant):
// a node pass audits the node's stock hashes the first time it finds the
// node on a server process, so once at start and once after every
// restart or promotion. What does not add up is logged (an error: units
// can be sold twice or never; shardis does not repair counters) and
// counted per node (Reconciler.Unbalanced). An audit that fails (the node
// went away, an ACL without SCAN) is tried again by the next pass and
// logged once per server process; it is not a failed step of the pass.

// audits is what the reconciler audited, per node (guarded by mu).
type audits struct {
	mu    sync.Mutex
	nodes map[string]nodeAudit // guarded by mu
}

// nodeAudit is one node's audit: the server process (node.Node.ServerRun)
// last audited ("" before any), how many stock hashes did not add up
// then, and the server process whose failed audit was logged.
type nodeAudit struct {
	run    string
	bad    int
	warned string
}

// due reports whether node name on server process run was not audited yet.
func (a *audits) due(name, run string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return run != "" && a.nodes[name].run != run
}

// update applies f to node name's record under mu.
func (a *audits) update(name string, f func(*nodeAudit)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nodes == nil {
		a.nodes = map[string]nodeAudit{}
	}
	st := a.nodes[name]
	f(&st)
	a.nodes[name] = st
}

// done records the audit of node name on server process run.
func (a *audits) done(name, run string, bad int) {
	a.update(name, func(st *nodeAudit) { st.run, st.bad = run, bad })
}

// firstFailure reports whether a failed audit of node name on server
// process run is the first one (the one to log).
func (a *audits) firstFailure(name, run string) (first bool) {
	a.update(name, func(st *nodeAudit) { first, st.warned = st.warned != run, run })
	return first
}

// auditLogged is how many hashes an audit's log line names at most.
const auditLogged = 10

// auditStock audits node n's stock when its server process was not
// audited yet.
func (r *Reconciler) auditStock(ctx context.Context, n *node.Node) {
	run := n.ServerRun()
	if !r.audit.due(n.Name(), run) {
		return
	}
	bad, err := r.inv.AuditStock(ctx, n.Name())
	if err != nil {
		if ctx.Err() == nil && r.audit.firstFailure(n.Name(), run) {
			r.log.Warn("reconciler: auditing the stock counters (tried again every pass, logged once per server process)", "node", n.Name(), "err", err)
		}
		return
	}
	r.audit.done(n.Name(), run, len(bad))
	if len(bad) > 0 {
		named := make([]string, 0, min(len(bad), auditLogged))
		for _, s := range bad[:min(len(bad), auditLogged)] {
			named = append(named, s.String())
		}
		r.log.Error("STOCK COUNTERS DO NOT ADD UP: available + reserved + confirmed must equal loaded; "+
			"half a script applied after a crash (aof-load-truncated yes) or a counter changed by hand",
			"node", n.Name(), "server_run", run, "hashes", len(bad), "first", strings.Join(named, "; "))
	}
}

// Unbalanced returns, per node audited, how many of its stock hashes did
// not add up at its last audit (inventory.AuditStock): 0 for a node whose
// counters all did. A node not audited yet is absent.
func (r *Reconciler) Unbalanced() map[string]int {
	r.audit.mu.Lock()
	defer r.audit.mu.Unlock()
	out := map[string]int{}
	for name, st := range r.audit.nodes {
		if st.run != "" {
			out[name] = st.bad
		}
	}
	return out
}
