package chaos

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run.
type Report struct {
	Seed     int64         // Options.Seed: the run's seed
	Duration time.Duration // Options.Duration: how long the clients ran
	Clients  int           // Options.Clients: concurrent order clients
	Nodes    int           // Options.Nodes: redis-server nodes (or Sentinel groups), the spare left out
	// Topology says what the nodes were (standalone or Sentinel groups)
	// and the inventory durability.
	Topology string

	// Paths counts successful Reserve calls of every service instance by
	// fast path ("local", "staged"), and one-round attempts that fell back
	// to the general path or were committed by a later reader.
	Paths map[string]int64

	// Ops counts client calls: operation → outcome ("ok" or a Connect
	// code such as "unavailable") → calls.
	Ops map[string]map[string]int64
	// Timeline lists the faults injected, in order.
	Timeline []Fault
	// SKUs is what the run loaded.
	SKUs []SKU
	// Stock is what the nodes held of each SKU at the end, in SKUs' order.
	Stock []SKUResult
	// Orders counts the order ids the clients used.
	Orders int
	// Statuses counts those orders by their final order-record status
	// ("missing" for an order with no record).
	Statuses map[string]int
	// Known counts those orders by what their clients knew of them (e.g.
	// "seen confirmed", "outcome unknown").
	Known map[string]int
	// LimitPairs counts the (SKU, user) pairs whose per-user limit was
	// checked, LimitReached those whose user holds exactly the limit.
	LimitPairs, LimitReached int
	// RedoEntries counts the redo-log entries checked.
	RedoEntries int64
	// Violations lists the first violations of each kind (at most 20
	// each), excused ones left out.
	Violations []Violation
	// ViolationCounts counts every violation by kind, excused ones left
	// out.
	ViolationCounts map[string]int
	// Notes are unexpected but allowed observations (internal errors,
	// stray keys).
	Notes []string
	// Excused counts, by kind, violations about orders, quotas and
	// database rows whose data a node lost when it was rolled back to an
	// older snapshot and accepted (excuse.go): expected by design, not
	// failures.
	Excused map[string]int
	// ExcusedExamples are the first few excused violations of each kind,
	// "kind: detail"; Print shows them only when Verbose.
	ExcusedExamples []string
	// Verbose makes Print list ExcusedExamples under their counts.
	Verbose bool
	// Unchecked says why the checks did not run to the end (a node that
	// could not be read, the pending parts index unreadable, the
	// database's rows unreadable); "" when they did. A report with it
	// never prints PASS: no violation found says nothing then.
	Unchecked string
	excuse    *exposure

	LoadTook time.Duration // from the start until the clients stopped
	HealTook time.Duration // from the load's end until no part was pending
	Elapsed  time.Duration // the whole run, checks included

	mu sync.Mutex
}

// Violation is one broken invariant.
type Violation struct {
	Kind   string // the invariant broken, e.g. "stock-balance"
	Detail string // what was found, naming the order, SKU or node
}

// SKUResult is one SKU's totals over its nodes at the end.
type SKUResult struct {
	SKU
	Available     int64 // units available, summed over the nodes
	Reserved      int64 // units reserved, summed over the nodes
	Confirmed     int64 // units confirmed, summed over the nodes
	LoadedOnNodes int64 // the stock hashes' loaded counters, summed over the nodes
	// OK is true when the SKU's counters passed every stock check: none
	// negative, each node's and the total adding up to what the run
	// loaded, and each node's matching its parts.
	OK bool
}

// maxPerKind is how many violations of one kind the report keeps.
const maxPerKind = 20

func newReport(o Options) *Report {
	return &Report{Seed: o.Seed, Duration: o.Duration, Clients: o.Clients, Nodes: o.Nodes, Topology: o.topology(),
		Ops: map[string]map[string]int64{}, Statuses: map[string]int{}, Known: map[string]int{},
		ViolationCounts: map[string]int{}}
}

// unchecked records that the checks did not run to the end because of
// err, and returns the report and err (Run's answer then).
func (r *Report) unchecked(err error) (*Report, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Unchecked = err.Error()
	return r, err
}

// OK reports whether the run found no violation.
func (r *Report) OK() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ViolationCounts) == 0
}

// violate records a violation, excused when it is about an order or node
// the run's losses expose (exposure.excuses).
func (r *Report) violate(kind, format string, args ...any) {
	detail := fmt.Sprintf(format, args...)
	r.record(kind, detail, func(e *exposure) bool { return e.excuses(kind, detail) })
}

