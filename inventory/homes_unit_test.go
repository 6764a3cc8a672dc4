package inventory

import (
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	"github.com/shardis/shardis/config"
)

func testHomes(t *testing.T, members ...string) *Homes {
	t.Helper()
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	for _, m := range members {
		cfg.Nodes[m] = config.Node{Addr: m + ":1", Weight: 1}
	}
	cfg.Servers = map[string]config.Server{cfg.Inventory.Server: {Routes: map[string][]string{"r": members}}}
	h, err := NewHomes(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestMintedIDNamesItsNode(t *testing.T) {
	h := testHomes(t, "n1", "n2", "n3")
	for _, name := range []string{"n1", "n2", "n3", "node-with.dots_and-dashes"} {
		id, err := mintID(name)
		if err != nil {
			t.Fatal(err)
		}
		if p := idProblem(id); p != "" {
			t.Fatalf("minted id %q %s", id, p)
		}
		got, ok := MintedHome(id)
		if !ok || got != name {
			t.Fatalf("MintedHome(%q) = %q, %v; want %q, true", id, got, ok, name)
		}
		if name != "node-with.dots_and-dashes" && h.Home(id) != name {
			t.Fatalf("Home(%q) = %s, want %s", id, h.Home(id), name)
		}
	}
	a, _ := mintID("n1")
	b, _ := mintID("n1")
	if a == b {
		t.Fatalf("two mints gave the same id %q", a)
	}
}

// An id minted on a node that is not a member (it left the topology, or
// the id came from another deployment) is placed by the ring, exactly like
// a made-up id: Home never names a non-member.
func TestMintedIDOfNonMemberFallsBackToRing(t *testing.T) {
	h := testHomes(t, "n1", "n2", "n3")
	for i := 0; i < 200; i++ {
		id, _ := mintID("n4")
		if got, want := h.Home(id), h.names[h.ring.Home("order:"+id)]; got != want {
			t.Fatalf("Home(%q) = %s, want the ring's %s", id, got, want)
		}
	}
}

// Ids that only look minted keep their ring home: the checksum must
// match, the suffix must be lowercase hex of the right length, and the
// node part must not be empty.
func TestLookAlikeIDsAreRingPlaced(t *testing.T) {
	h := testHomes(t, "n1", "n2", "n3")
	good, _ := mintID("n2")
	body, check := good[:len(good)-mintCheckHex], good[len(good)-mintCheckHex:]
	flip := func(s string, i int) string {
		c := byte('0')
		if s[i] == '0' {
			c = '1'
		}
		return s[:i] + string(c) + s[i+1:]
	}
	bad := []string{
		body + flip(check, 0),            // wrong checksum
		flip(body, len(body)-1) + check,  // randomness changed, checksum kept
		"@n2#" + strings.Repeat("0", 24), // right shape, wrong checksum
		strings.ToUpper(good[:1]) + good[1:len(good)-1] + "G",
		"@#" + good[len("@n2#"):],   // empty node
		"n2#" + good[len("@n2#"):],  // no '@'
		good[:len(good)-1],          // too short a suffix
		good + "0",                  // too long a suffix
		"@n2@" + good[len("@n2#"):], // no '#'
		strings.ToUpper(good),       // upper-case hex
	}
	for _, id := range bad {
		if name, ok := MintedHome(id); ok {
			t.Errorf("MintedHome(%q) = %q, true; want false", id, name)
		}
		if got, want := h.Home(id), h.names[h.ring.Home("order:"+id)]; got != want {
			t.Errorf("Home(%q) = %s, want the ring's %s", id, got, want)
		}
	}
	// Made-up ids are placed exactly as before minting existed.
	for _, id := range []string{"order-1", "x0-273", "@", "@n1#", ""} {
		if got, want := h.Home(id), h.names[h.ring.Home("order:"+id)]; got != want {
			t.Errorf("Home(%q) = %s, want the ring's %s", id, got, want)
		}
	}
}

// A topology change keeps a minted id on its node while the node stays a
// member, and the previous and new placements agree on it, so migration
// (which moves a record only when the two differ) leaves it alone.
func TestMintedIDStaysAcrossMembershipChanges(t *testing.T) {
	before := testHomes(t, "n1", "n2", "n3")
	after := testHomes(t, "n1", "n2", "n3", "n4")
	removed := testHomes(t, "n1", "n3")
	for i := 0; i < 100; i++ {
		id, _ := mintID("n2")
		if before.Home(id) != "n2" || after.Home(id) != "n2" {
			t.Fatalf("id %q moved off n2 when n4 joined: %s → %s", id, before.Home(id), after.Home(id))
		}
		if got := removed.Home(id); got != "n1" && got != "n3" {
			t.Fatalf("id %q homed on %s after n2 left", id, got)
		}
	}
}

// mintIDFrom builds in one buffer what the id's parts spell: "@node#",
// the randomness in hex, and the body's checksum (mintCheck, which
// MintedHome checks).
func TestMintIDFromSpellsItsParts(t *testing.T) {
	b := [mintRandHex / 2]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
	body := "@node-7#0123456789abcdef"
	if got, want := mintIDFrom("node-7", b), body+mintCheck(body); got != want {
		t.Fatalf("mintIDFrom = %q, want %q", got, want)
	}
}

// mintID returns a minted order id naming node, with fresh randomness.
func mintID(node string) (string, error) {
	var b [mintRandHex / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("inventory: minting an order id: %w", err)
	}
	return mintIDFrom(node, b), nil
}

// BenchmarkMintedHome measures reading the node from a minted id (every
// Reserve, Confirm and Cancel of one reads it once), over 1,024 ids, as
// random as minted ones, so that the branches on their digits are not
// learnt.
func BenchmarkMintedHome(b *testing.B) {
	ids := make([]string, 1024)
	for i := range ids {
		var err error
		if ids[i], err = mintID("n1"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := MintedHome(ids[i%len(ids)]); !ok {
			b.Fatal("not minted")
		}
		i++
	}
}
