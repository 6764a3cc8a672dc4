package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// errLastEnabled refuses a drain that would leave a route without an
// enabled node.
var errLastEnabled = errors.New("last enabled node of the route")

// cmdDrain is drain: unless --force, it first lists the nodes and refuses
// to drain the last node on which the route is enabled (the route would
// stop taking reservations and stock loads). The check and the drain are
// two calls: two operators draining a route's last two nodes at once can
// still both succeed.
func cmdDrain(ctx context.Context, c *client, args []string) error {
	force := c.fs.Bool("force", false, "drain even the last enabled node of the route (takes the route down)")
	rest, err := c.parse(args, 3, 3)
	if err != nil {
		return err
	}
	if !*force {
		nodes, err := call(ctx, c, c.admin.ListNodes, &v1.ListNodesRequest{})
		if err != nil {
			return err
		}
		if err := checkNotLast(nodes.Nodes, rest[0], rest[1], rest[2]); err != nil {
			return err
		}
	}
	return setRouteEnabled(ctx, c, rest, false)
}

// checkNotLast returns an errLastEnabled error naming the route when node
// is the only node with server/route enabled. A node or route the service
// does not know is left to the service to refuse.
func checkNotLast(nodes []*v1.NodeInfo, node, server, route string) error {
	var others []string
	target := false
	for _, n := range nodes {
		for _, r := range n.Routes {
			if r.Server != server || r.Route != route || !r.Enabled {
				continue
			}
			if n.Name == node {
				target = true
			} else {
				others = append(others, n.Name)
			}
		}
	}
	if !target || len(others) > 0 {
		return nil
	}
	return fmt.Errorf("drain %s: %w %s/%s: draining it takes the route down (no reservations or stock loads on it); undrain another node of the route first, or pass --force",
		node, errLastEnabled, server, route)
}

// cmdOrderID is order-id: it mints an order id with NewOrderId, placed
// by the route keys of its arguments (route keys, or items ROUTE:SKU:QTY).
func cmdOrderID(ctx context.Context, c *client, args []string) error {
	rest, err := c.parse(args, 0, -1)
	if err != nil {
		return err
	}
	req := &v1.NewOrderIdRequest{}
	for _, r := range rest {
		it := &v1.Item{RouteKey: r}
		if strings.Contains(r, ":") { // an item, ROUTE:SKU:QTY, as reserve takes them
			if it, err = parseItem(r); err != nil {
				return c.usageErr("%v", err)
			}
		}
		req.Items = append(req.Items, it)
	}
	// The id alone on stdout, for ID=$(shardis order-id); the node to stderr.
	return show(ctx, c, c.inv.NewOrderId, req, func(w io.Writer, res *v1.NewOrderIdResponse) {
		fmt.Fprintln(w, res.OrderId)
		fmt.Fprintf(c.stderr, "order %s: its record goes to node %s\n", res.OrderId, res.Node)
	})
}
