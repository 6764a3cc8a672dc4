package inventory

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A LoadStock that failed on a node after another added its share says
// so: it wraps ErrPartlyApplied (with ErrUnavailable) and names the nodes
// that added their share, and that a retry adds again. Before, it wrapped
// ErrUnavailable alone, which the service answered unavailable: gRPC's
// "retry the same call", and the retry added those shares twice. A load
// that added nothing, for sure, is ErrUnavailable alone: retried as it
// is, it adds once.
func TestLoadFailedSaysWhatWasAdded(t *testing.T) {
	share := map[string]int64{"n1": 10, "n2": 10, "n3": 10}
	failed := []error{fmt.Errorf("n1 (share 10): %w: node n1: connection reset", ErrUnavailable)}
	for _, c := range []struct {
		name        string
		took, maybe []string
		partly      bool
		says        []string
	}{
		{"two of three added", []string{"n2", "n3"}, nil, true,
			[]string{`sku "s" (route "r")`, "20 of 30 units were added, on n2 (10), n3 (10)", "a retry of the same call adds them again"}},
		{"the failed node may have added", nil, []string{"n1"}, true,
			[]string{"n1 may have added their share too (outcome unknown)", "a retry of the same call adds them again"}},
		{"nothing added", nil, nil, false,
			[]string{`sku "s" (route "r")`, "no unit was added: the same call may be retried"}},
	} {
		err := loadFailed("r", "s", 30, share, c.took, failed, c.maybe, lateAdvice(strings.Join(c.maybe, ", "), time.Now(), true, true), "")
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrPartlyApplied) != c.partly {
			t.Errorf("%s: %v: ErrUnavailable %v, ErrPartlyApplied %v; want true, %v", c.name, err,
				errors.Is(err, ErrUnavailable), errors.Is(err, ErrPartlyApplied), c.partly)
		}
		for _, s := range c.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", c.name, err, s)
			}
		}
	}
}

// A load that added no unit keeps the class of the nodes' failures: a
// node that refused it for good (a corrupt counter, a stock that would
// pass 2^53, a failed script) makes the error wrap that node's error, not
// ErrUnavailable, and it does not invite the same call again; a refusal
// for good wins over a node that could not serve for now. Before, every
// such load wrapped ErrUnavailable alone and said "the same call may be
// retried": the service answered unavailable (retried by retry policies
// forever) where Reserve and GetStock of the same data answer internal.
func TestLoadFailedKeepsTheNodesErrorClasses(t *testing.T) {
	share := map[string]int64{"n1": 10, "n2": 10, "n3": 10}
	down := fmt.Errorf("n1 (share 10): %w: node n1: connection reset", ErrUnavailable)
	corrupt := fmt.Errorf("n2 (share 10): %w: node n2: SHARDIS_CORRUPT available holds x", ErrCorrupt)
	outOfRange := fmt.Errorf("n3 (share 10): %w: node n3: SHARDIS_RANGE stock would exceed 2^53", ErrInvalid)
	for _, c := range []struct {
		name      string
		failed    []error
		is, isNot []error
		says, not string
	}{
		{"corrupt everywhere", []error{corrupt}, []error{ErrCorrupt}, []error{ErrUnavailable, ErrPartlyApplied},
			"a retry of the same call meets the same refusal on 1 node(s)", "may be retried"},
		{"out of range", []error{outOfRange}, []error{ErrInvalid}, []error{ErrUnavailable, ErrPartlyApplied},
			"meets the same refusal", "may be retried"},
		{"one down, one corrupt", []error{down, corrupt}, []error{ErrCorrupt}, []error{ErrUnavailable, ErrPartlyApplied},
			"meets the same refusal on 1 node(s)", "may be retried"},
		{"corrupt and out of range", []error{corrupt, outOfRange}, []error{ErrCorrupt, ErrInvalid}, []error{ErrUnavailable},
			"meets the same refusal on 2 node(s)", "may be retried"},
		{"down only", []error{down}, []error{ErrUnavailable}, []error{ErrCorrupt, ErrPartlyApplied},
			"no unit was added: the same call may be retried", "refusal"},
	} {
		err := loadFailed("r", "s", 30, share, nil, c.failed, nil, "", "")
		for _, want := range c.is {
			if !errors.Is(err, want) {
				t.Errorf("%s: %v does not wrap %v", c.name, err, want)
			}
		}
		for _, no := range c.isNot {
			if errors.Is(err, no) {
				t.Errorf("%s: %v wraps %v", c.name, err, no)
			}
		}
		if msg := err.Error(); !strings.Contains(msg, c.says) || strings.Contains(msg, c.not) {
			t.Errorf("%s: %q: want it to say %q, not %q", c.name, msg, c.says, c.not)
		}
		for _, f := range c.failed {
			if !strings.Contains(err.Error(), f.Error()) {
				t.Errorf("%s: %q does not name the failure %q", c.name, err, f)
			}
		}
	}
}

// A load call whose outcome is unknown is waited out only when it may
// still reach its node: one that ran on the master without a replica's
// acknowledgement (ErrNotDurable) or whose reply could not be read ran
// already. Before, LoadStock
// waited its calls' deadlines out after an unacknowledged load too (about
// 4 s), and the Reserves that followed it in TestDurabilityReplicaWithoutReplica
// met their caller's deadline.
func TestLoadWaitsOnlyForCallsThatMayStillLand(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("%w: node n1: read tcp: i/o timeout", ErrUnavailable), true},
		{fmt.Errorf("%w: node n1: %w", ErrUnavailable, ErrNotDurable), false},
		{fmt.Errorf("%w: node n1: a reply of the wrong shape", ErrMalformedReply), false},
	} {
		if got := mayStillLand(c.err); got != c.want {
			t.Errorf("mayStillLand(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
