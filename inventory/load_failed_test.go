package inventory

import (
	"errors"
	"strings"
	"testing"
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
	failed := []string{"n1 (share 10): node n1: connection reset"}
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
		err := loadFailed("r", "s", 30, share, c.took, failed, c.maybe, "")
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
