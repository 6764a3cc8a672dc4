package inventory

import (
	"errors"
	"sync/atomic"
)

// Stats counts what an Inventory did since New; every field is cumulative.
type Stats struct {
	// Reservations counts Reserve calls by outcome: "ok", "insufficient",
	// "limit", "unavailable", "cancelled", "mismatch", "invalid",
	// "unknown_sku", "error" (OutcomeOf).
	Reservations map[string]int64
	// PartsRolledBack counts parts cancelled by a failed Reserve (taken
	// parts and tombstones for unknown outcomes).
	PartsRolledBack int64
	// PartsDeferred counts parts handed to the Deferrer.
	PartsDeferred int64
	// LocalReservations counts orders reserved by one script on their
	// home node (local.go).
	LocalReservations int64
	// StagedReservations counts orders reserved in one round by a staged
	// record and parallel takes (staged.go); StagedFallbacks those whose
	// round could not be done in full and took the general path;
	// StagedRecovered staged orders a reader found reserved and committed
	// itself (its attempt did not, or not yet); StagedRefusals orders the
	// one round refused for good (a per-user limit, a limited SKU without
	// a user) without the general path.
	StagedReservations, StagedFallbacks, StagedRecovered, StagedRefusals int64
	// RefusedUnwritten counts orders refused by reads alone, before
	// anything was written (soldout.go); RefusedFenced those refused
	// after the reads behind a fence, a failed record and nothing else.
	RefusedUnwritten, RefusedFenced int64
	// GroupScriptCalls counts the script calls of grouped scripts sent to
	// nodes, GroupedCalls the calls they carried (group.go): their ratio is
	// the mean group size.
	GroupScriptCalls, GroupedCalls int64
	// CarriedCommits counts one-round reservations' commits applied by a
	// write group they rode on (carry.go) instead of a call of their own.
	CarriedCommits int64
	// RefusalReadScripts counts the read-only script calls that checked
	// orders before a refusal without a write (peekbatch.go), RefusalReads
	// the orders' reads they carried: their ratio is the mean batch size.
	RefusalReadScripts, RefusalReads int64
}

var outcomes = [...]string{"ok", "insufficient", "limit", "unavailable", "cancelled", "mismatch", "invalid", "unknown_sku", "error"}

type counters struct {
	reservations [len(outcomes)]atomic.Int64 // indexed like outcomes
	rolledBack   atomic.Int64
	deferred     atomic.Int64
	local        atomic.Int64

	staged, stagedFallback, stagedRecovered, stagedRefused atomic.Int64
	refusedUnwritten, refusedFenced                        atomic.Int64

	groupScripts, groupCalls atomic.Int64
	carried                  atomic.Int64
	peekScripts, peekReads   atomic.Int64
}

// Stats returns the cumulative counters. Safe for concurrent use.
func (inv *Inventory) Stats() Stats {
	s := Stats{Reservations: make(map[string]int64, len(outcomes))}
	for i, o := range outcomes {
		s.Reservations[o] = inv.stats.reservations[i].Load()
	}
	s.PartsRolledBack = inv.stats.rolledBack.Load()
	s.PartsDeferred = inv.stats.deferred.Load()
	s.LocalReservations = inv.stats.local.Load()
	s.StagedReservations = inv.stats.staged.Load()
	s.StagedFallbacks = inv.stats.stagedFallback.Load()
	s.StagedRecovered = inv.stats.stagedRecovered.Load()
	s.StagedRefusals = inv.stats.stagedRefused.Load()
	s.RefusedUnwritten = inv.stats.refusedUnwritten.Load()
	s.RefusedFenced = inv.stats.refusedFenced.Load()
	s.GroupScriptCalls = inv.stats.groupScripts.Load()
	s.GroupedCalls = inv.stats.groupCalls.Load()
	s.CarriedCommits = inv.stats.carried.Load()
	s.RefusalReadScripts = inv.stats.peekScripts.Load()
	s.RefusalReads = inv.stats.peekReads.Load()
	return s
}

// OutcomeOf returns the Stats.Reservations label of a Reserve error:
// "unknown_sku" for a SKU never loaded on its route (a caller's typo, not
// the system's failure), "error" for an error of no other label.
func OutcomeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrUnknownSKU):
		return "unknown_sku"
	case errors.Is(err, ErrInsufficientStock):
		return "insufficient"
	case errors.Is(err, ErrLimitExceeded):
		return "limit"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrCancelled):
		return "cancelled"
	case errors.Is(err, ErrOrderMismatch):
		return "mismatch"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	}
	return "error"
}

func (c *counters) reserve(err error) {
	o := OutcomeOf(err)
	for i, name := range outcomes {
		if name == o {
			c.reservations[i].Add(1)
			return
		}
	}
}
