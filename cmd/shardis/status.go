package main

// shardis status: the nodes (ListNodes), the service's readiness
// (/readyz) and what its /metrics say about the topology, the redo
// backlog, deferred and stuck parts. /readyz and /metrics are served
// unauthenticated on the service's address; when one cannot be read its
// lines say so, the rest is printed, and status exits 1.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// Gauges of the service's /metrics that status shows (internal/metrics).
const (
	metricTopoEpoch     = "shardis_topology_epoch"
	metricTopoReady     = "shardis_topology_ready"
	metricTopoMigrating = "shardis_topology_migrating"
	metricRedoUnacked   = "shardis_redo_unacked_entries"
	metricStuck         = "shardis_stuck_parts"
	metricDeferred      = "shardis_deferred_parts"
)

// samples holds gauges by name, then by their node label ("" when none).
type samples map[string]map[string]float64

// value returns the gauge name of node and whether it was exposed.
func (s samples) value(name, node string) (float64, bool) {
	v, ok := s[name][node]
	return v, ok
}

func cmdStatus(ctx context.Context, c *client, args []string) error {
	if _, err := c.parse(args, 0, 0); err != nil {
		return err
	}
	res, err := call(ctx, c, c.admin.ListNodes, &v1.ListNodesRequest{})
	if err != nil {
		return err
	}
	if c.out.json {
		// the node list alone (ListNodes' response), complete: exit 0;
		// readiness and gauges are /readyz's and /metrics' to read
		return c.out.emit(res, nil)
	}
	ready, rerr := c.readiness(ctx)
	m, merr := c.metrics(ctx)
	if err := c.out.emit(res, func(w io.Writer) {
		writeNodes(w, res.Nodes, m)
		writeService(w, ready, m, merr)
	}); err != nil {
		return err
	}
	// What could not be read was printed as unknown: a script must not
	// take the report as complete.
	if err := errors.Join(rerr, merr); err != nil {
		return fmt.Errorf("status incomplete: %w", err)
	}
	return nil
}

// writeService prints the service's readiness (with any pending topology
// change), its topology epoch and its deferred parts.
func writeService(w io.Writer, ready string, m samples, merr error) {
	fmt.Fprintln(w)
	if ready == "" {
		ready = "unknown (/readyz could not be read)"
	}
	fmt.Fprintf(w, "SERVICE: %s\n", ready)
	if merr != nil {
		fmt.Fprintf(w, "TOPOLOGY, REDO BACKLOG, DEFERRED AND STUCK PARTS: unknown (%v)\n", merr)
		return
	}
	topo := "unknown"
	if e, ok := m.value(metricTopoEpoch, ""); ok {
		topo = "epoch " + strconv.FormatFloat(e, 'f', -1, 64)
		if e == 0 {
			topo = "epoch unknown (no node read yet)"
		}
		if v, _ := m.value(metricTopoMigrating, ""); v == 1 {
			topo += ", migrating: shardis topology apply has not finished"
		}
		if v, ok := m.value(metricTopoReady, ""); ok && v == 0 {
			topo += ", NOT acting at the nodes' topology (inventory calls refused)"
		}
	}
	fmt.Fprintf(w, "TOPOLOGY: %s\n", topo)
	if d, ok := m.value(metricDeferred, ""); ok {
		fmt.Fprintf(w, "DEFERRED PARTS: %s (settles waiting for their node)\n", strconv.FormatFloat(d, 'f', -1, 64))
	}
	stuck := 0.0
	for _, v := range m[metricStuck] {
		stuck += v
	}
	if stuck > 0 {
		fmt.Fprintf(w, "STUCK PARTS: %s (shardis parts stuck lists them)\n", strconv.FormatFloat(stuck, 'f', -1, 64))
	}
}

// nodeGauge formats a per-node gauge, "-" when the service did not expose
// it (a node outside the inventory server, or not usable).
func nodeGauge(m samples, name, node string) string {
	if v, ok := m.value(name, node); ok {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return "-"
}

// persistence formats a node's eviction and persistence settings.
func persistence(n *v1.NodeInfo) string {
	if n.Appendonly == "" && n.MaxmemoryPolicy == "" {
		return "-"
	}
	return fmt.Sprintf("aof=%s fsync=%s maxmemory=%s", orDash(n.Appendonly), orDash(n.Appendfsync), orDash(n.MaxmemoryPolicy))
}

// readiness returns the first line of the service's /readyz: 200 when
// ready, 503 (its body says why) when not; "" and an error when it cannot
// be read.
func (c *client) readiness(ctx context.Context) (string, error) {
	b, err := c.get(ctx, "/readyz", 4096)
	if err != nil {
		return "", fmt.Errorf("/readyz: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return line, nil
}

// metrics reads the gauges status shows from the service's /metrics.
func (c *client) metrics(ctx context.Context) (samples, error) {
	b, err := c.get(ctx, "/metrics", 4<<20)
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	return parseGauges(string(b)), nil
}

// get reads up to limit bytes of path on the service.
func (c *client) get(ctx context.Context, path string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, limit))
	ok := res.StatusCode == http.StatusOK || (path == "/readyz" && res.StatusCode == http.StatusServiceUnavailable)
	if err == nil && !ok {
		err = fmt.Errorf("HTTP %s", res.Status)
	}
	return b, err
}

// parseGauges reads the samples of status's gauges from the Prometheus
// text format: `name{node="n1"} 12` or `name 3`; other lines are skipped.
func parseGauges(text string) samples {
	want := map[string]bool{metricTopoEpoch: true, metricTopoReady: true, metricTopoMigrating: true,
		metricRedoUnacked: true, metricStuck: true, metricDeferred: true}
	out := samples{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		series, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		name, labels, _ := strings.Cut(series, "{")
		if !want[name] {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(val)[0], 64)
		if err != nil {
			continue
		}
		node := ""
		if i := strings.Index(labels, `node="`); i >= 0 {
			node, _, _ = strings.Cut(labels[i+len(`node="`):], `"`)
		}
		if out[name] == nil {
			out[name] = map[string]float64{}
		}
		out[name][node] = v
	}
	return out
}