// violateQuota records a violation about quota id q (route:sku:user),
// excused only when the run's losses explain it (exposure.excusesQuota;
// stock: it compares the user's confirmed stock units with the quota).
func (r *Report) violateQuota(kind, q string, stock bool, format string, args ...any) {
	r.record(kind, fmt.Sprintf(format, args...), func(e *exposure) bool { return e.excusesQuota(q, stock) })
}

// violateDecided records a violation about order id's decision, excused
// only when the run's losses explain it (exposure.excusesDecided;
// partNodes: the nodes of the parts that do not follow the decision, none
// for a violation about the record's status).
func (r *Report) violateDecided(kind, id string, partNodes []string, format string, args ...any) {
	r.record(kind, fmt.Sprintf(format, args...), func(e *exposure) bool { return e.excusesDecided(id, partNodes) })
}

// violateOnLostNode records a violation about node that its loss of
// writes can explain only when lossExplains: excused then if node was
// accepted after a rollback (exposure.nodes), never otherwise.
func (r *Report) violateOnLostNode(node string, lossExplains bool, kind, format string, args ...any) {
	r.record(kind, fmt.Sprintf(format, args...), func(e *exposure) bool { return lossExplains && e != nil && e.nodes[node] })
}

// record counts a violation of kind, or an excused one when excused says
// so of the run's exposure.
func (r *Report) record(kind, detail string, excused func(*exposure) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if excused(r.excuse) {
		if r.Excused == nil {
			r.Excused = map[string]int{}
		}
		r.Excused[kind]++
		if r.Excused[kind] <= 3 && len(r.ExcusedExamples) < 50 {
			r.ExcusedExamples = append(r.ExcusedExamples, kind+": "+detail)
		}
		return
	}
	r.ViolationCounts[kind]++
	if r.ViolationCounts[kind] <= maxPerKind {
		r.Violations = append(r.Violations, Violation{Kind: kind, Detail: detail})
	}
}

func (r *Report) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.Notes) < 50 {
		r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
	}
}

func (r *Report) addFault(f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Timeline = append(r.Timeline, f)
}

func (r *Report) addOp(op, code string, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.Ops[op]
	if m == nil {
		m = map[string]int64{}
		r.Ops[op] = m
	}
	m[code] += n
}

func (r *Report) addStatus(s string) { r.Statuses[s]++ }
func (r *Report) addKnown(s string)  { r.Known[s]++ }

func (r *Report) totalOps() int64 {
	var n int64
	for _, m := range r.Ops {
		for _, v := range m {
			n += v
		}
	}
	return n
}

var opOrder = []string{
	"reserve", "reserve-dup", "reserve-retry", "reserve-replay", "reserve-after-cancel", "reserve-invalid",
	"confirm", "confirm-retry", "confirm-again",
	"cancel", "cancel-retry", "cancel-unknown", "cancel-unknown-retry", "cancel-first", "cancel-after-confirm",
}

var codeOrder = []string{
	"ok", "failed_precondition", "not_found", "invalid_argument", "aborted",
	"unavailable", "deadline_exceeded", "canceled", "internal", "unknown",
}

