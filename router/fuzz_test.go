package router

import (
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// fuzzRing is a fixed ring the hash-tag fuzzer routes keys on.
var fuzzRing = func() *Ring {
	r, err := NewRing([]Member{{"n1", 1}, {"n2", 2}, {"n3", 1}, {"n4", 3}, {"n5", 1}})
	if err != nil {
		panic(err)
	}
	return r
}()

// FuzzHashKey checks the hash-tag rule on arbitrary keys: HashKey returns a
// substring of the key, chosen as Redis Cluster does; Hash hashes exactly
// that; and every key x{tag}y with a non-empty tag (and no earlier '{')
// routes like "{tag}" and the bare tag.
func FuzzHashKey(f *testing.F) {
	for _, s := range [][3]string{
		{"", "user1000", ".following"},
		{"order:", "1001", ""},
		{"foo", "", "{bar}"},
		{"foo{", "bar", "}"},
		{"", "{bar", "}"},
		{"no tags", "", ""},
		{"{", "}", "}"},
		{"é", "ü{x", "\x00}"},
		{"a}b", "tag", "{c}"},
		{"", "\xff\xfe", "\n"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, x, tag, y string) {
		for _, key := range []string{x, tag, y, x + tag + y, x + "{" + tag + "}" + y} {
			checkHashKey(t, key)
		}
		if tag == "" || strings.Contains(x, "{") || strings.Contains(tag, "}") {
			return
		}
		key := x + "{" + tag + "}" + y
		if got := HashKey(key); got != tag {
			t.Fatalf("HashKey(%q) = %q, want the tag %q", key, got, tag)
		}
		if Hash(key) != Hash("{"+tag+"}") {
			t.Fatalf("Hash(%q) != Hash(%q)", key, "{"+tag+"}")
		}
		if Hash(key) != Hash(tag) {
			t.Fatalf("Hash(%q) != Hash(%q)", key, tag)
		}
		if a, b := fuzzRing.Home(key), fuzzRing.Home("{"+tag+"}"); a != b {
			t.Fatalf("Home(%q) = %d, Home(%q) = %d: a shared tag must share a member", key, a, "{"+tag+"}", b)
		}
		if a, b := fuzzRing.Candidates(key), fuzzRing.Candidates("{"+tag+"}"+x); !slices.Equal(a, b) {
			t.Fatalf("Candidates(%q) = %v, Candidates(%q) = %v: a shared tag must share the failover order", key, a, "{"+tag+"}"+x, b)
		}
	})
}

// checkHashKey checks HashKey(key) against the rule as documented.
func checkHashKey(t *testing.T, key string) {
	t.Helper()
	got := HashKey(key)
	want := key
	if _, after, ok := strings.Cut(key, "{"); ok {
		if tag, _, ok := strings.Cut(after, "}"); ok && tag != "" {
			want = tag
		}
	}
	if got != want {
		t.Fatalf("HashKey(%q) = %q, want %q", key, got, want)
	}
	if !strings.Contains(key, got) {
		t.Fatalf("HashKey(%q) = %q is not a substring of the key", key, got)
	}
	if h, w := Hash(key), xxhash.Sum64String(got); h != w {
		t.Fatalf("Hash(%q) = %#x, want xxhash(%q) = %#x", key, h, got, w)
	}
	if n := testing.AllocsPerRun(3, func() { _ = HashKey(key); _ = Hash(key) }); n != 0 {
		t.Fatalf("HashKey/Hash(%q) allocate %v times", key, n)
	}
}

// fuzzMembers derives 1..16 members with distinct names from data: a
// count byte, then per member a weight byte (1..5), a length byte (1..8)
// and that many name bytes (any bytes; cycled when data runs out).
// Duplicate names are returned too, in dups, for NewRing to refuse.
func fuzzMembers(data []byte) (ms []Member, dups []Member) {
	if len(data) == 0 {
		data = []byte{0}
	}
	pos := 0
	next := func() byte {
		b := data[pos%len(data)]
		pos++
		return b
	}
	n := 1 + int(next())%16
	seen := map[string]bool{}
	for i := 0; len(ms) < n && i < 4*n; i++ {
		w := 1 + int(next())%5
		l := 1 + int(next())%8
		name := make([]byte, l)
		for j := range name {
			name[j] = next()
		}
		m := Member{Name: string(name), Weight: w}
		if seen[m.Name] {
			dups = append(dups, m)
			continue
		}
		seen[m.Name] = true
		ms = append(ms, m)
	}
	return ms, dups
}

// FuzzRing builds rings over fuzzed member sets and checks, for fuzzed
// keys: Candidates is a permutation of the member indices starting with
// Home; Walk yields exactly Candidates; placement by name does not depend
// on the order members were given in; and removing a member leaves the
// failover order of the others unchanged (consistent hashing).
func FuzzRing(f *testing.F) {
	f.Add([]byte{2, 0, 1, 'a', 0, 1, 'b', 0, 1, 'c'}, "key:1", uint8(0))
	f.Add([]byte{15, 4, 7, 'n', 'o', 'd', 'e', '-', '0', '1'}, "{user1000}.following", uint8(3))
	f.Add([]byte("\x05\x02\x02n1\x00\x02n2\x04\x02n3\x01\x02n4\x03\x02n5"), "order:{1001}", uint8(9))
	f.Add([]byte{0}, "", uint8(0))
	f.Add([]byte{1, 0, 0, 'x', 0, 0, 'x'}, "dup", uint8(1)) // duplicate names
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"), "\x00\xff", uint8(255))
	f.Fuzz(func(t *testing.T, data []byte, key string, rot uint8) {
		ms, dups := fuzzMembers(data)
		if len(dups) > 0 {
			withDup := append(slices.Clone(ms), dups[0])
			if r, err := NewRing(withDup); err == nil || r != nil || !strings.Contains(err.Error(), "duplicate") {
				t.Fatalf("NewRing with duplicate name %q = %v, %v; want a duplicate error", dups[0].Name, r, err)
			}
		}
		r, err := NewRing(ms)
		if err != nil {
			t.Fatalf("NewRing(%v): %v", ms, err)
		}
		if r.Len() != len(ms) {
			t.Fatalf("Len = %d, want %d", r.Len(), len(ms))
		}
		for i, m := range ms {
			if r.Name(i) != m.Name {
				t.Fatalf("Name(%d) = %q, want %q", i, r.Name(i), m.Name)
			}
		}

		// The same set in other orders: reversed, rotated, sorted by name.
		perms := [][]Member{slices.Clone(ms), slices.Clone(ms), slices.Clone(ms)}
		slices.Reverse(perms[0])
		k := int(rot) % len(ms)
		perms[1] = append(perms[1][k:], perms[1][:k]...)
		slices.SortFunc(perms[2], func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
		others := make([]*Ring, len(perms))
		for i, p := range perms {
			if others[i], err = NewRing(p); err != nil {
				t.Fatalf("NewRing(%v): %v", p, err)
			}
		}
		// Without the member rot points at.
		var smaller *Ring
		removed := ms[k].Name
		if len(ms) > 1 {
			if smaller, err = NewRing(slices.Delete(slices.Clone(ms), k, k+1)); err != nil {
				t.Fatal(err)
			}
		}

		keys := []string{key, key + "#1", "{" + key + "}", string(data)}
		for _, key := range keys {
			cands := r.Candidates(key)
			checkCandidates(t, r, key, cands)
			want := names(r, cands)
			for i, o := range others {
				if got := names(o, o.Candidates(key)); !slices.Equal(got, want) {
					t.Fatalf("order %d of the same members: Candidates(%q) = %q, want %q", i, key, got, want)
				}
			}
			if smaller != nil {
				wantSmaller := slices.DeleteFunc(slices.Clone(want), func(n string) bool { return n == removed })
				if got := names(smaller, smaller.Candidates(key)); !slices.Equal(got, wantSmaller) {
					t.Fatalf("without member %q: Candidates(%q) = %q, want %q", removed, key, got, wantSmaller)
				}
			}
		}
	})
}

func checkCandidates(t *testing.T, r *Ring, key string, cands []int) {
	t.Helper()
	if len(cands) != r.Len() {
		t.Fatalf("Candidates(%q) = %v: %d members, want %d", key, cands, len(cands), r.Len())
	}
	if home := r.Home(key); cands[0] != home {
		t.Fatalf("Candidates(%q) = %v does not start with Home = %d", key, cands, home)
	}
	sorted := slices.Sorted(slices.Values(cands))
	for i, v := range sorted {
		if v != i {
			t.Fatalf("Candidates(%q) = %v is not a permutation of 0..%d", key, cands, r.Len()-1)
		}
	}
	w := r.Walk(key)
	for i := 0; ; i++ {
		m, ok := w.Next()
		if !ok {
			if i != len(cands) || m != -1 {
				t.Fatalf("Walk(%q) stopped after %d members (last %d), want %d", key, i, m, len(cands))
			}
			break
		}
		if i >= len(cands) || m != cands[i] {
			t.Fatalf("Walk(%q) step %d = %d, Candidates = %v", key, i, m, cands)
		}
	}
	if m, ok := w.Next(); ok || m != -1 {
		t.Fatalf("exhausted Walk(%q).Next() = %d, %v; want -1, false", key, m, ok)
	}
	if again := r.Candidates(key); !slices.Equal(again, cands) {
		t.Fatalf("Candidates(%q) is not deterministic: %v then %v", key, cands, again)
	}
}

func names(r *Ring, idx []int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = r.Name(j)
	}
	return out
}
