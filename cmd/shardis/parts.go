package main

// The stuck-part and redo-log acknowledgement subcommands.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// parseQueue reads a --queue value: a number or a redo log name such as
// inv:redo:7.
func parseQueue(c *client, arg string) (int32, error) {
	// a redo log's name is its key: the prefix, then the number (a
	// segment key's suffix, inv:redo:7:3, is not a queue number)
	prefix := strings.TrimSuffix(inventory.RedoLogKey(0), "0") // inv:redo:
	q := strings.TrimPrefix(arg, prefix)
	queue, err := strconv.ParseInt(q, 10, 32)
	if err != nil || queue < 0 {
		return 0, c.usageErr("--queue %q: want a queue number or a redo log name such as %s", arg, inventory.RedoLogKey(7))
	}
	return int32(queue), nil
}

func cmdRedoLogAck(ctx context.Context, c *client, args []string) error {
	nodeName := c.fs.String("node", "", "node `name` (required)")
	queueArg := c.fs.String("queue", "", "queue `number`, or a redo log name such as inv:redo:7 (required)")
	inc := c.fs.String("incarnation", "", "the node's incarnation the entries were read at (redo-log prints it): refused at another one; empty: unfenced")
	part := c.fs.String("part", "", "the part `id` landed at OFFSET (trimmed: it was trimmed unread): refused if the entry there holds another part; empty: unchecked")
	rest, err := c.parse(args, 1, 1, "node", "queue")
	if err != nil {
		return err
	}
	queue, err := parseQueue(c, *queueArg)
	if err != nil {
		return err
	}
	offset, err := strconv.ParseInt(rest[0], 10, 64)
	if err != nil || offset < 0 {
		return c.usageErr("OFFSET %q: want a non-negative integer", rest[0])
	}
	return show(ctx, c, c.admin.AckRedoLog, &v1.AckRedoLogRequest{Node: *nodeName, Queue: queue, Offset: offset, Incarnation: *inc, PartId: *part},
		func(w io.Writer, res *v1.AckRedoLogResponse) {
			fmt.Fprintf(w, "node %s queue %d acknowledged up to offset %d\n", *nodeName, queue, res.AckedOffset)
		})
}

func cmdPartsStuck(ctx context.Context, c *client, args []string) error {
	nodeName := c.fs.String("node", "", "only this node `name` (default every node)")
	limit := c.fs.Int("limit", 1000, "most parts per node (1..10000)")
	if _, err := c.parse(args, 0, 0); err != nil {
		return err
	}
	if *limit < 1 || *limit > 10000 {
		return c.usageErr("--limit %d: want 1..10000", *limit)
	}
	res, err := call(ctx, c, c.admin.ListStuckParts, &v1.ListStuckPartsRequest{Node: *nodeName, Limit: int32(*limit)})
	if err != nil {
		return err
	}
	if err := c.out.emit(res, func(w io.Writer) { writeStuckParts(w, res) }); err != nil {
		return err
	}
	if len(res.Unreachable) > 0 {
		// The list is partial: a script must not take it as every stuck part.
		return fmt.Errorf("parts stuck: %s not read, their stuck parts not listed", nodeNames(res.Unreachable))
	}
	return nil
}

// writeStuckParts prints parts stuck's table, the parts whose record could
// not be read, then the nodes that could not be read.
func writeStuckParts(w io.Writer, res *v1.ListStuckPartsResponse) {
	if len(res.Parts) == 0 {
		fmt.Fprintln(w, "no stuck parts")
	} else {
		fmt.Fprintln(w, "NODE\tPART\tORDER\tSKU\tQTY\tSTATE\tSINCE\tREASON")
		for _, p := range res.Parts {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.Node, p.PartId, p.OrderId, p.SkuId,
				p.Quantity, p.State, time.UnixMilli(p.SinceUnixMs).UTC().Format(time.RFC3339), p.Reason)
		}
		for _, p := range res.Parts {
			if p.Problem != "" {
				fmt.Fprintf(w, "unreadable record of %s on %s: %s\n", p.PartId, p.Node, p.Problem)
			}
		}
	}
	for _, u := range res.Unreachable {
		fmt.Fprintf(w, "unreachable: %s\n", u)
	}
}

// nodeNames names the nodes of ListStuckPartsResponse.Unreachable entries
// ("NODE: error"), e.g. "node n3" or "nodes n2, n3".
func nodeNames(unreachable []string) string {
	names := make([]string, len(unreachable))
	for i, u := range unreachable {
		names[i], _, _ = strings.Cut(u, ": ")
	}
	if len(names) == 1 {
		return "node " + names[0]
	}
	return "nodes " + strings.Join(names, ", ")
}