// ordered returns keys in the order of pref, then the others sorted.
func ordered[V any](m map[string]V, pref []string) []string {
	var out, rest []string
	for _, k := range pref {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	for k := range m {
		if !slices.Contains(pref, k) {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// Print writes the report's tables and verdict.
func (r *Report) Print(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, "\n== chaos report: seed %d, %v load, %d clients, %s; load %v, heal %v, total %v ==\n",
		r.Seed, r.Duration, r.Clients, r.Topology, r.LoadTook.Round(time.Millisecond), r.HealTook.Round(time.Millisecond), r.Elapsed.Round(time.Millisecond))

	codes := map[string]bool{}
	for _, m := range r.Ops {
		for c := range m {
			codes[c] = true
		}
	}
	cols := ordered(codes, codeOrder)
	fmt.Fprintf(w, "\noperations (calls by outcome, as the clients saw them):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "op\t%s\ttotal\t\n", strings.Join(cols, "\t"))
	totals := map[string]int64{}
	var all int64
	for _, op := range ordered(r.Ops, opOrder) {
		var sum int64
		fmt.Fprintf(tw, "%s\t", op)
		for _, c := range cols {
			n := r.Ops[op][c]
			sum += n
			totals[c] += n
			fmt.Fprintf(tw, "%d\t", n)
		}
		all += sum
		fmt.Fprintf(tw, "%d\t\n", sum)
	}
	fmt.Fprintf(tw, "total\t")
	for _, c := range cols {
		fmt.Fprintf(tw, "%d\t", totals[c])
	}
	fmt.Fprintf(tw, "%d\t\n", all)
	tw.Flush()

	fmt.Fprintf(w, "\nfaults injected:\n")
	kinds, counts := faultCounts(r.Timeline)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "kind\tcount\ttotal time\ttargets\n")
	total := 0
	for _, k := range kinds {
		var d time.Duration
		targets := map[string]int{}
		for _, f := range r.Timeline {
			if f.Kind == k {
				d += f.Hold
				targets[f.Target]++
			}
		}
		var ts []string
		for _, t := range ordered(targets, nil) {
			ts = append(ts, fmt.Sprintf("%s×%d", t, targets[t]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%v\t%s\n", k, counts[k], d.Round(10*time.Millisecond), strings.Join(ts, " "))
		total += counts[k]
	}
	fmt.Fprintf(tw, "total\t%d\t\t\n", total)
	tw.Flush()
	for _, f := range r.Timeline {
		if f.Err != "" {
			fmt.Fprintf(w, "  fault error: %s\n", f)
		}
	}

	fmt.Fprintf(w, "\norders: %d order ids\n", r.Orders)
	if len(r.Paths) > 0 {
		fmt.Fprintf(w, "  reserve paths (every service instance): local %d, staged %d, staged then general %d, refused in one round %d, staged committed by a reader %d\n",
			r.Paths["local"], r.Paths["staged"], r.Paths["staged_fallback"], r.Paths["staged_refused"], r.Paths["staged_recovered"])
	}
	fmt.Fprintf(w, "  final status on the nodes:")
	for _, s := range ordered(r.Statuses, []string{"confirmed", "cancelled", "failed", "reserving", "staging", "missing", "reserved"}) {
		fmt.Fprintf(w, " %s %d,", s, r.Statuses[s])
	}
	fmt.Fprintf(w, "\n  what the clients knew:")
	for _, s := range ordered(r.Known, nil) {
		fmt.Fprintf(w, " %s %d,", s, r.Known[s])
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "\nstock at the end (every node of the route):\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "sku\tloaded\tavailable\treserved\tconfirmed\tper-user limit\tinvariants\t\n")
	for _, s := range r.Stock {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", s.SKU, s.Loaded, s.Available, s.Reserved, s.Confirmed, s.Limit, verdict(s.OK))
	}
	tw.Flush()
	fmt.Fprintf(w, "per-user limits: %d (sku, user) pairs checked, %d at their limit\n", r.LimitPairs, r.LimitReached)
	fmt.Fprintf(w, "redo log: %d entries checked\n", r.RedoEntries)

	r.printExcused(w)
	if len(r.Notes) > 0 {
		fmt.Fprintf(w, "\nnotes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	r.printVerdict(w)
}

// printVerdict writes PASS, FAIL and the violations, or, when the checks
// did not run to the end, that they did not (with any violations found
// before).
func (r *Report) printVerdict(w io.Writer) {
	if r.Unchecked != "" {
		fmt.Fprintf(w, "\nNOT CHECKED: the checks did not run to the end (seed %d): %s\n", r.Seed, r.Unchecked)
	}
	if len(r.ViolationCounts) == 0 {
		if r.Unchecked == "" {
			fmt.Fprintf(w, "\nPASS: no violation (seed %d)\n", r.Seed)
		}
		return
	}
	n := 0
	for _, c := range r.ViolationCounts {
		n += c
	}
	fmt.Fprintf(w, "\nFAIL: %d violations (seed %d)\n", n, r.Seed)
	for _, k := range ordered(r.ViolationCounts, nil) {
		fmt.Fprintf(w, "  %s: %d\n", k, r.ViolationCounts[k])
		for _, v := range r.Violations {
			if v.Kind == k {
				fmt.Fprintf(w, "    %s\n", v.Detail)
			}
		}
	}
}

// printExcused writes one count line per excused kind (expected, not
// violations) and, when Verbose, the examples of each.
func (r *Report) printExcused(w io.Writer) {
	if len(r.Excused) == 0 {
		return
	}
	more := " (-v lists examples)"
	if r.Verbose {
		more = ""
	}
	fmt.Fprintf(w, "\nexcused, not violations: data lost by design when a node rolled back to an older snapshot was accepted%s:\n", more)
	for _, k := range ordered(r.Excused, nil) {
		fmt.Fprintf(w, "  %s: %d\n", k, r.Excused[k])
		if !r.Verbose {
			continue
		}
		for _, e := range r.ExcusedExamples {
			if detail, ok := strings.CutPrefix(e, k+": "); ok {
				fmt.Fprintf(w, "    %s\n", detail)
			}
		}
	}
}

func verdict(ok bool) string {
	if ok {
		return "hold"
	}
	return "VIOLATED"
}
