package main

// Output of the client subcommands: aligned tables for people, or one
// proto3 JSON object per line (--json) for scripts; errors read
// "<code>: <message>".

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// printer writes responses to w, as JSON lines when json is set.
type printer struct {
	w    io.Writer
	json bool
}

// emit writes m as one JSON line, or calls human with a tabwriter that is
// flushed afterwards.
func (p printer) emit(m proto.Message, human func(w io.Writer)) error {
	if p.json {
		b, err := protojson.MarshalOptions{}.Marshal(m)
		if err != nil {
			return fmt.Errorf("encoding response: %w", err)
		}
		// protojson randomly varies its spacing; scripts get it stable.
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			return fmt.Errorf("encoding response: %w", err)
		}
		buf.WriteByte('\n')
		_, err = p.w.Write(buf.Bytes())
		return err
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	human(tw)
	return tw.Flush()
}

// rpcError is a failed call; it reads "<code>: <message>".
type rpcError struct {
	code connect.Code
	msg  string
}

// Error returns "<code>: <message>".
func (e *rpcError) Error() string {
	if e.msg == "" {
		return e.code.String()
	}
	return e.code.String() + ": " + e.msg
}

// transient reports whether err is a call failure worth retrying.
func transient(err error) bool {
	var re *rpcError
	return errors.As(err, &re) && (re.code == connect.CodeUnavailable ||
		re.code == connect.CodeDeadlineExceeded || re.code == connect.CodeAborted)
}

// enumName turns NODE_STATE_UP into "UP" or ORDER_STATUS_CONFIRMED into
// "CONFIRMED".
func enumName(s fmt.Stringer, prefix string) string {
	return strings.TrimPrefix(s.String(), prefix)
}

