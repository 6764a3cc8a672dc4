package router

import (
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestHashKey(t *testing.T) {
	tests := []struct {
		key  string
		want string
	}{
		{"{user1000}.following", "user1000"},
		{"{user1000}.followers", "user1000"},
		{"foo{}{bar}", "foo{}{bar}"}, // first tag is empty: whole key
		{"foo{{bar}}", "{bar"},
		{"foo{bar}{zap}", "bar"},
		{"no tags", "no tags"},
		{"{", "{"},
		{"}{", "}{"},
		{"a{b", "a{b"},
		{"", ""},
		{"{}", "{}"},
		{"{a}", "a"},
		{"x}{y}z", "y"},
		{"a{b}", "b"},
	}
	for _, tt := range tests {
		if got := HashKey(tt.key); got != tt.want {
			t.Errorf("HashKey(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestHashUsesHashKey(t *testing.T) {
	tests := []struct {
		key, hashed string
	}{
		{"{user1000}.following", "user1000"},
		{"plain", "plain"},
		{"foo{}{bar}", "foo{}{bar}"},
	}
	for _, tt := range tests {
		if got, want := Hash(tt.key), xxhash.Sum64String(tt.hashed); got != want {
			t.Errorf("Hash(%q) = %#x, want xxhash64(%q) = %#x", tt.key, got, tt.hashed, want)
		}
	}
	if Hash("{a}x") != Hash("{a}y") {
		t.Errorf("Hash differs for keys sharing tag {a}")
	}
}

func TestHashTagSameMember(t *testing.T) {
	r := mustNewRing(t, ringMembers("redis-a", "redis-b", "redis-c", "redis-d"))
	groups := [][]string{
		{"{user1000}.following", "{user1000}.followers", "x{user1000}", "{user1000}"},
		{"order:{42}:items", "order:{42}:total", "invoice:{42}"},
		{"foo{bar}{zap}", "bar", "{bar}"},
	}
	for _, g := range groups {
		home := r.Home(g[0])
		want := r.Candidates(g[0])
		for _, k := range g[1:] {
			if got := r.Home(k); got != home {
				t.Errorf("Home(%q) = %d, want %d (same as %q)", k, got, home, g[0])
			}
			if got := r.Candidates(k); !slices.Equal(got, want) {
				t.Errorf("Candidates(%q) = %v, want %v (same as %q)", k, got, want, g[0])
			}
		}
	}
	// The tags above must not all hash to one member by accident of the
	// test: distinct tags spread over several members.
	homes := map[int]bool{}
	for i := range 100 {
		homes[r.Home("{tag"+string(rune('a'+i%26))+string(rune('a'+i/26))+"}")] = true
	}
	if len(homes) < 2 {
		t.Errorf("100 distinct tags all landed on %d member(s), want several", len(homes))
	}
}

func TestHashKeyAllocs(t *testing.T) {
	keys := []string{"{user1000}.following", "plain", "foo{}{bar}", "foo{{bar}}"}
	var sink string
	allocs := testing.AllocsPerRun(100, func() {
		for _, k := range keys {
			sink = HashKey(k)
			_ = Hash(k)
		}
	})
	_ = sink
	if allocs != 0 {
		t.Errorf("HashKey+Hash allocated %v times per run, want 0", allocs)
	}
}
