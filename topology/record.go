package topology

import (
	"strconv"
	"strings"
)

// What every node records of the topology, and what an instance reports
// of it (doc.go says who writes which field when).

// Phase is where a topology epoch is in its change.
type Phase string

const (
	// PhaseMigrating: records and counters may still sit where the
	// previous topology put them; instances consult both.
	PhaseMigrating Phase = "migrating"
	// PhaseStable: everything is where the current topology puts it.
	PhaseStable Phase = "stable"
)

// Valid reports whether p is one of the two phases.
func (p Phase) Valid() bool { return p == PhaseMigrating || p == PhaseStable }

// Token is an epoch token, "E:fingerprint": what every script's prelude
// compares with the node's.
func Token(epoch int64, fingerprint string) string {
	return strconv.FormatInt(epoch, 10) + ":" + fingerprint
}

// SplitToken splits an epoch token into its epoch and fingerprint; ok is
// false when tok is not "E:fingerprint" with a positive E.
func SplitToken(tok string) (epoch int64, fingerprint string, ok bool) {
	e, fp, found := strings.Cut(tok, ":")
	epoch, err := strconv.ParseInt(e, 10, 64)
	if !found || err != nil || epoch < 1 {
		return 0, "", false
	}
	return epoch, fp, true
}

// Record is one node's topology record.
type Record struct {
	Node  string // the configured name of the node holding the record
	Epoch int64  // 0: the node has no record
	// Token is the record's epoch token, Token(Epoch, Current's
	// fingerprint); for a Lost record the token the stamp names, for a
	// Fenced one the fenced token the stamp holds.
	Token string
	// Current is the topology of Epoch.
	Current Topology
	// Prev is the topology of Epoch-1; nil when the record has none (the
	// first epoch).
	Prev *Topology
	// Phase is the record's phase; "" for a Lost record.
	Phase Phase
	// Attempt names the apply that moved the node to Token: a random id
	// its first bump drew, which its resumes and forwards keep (Change.
	// Attempt; a write of another attempt at the node's token is
	// refused); "" for a first epoch's record, one of a release before,
	// or one an instance wrote again after it was lost with no other
	// node's record at its token to copy (the next write of the apply
	// gives it the attempt).
	Attempt string
	// Lost is true when the node's stamp names Token but its record is
	// gone; the other fields but Node and Token are unknown (Epoch 0,
	// Phase ""). At the current token, an apply of the current topology
	// writes it again (Report.Repaired; doc.go, "A lost record"), and a
	// new apply refuses it by name.
	Lost bool
	// Fenced is true when the node was accepted behind its peers (it went
	// back to a copy from before an apply: doc.go, "A node that went
	// back"): Token is the fenced token its stamp holds, which no
	// instance matches, and the other fields are the record it came back
	// with. Its copy is the newest record only when it is above every
	// unfenced one (every node read fenced, or a bump stopped after it:
	// newestOf); an apply brings the node forward.
	Fenced bool
	// Held is the token under a fenced record's fence ("" otherwise).
	Held string
	// Incarnation is the node's stamp incarnation when its record was
	// read ([Driver.Read]; "" when the driver tells none): a new one each
	// time the node is accepted (router.AcceptNode), so a node restored
	// from a copy of its data since has another. Given to [Driver.Write]
	// with a record of phase stable, the write is refused unless the node
	// is still at it (step 4, and a move forward's stable write: doc.go,
	// "A copy taken during step 3"; the repair of a lost record: "A lost
	// record"); Apply sets it on those writes only.
	Incarnation string
}

// Initial is the record of a topology's first epoch: epoch 1, stable, no
// previous topology (what nodes with no record anywhere are given).
func Initial(t Topology) Record {
	return Record{Epoch: 1, Token: Token(1, t.Fingerprint()), Current: t, Phase: PhaseStable}
}

// Newest returns the record of the highest epoch among recs, lost and
// fenced ones left out (the first of equals); nil when there is none.
func Newest(recs []Record) *Record {
	var newest *Record
	for i := range recs {
		if recs[i].Lost || recs[i].Fenced {
			continue
		}
		if newest == nil || recs[i].Epoch > newest.Epoch {
			newest = &recs[i]
		}
	}
	return newest
}

// Status is what an instance knows of the topology.
type Status struct {
	// Epoch is the epoch of the nodes' newest record (0 when no node
	// could be read).
	Epoch int64
	// Phase is the phase of the nodes' newest record ("" when no node
	// could be read).
	Phase Phase
	// Fingerprint is the fingerprint of this instance's configuration.
	Fingerprint string
	// Ready is true when this instance acts at the nodes' epoch.
	Ready bool
	// Reason says why not, when not Ready.
	Reason string
	// Pending, when Ready, says how this instance's configuration differs
	// from the applied topology it serves, e.g. "pending topology change:
	// config epoch differs: +n4 (route x)"; "" when it is the applied one.
	Pending string
}
