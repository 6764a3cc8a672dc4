package explore

import "fmt"

// The violations a schedule's checks find (check.go), and those they
// excuse because a node's accepted data loss took the write they are
// about (lossdiff.go).

// violations collects a schedule's violations (list) and the excused
// ones (excused), by what the data losses took (exposed, records).
type violations struct {
	list    []string
	exposed map[string]bool // orders a node's data loss exposed (loss.go)
	records map[string]bool // of exposed, those whose record a loss took
	excused []string        // violations about them, not listed
}

// add adds a violation that nothing excuses.
func (v *violations) add(kind, format string, a ...any) {
	v.list = append(v.list, kind+": "+fmt.Sprintf(format, a...))
}

// order adds a violation about order id, or counts it as excused when a
// node's data loss exposed the order.
func (v *violations) order(id, kind, format string, a ...any) {
	if v.exposed[id] {
		v.excused = append(v.excused, kind+": "+fmt.Sprintf(format, a...))
		return
	}
	v.add(kind, format, a...)
}

// decided adds a violation about order id's acknowledged decision, or
// counts it as excused when a node's data loss took the order's record
// (lossdiff.go says why a lost part excuses none).
func (v *violations) decided(id, kind, format string, a ...any) {
	if v.records[id] {
		v.excused = append(v.excused, kind+": "+fmt.Sprintf(format, a...))
		return
	}
	v.add(kind, format, a...)
}

// lossView is what the schedule's data losses took, as the checks
// weigh it: exposed, the orders whose per-order violations are excused (a
// node's accepted data loss took a write of theirs: lossdiff.go), but for
// those about an acknowledged Confirm or Cancel, excused only for records,
// the orders whose record a loss took;
// resurrected, by node, the orders whose moved record a loss brought back
// unmarked there (passed over while away from their home); lostRoutes,
// the routes whose counters a loss may have changed (lossMoved): their
// quota counters' checks against the parts that count them are excused,
// and so are units a node's loss gave back to it off such a route
// (checkStranded); their stock over all nodes is held to what the
// losses explain like any route's (checkStock).
type lossView struct {
	exposed     map[string]bool
	records     map[string]bool
	resurrected map[string]map[string]bool
	lostRoutes  map[string]bool
}