func cmdPartsRetry(ctx context.Context, c *client, args []string) error {
	all := c.fs.Bool("all", false, "retry every stuck part (of --node; default every node)")
	sku := c.fs.String("sku", "", "retry the stuck parts of this SKU `id` (of --node; default every node)")
	nodeName := c.fs.String("node", "", "with --all or --sku: only this node `name`")
	rest, err := c.parse(args, 0, 2)
	if err != nil {
		return err
	}
	bulk := *all || *sku != ""
	switch {
	case *all && *sku != "":
		return c.usageErr("--all and --sku exclude each other")
	case bulk && len(rest) > 0:
		return c.usageErr("give NODE PART_ID, or --all, or --sku SKU, not both")
	case !bulk && len(rest) != 2:
		return c.usageErr("want NODE PART_ID, --all or --sku SKU")
	case !bulk && *nodeName != "":
		return c.usageErr("--node goes with --all or --sku")
	}
	if bulk {
		return retryStuckParts(ctx, c, *nodeName, *sku)
	}
	return show(ctx, c, c.admin.RetryStuckPart, &v1.RetryStuckPartRequest{Node: rest[0], PartId: rest[1]},
		func(w io.Writer, res *v1.RetryStuckPartResponse) {
			if res.Retried {
				fmt.Fprintf(w, "part %s on %s is pending again, due now\n", rest[1], rest[0])
			} else {
				fmt.Fprintf(w, "part %s on %s is not stuck (already retried, or never set aside)\n", rest[1], rest[0])
			}
		})
}

// cmdPartsSettle confirms or cancels one stuck part whose order's record
// is gone (AdminService.SettleStuckPart); with --route, --sku and --qty
// (all three, a usage error otherwise), one whose own record is gone, by
// those values, and --user (with the three only) for a per-user quota
// part, the user whose count it holds. It prints the part's result; it exits 1 when the part was
// not settled as asked (settled the other way, or its record gone,
// between the service's check and its settle).
func cmdPartsSettle(ctx context.Context, c *client, args []string) error {
	route := c.fs.String("route", "", "route `key` of the SKU the part holds units of, for a part whose own record is gone (with --sku and --qty)")
	sku := c.fs.String("sku", "", "the `SKU` the part holds units of, for a part whose own record is gone (with --route and --qty)")
	qty := c.fs.Int64("qty", 0, "the `units` the part holds, for a part whose own record is gone (with --route and --sku)")
	user := c.fs.String("user", "", "the `user` of the order of a quota part (id ORDER|TOKEN|q|ROUTE|SKU) whose own record is gone, "+
		"whose count it holds (with --route, --sku and --qty)")
	rest, err := c.parse(args, 3, 3)
	if err != nil {
		return err
	}
	req := &v1.SettleStuckPartRequest{Node: rest[0], PartId: rest[1], Action: rest[2]}
	if given := []bool{flagSet(c.fs, "route"), flagSet(c.fs, "sku"), flagSet(c.fs, "qty")}; slices.Contains(given, true) {
		if slices.Contains(given, false) {
			return c.usageErr("--route, --sku and --qty go together: they are what the record of a part whose own record is gone held")
		}
		req.RouteKey, req.SkuId, req.Quantity = route, sku, qty
		if flagSet(c.fs, "user") {
			req.UserId = user
		}
	} else if flagSet(c.fs, "user") {
		return c.usageErr("--user goes with --route, --sku and --qty: it names the user of a quota part whose own record is gone")
	}
	nodeName, partID, action := rest[0], rest[1], rest[2]
	var settled, units string
	switch inventory.Action(action) {
	case inventory.Confirm:
		settled, units = "confirmed", "its units sold"
		if req.UserId != nil {
			units = "its units kept in the user's count"
		}
	case inventory.Cancel:
		settled, units = "cancelled", "its units back to available"
		if req.UserId != nil {
			units = "its units off the user's count"
		}
	default:
		return c.usageErr("ACTION %q: want confirm or cancel", action)
	}
	res, err := call(ctx, c, c.admin.SettleStuckPart, req)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("part %s on %s", partID, nodeName)
	var line string
	switch res.Result {
	case "done":
		line = fmt.Sprintf("%s %s (%s)", what, settled, units)
	case "already":
		line = what + " was already " + settled
	default:
		line = fmt.Sprintf("%s was not %s: the settle answered %s (settled otherwise, or its record gone, since the check)", what, settled, res.Result)
	}
	if err := c.out.emit(res, func(w io.Writer) { fmt.Fprintln(w, line) }); err != nil {
		return err
	}
	if res.Result != "done" && res.Result != "already" {
		return fmt.Errorf("parts settle: %s was not %s (%s)", what, settled, res.Result)
	}
	return nil
}

