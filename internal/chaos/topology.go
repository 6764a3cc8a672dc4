package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
	"github.com/shardis/shardis/topology"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/service"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// The topology nemesis: the spare node joins route "a" (or leaves it
// again) while clients run, the way an operator does it: start a service
// with the new configuration (joining: it serves the applied topology
// until the apply; leaving: after the apply, since it no longer names the
// node), run `shardis topology apply`, move the clients to the new
// service, stop the old one. Order records, tombstones and quota counters move; an old-topology
// service is refused from the first node moved.

// FaultTopology is a topology change: "+n5" joins route a, "-n5" leaves it.
const FaultTopology = "topology change"

// placement is where one topology of the run puts order records (homes)
// and users' quota counters (layout: a user's quota node of a route is
// the home of "user:"+user in the route's ring, inventory's quotaNode).
type placement struct {
	homes  *inventory.Homes
	layout *router.Layout
}

// placementOf is the placement of configuration cfg.
func placementOf(cfg *config.Config) (placement, error) {
	homes, err := inventory.NewHomes(cfg)
	if err != nil {
		return placement{}, err
	}
	layout, err := router.NewLayout(cfg)
	if err != nil {
		return placement{}, err
	}
	return placement{homes: homes, layout: layout}, nil
}

// quotaNode is the node that counts user's per-user quotas of route in
// this placement ("" when the placement has no such route).
func (p placement) quotaNode(route, user string) string {
	if p.layout == nil {
		return ""
	}
	n, err := p.layout.Home(invServer, route, "user:"+user)
	if err != nil {
		return ""
	}
	return n
}

// config returns the configuration of the current topology.
func (c *cluster) config() *config.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

// layoutNow returns the current routes.
func (c *cluster) layoutNow() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.routes
}

// topologyChange moves the spare into route a, or out of it.
func (n *nemesis) topologyChange(ctx context.Context) {
	c := n.c
	f := Fault{At: n.at(), Kind: FaultTopology}
	start := time.Now()
	defer func() {
		f.Hold = time.Since(start)
		n.record(f)
	}()
	old := c.config()
	// The last change may still be migrating (counters held by pending
	// parts): the operator finishes it first, as the next apply is
	// refused until it is stable (a no-op when it is).
	if _, err := applyWithRetry(old, nil, c.opts.ReservationTTL+5*time.Second, 6); err != nil {
		f.Err = "finishing the last change: " + err.Error()
		return
	}
	routes := map[string][]string{}
	for r, ms := range old.Servers[invServer].Routes {
		routes[r] = append([]string(nil), ms...)
	}
	leaving := slices.Contains(routes["a"], c.spare)
	if leaving {
		routes["a"] = slices.DeleteFunc(routes["a"], func(s string) bool { return s == c.spare })
		f.Target = "-" + c.spare
		// Drain it first, so it takes no new stock meanwhile.
		if err := c.setRoute(c.spare, "a", false, 10); err != nil {
			f.Err = "drain: " + err.Error()
			return
		}
		// The sync follows a node only while its configuration names
		// it: the operator waits until it landed the leaving node's
		// redo log and its pending parts settled (README, step 5).
		if c.sync != nil && !c.sync.waitNode(c.spare, c.opts.ReservationTTL+attemptLease) {
			f.Err = "sync: the leaving node's rows still lag or are pending; applying anyway"
		}
	} else {
		routes["a"] = append(routes["a"], c.spare)
		f.Target = "+" + c.spare
	}
	next := *old
	next.Servers = map[string]config.Server{invServer: {OnNodeDown: old.Servers[invServer].OnNodeDown, Routes: routes}}
	if err := next.Validate(); err != nil {
		f.Err = err.Error()
		return
	}
	// A joining node's configuration is deployed first (its instances
	// serve the applied topology and report the pending change); a
	// leaving node's configuration cannot serve the applied topology
	// while the node is in it (it no longer gives the node to the
	// inventory server), so it is deployed after the apply.
	var srv *service.Server
	startSrv := func() bool {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		if srv, err = service.Start(sctx, &next, c.log); err != nil {
			f.Err = "start: " + err.Error()
			return false
		}
		return true
	}
	if !leaving && !startSrv() {
		return
	}
	rep, err := applyWithRetry(&next, old, 3*time.Second, 20)
	if err != nil {
		// Not moved (a check failed before any node moved) or half moved:
		// a later apply (the next change, or healing) finishes it.
		f.Err = "apply: " + err.Error()
	}
	if rep.ToEpoch == 0 || (err != nil && !nodesAt(&next)) {
		if srv != nil {
			_ = c.shutdown(srv)
		}
		return
	}
	if leaving && !startSrv() {
		return
	}
	if rep.Phase == topology.PhaseMigrating {
		f.Target += " (migrating)"
	}
	pl, herr := placementOf(&next)
	if herr != nil {
		f.Err = herr.Error()
	}
	c.mu.Lock()
	prev := c.srv
	c.cfg, c.routes, c.homes = &next, routes, pl.homes
	c.seen = append(c.seen, pl)
	c.srv, c.addr = srv, srv.Addr()
	c.inv, c.admin = newClients(c.httpc, c.addr)
	c.mu.Unlock()
	if err := c.shutdown(prev); err != nil && f.Err == "" {
		f.Err = "shutdown: " + err.Error()
	}
	if c.sync != nil {
		if err := c.sync.restart(&next); err != nil && f.Err == "" {
			f.Err = "sync restart: " + err.Error()
		}
	}
}

// applyWithRetry runs `topology apply`, retrying while a node is down
// (another fault may be under way).
func applyWithRetry(to, from *config.Config, wait time.Duration, tries int) (topology.Report, error) {
	var rep topology.Report
	var err error
	for i := 0; i < tries; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), wait+20*time.Second)
		rep, err = inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: to, From: from, Wait: wait, Logger: discard})
		cancel()
		if err == nil {
			return rep, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return rep, err
}

// nodesAt reports whether the nodes' newest topology is cfg's.
func nodesAt(cfg *config.Config) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	recs, _, err := inventory.ReadTopology(ctx, cfg)
	if err != nil {
		return false
	}
	newest, err := topology.Current(recs)
	return err == nil && newest.Epoch > 0 && newest.Current.Fingerprint() == topology.Of(cfg).Fingerprint()
}

// finishTopology finishes a topology change still migrating (healing):
// pending parts that hold counters settle within a reservation TTL.
func (c *cluster) finishTopology() error {
	cfg := c.config()
	wait := c.opts.ReservationTTL + 5*time.Second
	rep, err := applyWithRetry(cfg, nil, wait, 6)
	if err != nil {
		return fmt.Errorf("chaos: heal: finishing the topology change: %w", err)
	}
	if rep.Phase != topology.PhaseStable {
		return fmt.Errorf("chaos: heal: topology still migrating after %v: %d counters held by pending parts", wait, rep.Waiting)
	}
	if !rep.AlreadyApplied {
		fmt.Fprintf(c.out, "%s heal: finished the topology change (%d quota counters moved)\n", c.since(), rep.QuotasMoved)
	}
	return nil
}

var discard = slog.New(slog.DiscardHandler)

func newClients(h *http.Client, addr string) (shardisv1connect.InventoryServiceClient, shardisv1connect.AdminServiceClient) {
	return shardisv1connect.NewInventoryServiceClient(h, "http://"+addr), shardisv1connect.NewAdminServiceClient(h, "http://"+addr)
}
