package topology

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestAgainRefusesALostRecordNotAtTheToken: at a later epoch, a node of
// the current topology whose record is lost under an older token's stamp,
// or under a fence, makes an apply of the current topology refuse before
// any write (ErrInvalid, nothing written, nothing retired), as at a first
// epoch. Before, the check ran at a first epoch only, and the apply
// brought the node forward (wrote its record) unless the driver refused.
func TestAgainRefusesALostRecordNotAtTheToken(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  Record
	}{
		{"behind", Record{Node: "n2", Token: Token(1, two.Fingerprint()), Lost: true}},
		{"fenced", Record{Node: "n2", Token: "fence:" + Token(2, three.Fingerprint()), Lost: true, Fenced: true, Held: Token(2, three.Fingerprint())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.at(2, three, &two, PhaseStable, "n1", "n2", "n3")
			f.recs["n2"] = tc.rec
			_, err := apply(t, f, Options{To: three})
			if !errors.Is(err, ErrInvalid) || len(f.writes) != 0 || f.retires != 0 {
				t.Fatalf("apply = %v; writes %v, retires %d; want ErrInvalid and nothing written", err, f.writes, f.retires)
			}
		})
	}
}

// TestCheckAdvisesApplyingTheCurrentTopologyFirst: a new apply while a
// node of the current topology is behind its token is refused with the
// way out: apply the current configuration first, which brings the node
// forward (and that apply then does). Before, the refusal only said the
// node was at another token.
func TestCheckAdvisesApplyingTheCurrentTopologyFirst(t *testing.T) {
	f := newFake()
	f.at(2, three, &two, PhaseStable, "n1", "n2", "n3")
	f.recs["n2"] = Record{Node: "n2", Epoch: 1, Token: Token(1, two.Fingerprint()), Current: two, Phase: PhaseStable}
	four := topo(map[string][]string{"r": {"n1", "n2", "n3", "n4"}})
	_, err := apply(t, f, Options{To: four})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "run `shardis topology apply` with the current configuration") {
		t.Fatalf("apply = %v; want ErrInvalid advising an apply of the current configuration", err)
	}
	if rep, err := apply(t, f, Options{To: three}); err != nil || !reflect.DeepEqual(rep.Forward, []string{"n2"}) {
		t.Fatalf("apply of the current topology = %+v, %v; want n2 brought forward", rep, err)
	}
	if _, err := apply(t, f, Options{To: four}); err != nil {
		t.Fatalf("apply after following the advice: %v", err)
	}
}

// TestReaddAfterALaterEpochSaysWhatIsAdded: a node that left at epoch 2
// keeps that epoch's record; adding it back after epoch 3 is refused
// (check: every node of the change at the current token or new), and the
// refusal says which nodes an apply adds. Before, it only said the node
// was at another token.
func TestReaddAfterALaterEpochSaysWhatIsAdded(t *testing.T) {
	f := newFake()
	f.at(1, three, nil, PhaseStable, "n1", "n2", "n3")
	if _, err := apply(t, f, Options{To: two}); err != nil {
		t.Fatal(err)
	}
	other := topo(map[string][]string{"r": {"n1", "n2"}, "s": {"n1"}})
	if _, err := apply(t, f, Options{To: other}); err != nil {
		t.Fatal(err)
	}
	back := topo(map[string][]string{"r": {"n1", "n2", "n3"}, "s": {"n1"}})
	_, err := apply(t, f, Options{To: back})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "an apply adds only a node with no topology record") {
		t.Fatalf("apply = %v; want ErrInvalid saying which nodes an apply adds", err)
	}
}
