package topology

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// Which record is current: an apply reads the records of every node it
// may touch (current), takes the newest of them (newestOf, Current) and
// the apply attempt at its token (attemptAt, attemptOf), and asks which
// nodes are at a token (behind, allAt, allStable, anyFenced, lostAt).

// current reads every node of the new topology and of the nodes'
// current one, and returns the newest record (newest). When no node has
// a record and opts.From is given, From's nodes are given From's first
// epoch ([Initial]) in the records returned, not on the nodes: the apply
// writes it there (initialise) only once it goes past its checks, a dry
// run's return and every refusal.
func (a *applier) current(ctx context.Context) (Record, map[string]Record, error) {
	recs := map[string]Record{}
	read := func(names []string) error {
		for _, name := range names {
			if _, ok := recs[name]; ok {
				continue
			}
			rec, err := a.d.Read(ctx, name)
			if err != nil {
				return err
			}
			recs[name] = rec
		}
		return nil
	}
	if err := read(a.to.Nodes()); err != nil {
		return Record{}, nil, err
	}
	newest, err := newestOf(recs)
	if err != nil {
		return newest, nil, err
	}
	if newest.Epoch == 0 && a.opts.From == nil {
		// Only the new topology's nodes were read: the current one may be
		// on other nodes (an inventory moving to new nodes), which only
		// From names. An instance started over these nodes would give them
		// a first epoch of their own, the stock staying where it is.
		return newest, nil, fmt.Errorf("%w: the nodes have no topology record yet (none of %s has one): if the inventory runs on other nodes now, pass --from with the configuration applied there (starting an instance with this configuration instead would give these nodes an epoch of their own and leave the stock where it is); on nodes new to shardis, start `shardis serve` once with the current configuration, or pass --from",
			ErrInvalid, strings.Join(a.to.Nodes(), ", "))
	}
	if a.opts.From != nil {
		if err := read(a.opts.From.Nodes()); err != nil {
			return newest, nil, err
		}
		if newest, err = newestOf(recs); err != nil {
			return newest, nil, err
		}
	}
	if newest.Epoch == 0 {
		if newest, err = a.firstEpoch(recs); err != nil {
			return newest, nil, err
		}
	}
	if err := read(newest.Current.Nodes()); err != nil {
		return newest, nil, err
	}
	if newest.Prev != nil && newest.Phase == PhaseMigrating {
		if err := read(newest.Prev.Nodes()); err != nil {
			return newest, nil, err
		}
	}
	newest, err = newestOf(recs)
	return newest, recs, err
}

// firstEpoch gives the nodes of opts.From, none of which has a record,
// From's first epoch in recs, and returns the newest record then. It is
// in memory only: initialise writes it once the apply goes past its
// checks and a dry run's return, so a dry run and a refusal write
// nothing. A node whose stamp names another token is left as read
// (Initial's write would be refused there): check refuses it, naming it
// (again, when From is the topology applied: lostElsewhere).
func (a *applier) firstEpoch(recs map[string]Record) (Record, error) {
	first := Initial(*a.opts.From)
	for _, name := range a.opts.From.Nodes() {
		if r := recs[name]; r.Token != "" && (!r.Lost || r.Fenced || r.Token != first.Token) {
			continue
		}
		first.Node = name
		recs[name] = first
		a.initial = append(a.initial, name)
	}
	return newestOf(recs)
}

// newestOf returns the record of the highest epoch among recs, lost ones
// left out, a fenced one by the copy under its fence (its Token the token
// held) when it is above every unfenced one (every node fenced, or a
// bump stopped after a node that was then fenced): the nodes are brought
// forward, or resume, to it. Records of that epoch must agree, token and
// apply attempt (a fenced one, when the newest is not, is a node to bring
// forward): two copies of one epoch mean a node went back to a copy of an
// earlier apply of it, and nothing on the nodes tells which is current,
// so the apply refuses (ErrInvalid) rather than guess.
func newestOf(recs map[string]Record) (Record, error) {
	names := make([]string, 0, len(recs))
	for name := range recs {
		names = append(names, name)
	}
	sort.Strings(names)
	newest, fenced := highest(recs, names, false), false
	if f := highest(recs, names, true); f.Epoch > newest.Epoch {
		// every node fenced, or a fenced one ahead of every other (an
		// apply's bump stopped after it, and it was accepted with a peer
		// unreadable): its copy is the newest, the others resume to it
		newest, fenced = f, true
	}
	if newest.Epoch == 0 {
		return newest, nil
	}
	for _, name := range names {
		r := recs[name]
		if r.Lost || r.Epoch != newest.Epoch || (r.Fenced && !fenced) {
			continue
		}
		tok := r.Token
		if r.Fenced {
			tok = r.Held
		}
		if tok != newest.Token || r.Attempt != newest.Attempt {
			return newest, fmt.Errorf("%w: the nodes hold two topologies of epoch %d (%s at %s, attempt %q; %s at %s, attempt %q): a node went back to a copy of an earlier apply of this epoch, and the nodes cannot tell which is current: on each node whose topology is the current one, set field epoch of %s to its token (without the %q prefix of a fenced node), then run apply again",
				ErrInvalid, newest.Epoch, newest.Node, newest.Token, newest.Attempt, name, tok, r.Attempt, "shardis:node", "behind:")
		}
	}
	return newest, nil
}