// formatMs formats Unix milliseconds as an RFC 3339 UTC time.
func formatMs(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// routeList formats a node's routes as server/route, drained ones marked.
func routeList(rs []*v1.RouteStatus) string {
	if len(rs) == 0 {
		return "-"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.Server + "/" + r.Route
		if !r.Enabled {
			parts[i] += "(drained)"
		}
	}
	return strings.Join(parts, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeNodes prints the status table (the redo backlog and stuck parts
// from m, "-" where m lacks them), then one line per DOWN reason.
func writeNodes(w io.Writer, nodes []*v1.NodeInfo, m samples) {
	fmt.Fprintln(w, "NAME\tADDR\tSTATE\tBREAKER\tFAILED_PROBES\tPERSISTENCE\tREDO_BACKLOG\tSTUCK\tROUTES")
	for _, n := range nodes {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", n.Name, n.Addr, enumName(n.State, "NODE_STATE_"),
			orDash(n.Breaker), n.FailedProbes, persistence(n), nodeGauge(m, metricRedoUnacked, n.Name),
			nodeGauge(m, metricStuck, n.Name), routeList(n.Routes))
	}
	var reasons []string
	for _, n := range nodes {
		if n.DownReason != "" {
			reasons = append(reasons, fmt.Sprintf("%s DOWN: %s\n", n.Name, n.DownReason))
		}
		if n.Warning != "" {
			reasons = append(reasons, fmt.Sprintf("%s WARNING: %s\n", n.Name, n.Warning))
		}
	}
	if len(reasons) > 0 {
		// A line without tabs ends the aligned block.
		fmt.Fprintln(w)
		for _, r := range reasons {
			fmt.Fprint(w, r)
		}
	}
}

// writeNodeRoutes prints the outcome of drain or undrain and the node's
// routes afterwards.
func writeNodeRoutes(w io.Writer, n *v1.NodeInfo, server, route string, enabled bool) {
	verb := "drained"
	if enabled {
		verb = "enabled"
	}
	fmt.Fprintf(w, "%s: %s/%s %s\n", n.Name, server, route, verb)
	fmt.Fprintln(w, "SERVER\tROUTE\tSTATE")
	for _, r := range n.Routes {
		st := "enabled"
		if !r.Enabled {
			st = "drained"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.Server, r.Route, st)
	}
}

// writeStock prints a SKU's totals and its per-node table.
func writeStock(w io.Writer, s *v1.StockLevel) {
	limit := "none"
	if s.PerUserLimit > 0 {
		limit = fmt.Sprint(s.PerUserLimit)
	}
	fmt.Fprintf(w, "sku %s: available %d, reserved %d, confirmed %d, loaded %d, per-user limit %s\n",
		s.SkuId, s.Available, s.Reserved, s.Confirmed, s.Loaded, limit)
	if down := unreachable(s.Nodes); down > 0 {
		fmt.Fprintf(w, "totals are partial: %d of %d nodes unreachable\n", down, len(s.Nodes))
	}
	fmt.Fprintln(w, "NODE\tREACHABLE\tAVAILABLE\tRESERVED\tCONFIRMED\tLOADED")
	var errs []string
	for _, n := range s.Nodes {
		reach := "yes"
		if !n.Reachable {
			reach = "no"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\n", n.Node, reach, n.Available, n.Reserved, n.Confirmed, n.Loaded)
		if n.Error != "" {
			errs = append(errs, fmt.Sprintf("%s: %s\n", n.Node, n.Error))
		}
	}
	if len(errs) > 0 {
		fmt.Fprintln(w)
		for _, e := range errs {
			fmt.Fprint(w, e)
		}
	}
}

func unreachable(nodes []*v1.NodeStock) int {
	n := 0
	for _, ns := range nodes {
		if !ns.Reachable {
			n++
		}
	}
	return n
}

// emitStock prints res, a stock report of st, and then, when a node of it
// could not be read, returns the error naming them (stockUnread): the
// totals are partial, and a script must not take them as the SKU's.
func emitStock(p printer, res proto.Message, st *v1.StockLevel, prefix string) error {
	if err := p.emit(res, func(w io.Writer) { writeStock(w, st) }); err != nil {
		return err
	}
	return stockUnread(prefix, st.GetNodes())
}

// stockUnread names the nodes of a stock report that could not be read,
// its message opened by prefix, e.g. "stock get: node n3 could not be
// read: the totals leave out its counters"; nil when every node was read.
func stockUnread(prefix string, nodes []*v1.NodeStock) error {
	var names []string
	for _, n := range nodes {
		if !n.Reachable {
			names = append(names, n.Node)
		}
	}
	switch len(names) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%snode %s could not be read: the totals leave out its counters", prefix, names[0])
	}
	return fmt.Errorf("%snodes %s could not be read: the totals leave out their counters", prefix, strings.Join(names, ", "))
}

// writeReservation prints the order's deadline and one line per receipt.
func writeReservation(w io.Writer, r *v1.ReserveResponse) {
	fmt.Fprintf(w, "order %s reserved until %s\n", r.OrderId, formatMs(r.DeadlineUnixMs))
	fmt.Fprintln(w, "ITEM\tSKU\tQTY\tNODE\tREDO_LOG\tOFFSET")
	for _, rc := range r.Receipts {
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%d\n", rc.ItemIndex, rc.SkuId, rc.Quantity, rc.Node, rc.RedoLog, rc.Offset)
	}
}

// writeOutcome prints the status of a confirmed or cancelled order.
func writeOutcome(w io.Writer, order string, st v1.OrderStatus, pending int32, reason string) {
	status := strings.ToLower(enumName(st, "ORDER_STATUS_"))
	fmt.Fprintf(w, "order %s: %s", order, status)
	if reason != "" && reason != status {
		fmt.Fprintf(w, " (%s)", reason)
	}
	if pending > 0 {
		fmt.Fprintf(w, ", %d part(s) pending until their nodes come back", pending)
	}
	fmt.Fprintln(w)
}

// redoTable prints redo-log entries in columns that stay aligned across
// the polls of --follow: widths only grow, the header is printed once.
type redoTable struct {
	widths []int
}

var redoHeader = []string{"OFFSET", "PART", "ORDER", "SKU", "QTY", "STATE", "AT"}

// write prints one response's entries. after is the offset it was read
// from, for the message when there are none.
func (t *redoTable) write(w io.Writer, r *v1.ReadRedoLogResponse, after int64) {
	if len(r.Entries) == 0 {
		fmt.Fprintf(w, "%s on %s: no entries after offset %d\n", r.RedoLog, r.Node, after)
		return
	}
	rows := make([][]string, len(r.Entries))
	for i, e := range r.Entries {
		rows[i] = []string{fmt.Sprint(e.Offset), e.PartId, e.OrderId, e.SkuId, fmt.Sprint(e.Quantity),
			e.State, formatMs(e.AtUnixMs)}
	}
	first := t.widths == nil
	if first {
		t.widths = make([]int, len(redoHeader))
		rows = append([][]string{redoHeader}, rows...)
		fmt.Fprintf(w, "%s on %s:\n", r.RedoLog, r.Node)
	}
	for _, row := range rows {
		for i, cell := range row {
			t.widths[i] = max(t.widths[i], len(cell))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, cell := range row {
			if i == len(row)-1 {
				b.WriteString(cell)
			} else {
				fmt.Fprintf(&b, "%-*s  ", t.widths[i], cell)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}