// retryStuckLimit is how many stuck parts per node one `parts retry --all`
// or `--sku` lists and retries (the most ListStuckParts returns); a
// variable for tests.
var retryStuckLimit int32 = 10000

// retryStuckParts retries the parts set aside on nodeName (every node when
// empty) of sku (every SKU when empty): it lists them, then retries each.
// It prints what it retried (--json: the retried parts, as
// ListStuckPartsResponse) and fails, after printing, when it did not do
// all of it (retryOutcome.incomplete).
func retryStuckParts(ctx context.Context, c *client, nodeName, sku string) error {
	list, err := call(ctx, c, c.admin.ListStuckParts, &v1.ListStuckPartsRequest{Node: nodeName, Limit: retryStuckLimit})
	if err != nil {
		return err
	}
	o := retryEach(ctx, c, list, sku)
	err = c.out.emit(o.done, func(w io.Writer) {
		what := "stuck part(s)"
		if sku != "" {
			what += " of SKU " + sku
		}
		fmt.Fprintf(w, "%d %s pending again, due now (the reconciler settles them, or sets them aside again)\n", len(o.done.Parts), what)
		if o.gone > 0 {
			fmt.Fprintf(w, "%d were no longer stuck\n", o.gone)
		}
		for _, n := range o.truncated {
			fmt.Fprintf(w, "node %s: only its %d oldest stuck parts were looked at: run this again\n", n, retryStuckLimit)
		}
		for _, u := range o.done.Unreachable {
			fmt.Fprintf(w, "unreachable: %s\n", u)
		}
	})
	if err != nil {
		return err
	}
	return o.incomplete()
}

// retryOutcome is what a bulk retry did.
type retryOutcome struct {
	done      *v1.ListStuckPartsResponse // the parts retried, and the nodes not read
	failed    []string                   // "NODE PART: error" of each retry that failed
	gone      int                        // parts no longer stuck when retried
	truncated []string                   // nodes with retryStuckLimit parts listed: maybe more
}

// retryEach retries the parts of list (of sku, every SKU when empty).
func retryEach(ctx context.Context, c *client, list *v1.ListStuckPartsResponse, sku string) retryOutcome {
	o := retryOutcome{done: &v1.ListStuckPartsResponse{Unreachable: list.Unreachable}}
	perNode := map[string]int32{}
	for _, p := range list.Parts {
		if perNode[p.Node]++; perNode[p.Node] == retryStuckLimit {
			o.truncated = append(o.truncated, p.Node)
		}
		if sku != "" && p.SkuId != sku {
			continue
		}
		res, err := call(ctx, c, c.admin.RetryStuckPart, &v1.RetryStuckPartRequest{Node: p.Node, PartId: p.PartId})
		switch {
		case err != nil:
			o.failed = append(o.failed, fmt.Sprintf("%s %s: %v", p.Node, p.PartId, err))
		case res.Retried:
			o.done.Parts = append(o.done.Parts, p)
		default:
			o.gone++ // retried meanwhile (by the reconciler's backoff, or another operator)
		}
	}
	slices.Sort(o.truncated)
	return o
}

// incomplete is the error of a bulk retry that did not do all of its job:
// retries that failed, nodes that could not be read (their stuck parts
// were not listed, so not retried), nodes with more stuck parts than one
// run lists. nil when it did it all.
func (o retryOutcome) incomplete() error {
	var msgs []string
	if len(o.failed) > 0 {
		msgs = append(msgs, fmt.Sprintf("%d retries failed: %s", len(o.failed), strings.Join(o.failed, "; ")))
	}
	if len(o.done.Unreachable) > 0 {
		msgs = append(msgs, fmt.Sprintf("%s not reached, their stuck parts not retried: run this again once they are back",
			nodeNames(o.done.Unreachable)))
	}
	if len(o.truncated) > 0 {
		msgs = append(msgs, fmt.Sprintf("only the %d oldest stuck parts of %s were looked at: run this again",
			retryStuckLimit, strings.Join(o.truncated, ", ")))
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

func cmdNodeAccept(ctx context.Context, c *client, args []string) error {
	force := c.fs.Bool("force", false, "accept the node even when it is UP (not refused)")
	rest, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	return show(ctx, c, c.admin.AcceptNode, &v1.AcceptNodeRequest{Node: rest[0], Force: *force},
		func(w io.Writer, res *v1.AcceptNodeResponse) {
			fmt.Fprintf(w, "node %s accepted: incarnation %s, generation %d, write sequence %d\n",
				res.Node, res.Incarnation, res.Generation, res.Seq)
		})
}