// highest is the record of the highest epoch among recs (names, sorted):
// of the unfenced ones, or, with fenced, of the fenced ones, as held under
// the fence (its Token the token held).
func highest(recs map[string]Record, names []string, fenced bool) Record {
	var newest Record
	for _, name := range names {
		r := recs[name]
		if r.Lost || r.Fenced != fenced || r.Epoch <= newest.Epoch {
			continue
		}
		newest = r
		if fenced {
			newest.Token, newest.Fenced, newest.Held = r.Held, false, ""
		}
	}
	return newest
}

// Current is the record an apply takes as current among recs (the nodes'
// records, one per node): the highest epoch, a fenced record by the copy
// under its fence when it is above every unfenced one; ErrInvalid when
// two copies of that epoch disagree (token or apply attempt), for an
// operator to decide. What `shardis topology show` advises from.
func Current(recs []Record) (Record, error) {
	m := make(map[string]Record, len(recs))
	for _, r := range recs {
		m[r.Node] = r
	}
	return newestOf(m)
}

// anyFenced reports whether one of nodes is fenced (Record.Fenced).
func anyFenced(recs map[string]Record, nodes []string) bool {
	for _, n := range nodes {
		if recs[n].Fenced {
			return true
		}
	}
	return false
}

// allStable reports whether every node at tok whose record is known is
// stable: a lost record (Record.Lost: its phase unknown) does not count
// either way (lostAt names those).
func allStable(recs map[string]Record, tok string) bool {
	for _, r := range recs {
		if r.Token == tok && !r.Lost && r.Phase != PhaseStable {
			return false
		}
	}
	return true
}

// stepThreeEnded reports whether a known record at tok, or under a fence
// at tok, is stable: the apply to tok ran its step 3 to its end (stable
// is written only after it).
func stepThreeEnded(recs map[string]Record, tok string) bool {
	for _, r := range recs {
		at := (!r.Fenced && r.Token == tok) || (r.Fenced && r.Held == tok)
		if at && !r.Lost && r.Phase == PhaseStable {
			return true
		}
	}
	return false
}

// lostAt returns the names, sorted, of the unfenced nodes whose stamp is
// at tok but whose record is lost (Record.Lost).
func lostAt(recs map[string]Record, tok string) []string {
	var out []string
	for name, r := range recs {
		if r.Lost && !r.Fenced && r.Token == tok {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// allAt reports whether every one of nodes is at token tok: a node of the
// current topology behind it went back with an older copy of its data
// (doc.go, "A node that went back").
func allAt(recs map[string]Record, nodes []string, tok string) bool {
	for _, n := range nodes {
		if recs[n].Token != tok {
			return false
		}
	}
	return true
}

// behind returns the names of nodes whose record is not at tok.
func behind(recs map[string]Record, nodes []string, tok string) []string {
	var out []string
	for _, name := range nodes {
		if recs[name].Token != tok {
			out = append(out, name)
		}
	}
	return out
}

// newAttempt draws an apply's attempt id (Change.Attempt): 16 hex digits.
func newAttempt() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// attemptAt returns the attempt id of the records at tok ("" when none
// has one: records of a release before). Records that name different
// ones are refused (ErrInvalid): a write of another attempt at a node's
// token is refused (Driver.Write), so they cannot come from applies of
// this release, and what each attempt left on the nodes is told apart by
// its id.
func attemptAt(recs map[string]Record, tok string) (string, error) {
	names := make([]string, 0, len(recs))
	for name := range recs {
		names = append(names, name)
	}
	sort.Strings(names)
	attempt, by := "", ""
	for _, name := range names {
		r := recs[name]
		if r.Token != tok || r.Attempt == "" || r.Attempt == attempt {
			continue
		}
		if attempt != "" {
			return "", fmt.Errorf("%w: the nodes at %s name two apply attempts (%s: %s, %s: %s; a node went back to a copy taken during an earlier apply at this token): set the latest apply's attempt (of the records written last: field at) as field attempt of every node's shardis:topology at this token by hand before running apply again",
				ErrInvalid, tok, by, attempt, name, r.Attempt)
		}
		attempt, by = r.Attempt, name
	}
	return attempt, nil
}

// attemptOf is the apply attempt at cur's token: attemptAt's, or cur's
// own when no unfenced node holds the token (every node fenced: newestOf).
func attemptOf(recs map[string]Record, cur Record) (string, error) {
	attempt, err := attemptAt(recs, cur.Token)
	if err == nil && attempt == "" {
		attempt = cur.Attempt
	}
	return attempt, err
}
