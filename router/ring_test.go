package router

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func ringMembers(names ...string) []Member {
	ms := make([]Member, len(names))
	for i, n := range names {
		ms[i] = Member{Name: n, Weight: 1}
	}
	return ms
}

func mustNewRing(t testing.TB, ms []Member) *Ring {
	t.Helper()
	r, err := NewRing(ms)
	if err != nil {
		t.Fatalf("NewRing(%v): %v", ms, err)
	}
	return r
}

func ringKey(i int) string { return "key:" + strconv.Itoa(i) }

func TestNewRingErrors(t *testing.T) {
	tooMany := make([]Member, MaxMembers+1)
	for i := range tooMany {
		tooMany[i] = Member{Name: fmt.Sprintf("m%d", i)}
	}
	tests := []struct {
		name    string
		members []Member
		want    string // substring of the error
	}{
		{"nil", nil, "at least one member"},
		{"empty", []Member{}, "at least one member"},
		{"duplicate", []Member{{Name: "a"}, {Name: "dup"}, {Name: "dup"}}, `"dup"`},
		{"empty name", []Member{{Name: "a"}, {Name: ""}}, "member 1"},
		{"257 members", tooMany, "257"},
		{"huge weight", []Member{{Name: "big", Weight: maxWeight + 1}}, `"big"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRing(tt.members)
			if err == nil {
				t.Fatalf("NewRing = %v, nil; want error containing %q", r, tt.want)
			}
			if r != nil {
				t.Errorf("NewRing returned non-nil ring with error %v", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q, want it to contain %q", err, tt.want)
			}
		})
	}
	if _, err := NewRing(tooMany[:MaxMembers]); err != nil {
		t.Errorf("NewRing(%d members) = %v, want nil error", MaxMembers, err)
	}
}

func TestRingNameLen(t *testing.T) {
	ms := ringMembers("c", "a", "b")
	r := mustNewRing(t, ms)
	ms[0].Name = "changed" // NewRing must have copied the names
	if got, want := []any{r.Len(), r.Name(0), r.Name(1), r.Name(2)}, []any{3, "c", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("Len, Name(0..2) = %v, want %v", got, want)
	}
}

func TestRingOrderIndependent(t *testing.T) {
	base := []Member{{"redis-a", 1}, {"redis-b", 2}, {"redis-c", 1}, {"redis-d", 3}}
	orders := [][]Member{
		slices.Clone(base),
		{base[3], base[2], base[1], base[0]},
		{base[2], base[0], base[3], base[1]},
	}
	rings := make([]*Ring, len(orders))
	for i, ms := range orders {
		rings[i] = mustNewRing(t, ms)
	}
	names := func(r *Ring, idx []int) []string {
		out := make([]string, len(idx))
		for i, x := range idx {
			out[i] = r.Name(x)
		}
		return out
	}
	for i := range 10000 {
		k := ringKey(i)
		want := names(rings[0], rings[0].Candidates(k))
		for j, r := range rings[1:] {
			if got := r.Name(r.Home(k)); got != want[0] {
				t.Fatalf("order %d: Home(%q) = %q, want %q", j+1, k, got, want[0])
			}
			if got := names(r, r.Candidates(k)); !slices.Equal(got, want) {
				t.Fatalf("order %d: Candidates(%q) = %v, want %v", j+1, k, got, want)
			}
		}
	}
}

func TestRingBalance(t *testing.T) {
	tests := []struct {
		name    string
		members []Member
		keys    int
		want    map[string]int
	}{
		{"equal", ringMembers("redis-a", "redis-b", "redis-c"), 30000,
			map[string]int{"redis-a": 10000, "redis-b": 10000, "redis-c": 10000}},
		{"weighted 1,1,2", []Member{{"redis-a", 1}, {"redis-b", 1}, {"redis-c", 2}}, 40000,
			map[string]int{"redis-a": 10000, "redis-b": 10000, "redis-c": 20000}},
		{"weight<1 is 1", []Member{{"redis-a", 0}, {"redis-b", -3}, {"redis-c", 2}}, 40000,
			map[string]int{"redis-a": 10000, "redis-b": 10000, "redis-c": 20000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, got := mustNewRing(t, tt.members), map[string]int{}
			for i := range tt.keys {
				got[r.Name(r.Home(ringKey(i)))]++
			}
			for name, want := range tt.want {
				if dev := math.Abs(float64(got[name]-want)) / float64(want); dev > 0.10 {
					t.Errorf("member %s owns %d keys, want %d ±10%% (off by %.1f%%)", name, got[name], want, dev*100)
				}
			}
			t.Logf("counts: %v", got)
		})
	}
}

func TestRingJoinLeave(t *testing.T) {
	const n = 30000
	small := mustNewRing(t, ringMembers("redis-a", "redis-b", "redis-c"))
	big := mustNewRing(t, ringMembers("redis-a", "redis-d", "redis-b", "redis-c"))

	// Join 3 -> 4: keys move only to redis-d, about a quarter of them.
	moved := 0
	for i := range n {
		k := ringKey(i)
		before, after := small.Name(small.Home(k)), big.Name(big.Home(k))
		if before == after {
			continue
		}
		moved++
		if after != "redis-d" {
			t.Fatalf("join: key %q moved %s -> %s, want moves only to redis-d", k, before, after)
		}
	}
	if frac := float64(moved) / n; frac < 0.20 || frac > 0.30 {
		t.Errorf("join: %.1f%% of keys moved, want 25%% ±5%%", frac*100)
	}

	// Leave 4 -> 3: only keys owned by redis-d move.
	for i := range n {
		k := ringKey(i)
		before, after := big.Name(big.Home(k)), small.Name(small.Home(k))
		if before != "redis-d" && before != after {
			t.Fatalf("leave: key %q moved %s -> %s, but only redis-d left", k, before, after)
		}
	}
}

// refCandidates computes the preference order from the placement spec
// alone, with a linear scan, independently of Ring's layout.
func refCandidates(ms []Member, key string) []int {
	var pts []ringPoint
	for i, m := range ms {
		for p := range max(m.Weight, 1) * PointsPerWeight {
			pts = append(pts, ringPoint{xxhash.Sum64String(m.Name + "#" + strconv.Itoa(p)), uint8(i)})
		}
	}
	slices.SortFunc(pts, func(a, b ringPoint) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(ms[a.owner].Name, ms[b.owner].Name))
	})
	h := xxhash.Sum64String(HashKey(key))
	start := 0
	for start < len(pts) && pts[start].hash < h {
		start++
	}
	var out []int
	for i := range pts {
		if o := int(pts[(start+i)%len(pts)].owner); !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

func TestRingCandidates(t *testing.T) {
	many := make([]Member, 16)
	for i := range many {
		many[i] = Member{Name: fmt.Sprintf("node-%02d", i), Weight: 1 + i%3}
	}
	tests := []struct {
		name    string
		members []Member
	}{
		{"one", ringMembers("solo")},
		{"three", ringMembers("redis-a", "redis-b", "redis-c")},
		{"weighted", []Member{{"x", 3}, {"y", 1}, {"z", 2}, {"w", 1}}},
		{"sixteen", many},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNewRing(t, tt.members)
			for i := range 500 {
				k := ringKey(i)
				got := r.Candidates(k)
				if len(got) != r.Len() {
					t.Fatalf("len(Candidates(%q)) = %d, want %d", k, len(got), r.Len())
				}
				seen := map[int]bool{}
				for _, x := range got {
					if x < 0 || x >= r.Len() || seen[x] {
						t.Fatalf("Candidates(%q) = %v: bad or repeated index %d", k, got, x)
					}
					seen[x] = true
				}
				if home := r.Home(k); got[0] != home {
					t.Fatalf("Candidates(%q)[0] = %d, want Home = %d", k, got[0], home)
				}
				var walked []int
				w := r.Walk(k)
				for x, ok := w.Next(); ok; x, ok = w.Next() {
					walked = append(walked, x)
				}
				if !slices.Equal(walked, got) {
					t.Fatalf("Walk(%q) = %v, want Candidates order %v", k, walked, got)
				}
				if x, ok := w.Next(); ok || x != -1 {
					t.Fatalf("exhausted Walker.Next() = %d, %v; want -1, false", x, ok)
				}
				if i < 50 { // the reference is slow
					if want := refCandidates(tt.members, k); !slices.Equal(got, want) {
						t.Fatalf("Candidates(%q) = %v, want reference %v", k, got, want)
					}
				}
			}
		})
	}
	r := mustNewRing(t, ringMembers("solo"))
	if got := r.Candidates("anything"); !slices.Equal(got, []int{0}) {
		t.Errorf("one-member Candidates = %v, want [0]", got)
	}
}

func TestRingZeroValues(t *testing.T) {
	var r Ring
	w := r.Walk("k")
	x, ok := w.Next()
	if r.Len() != 0 || r.Home("k") != -1 || len(r.Candidates("k")) != 0 || ok || x != -1 {
		t.Errorf("zero Ring: Len=%d Home=%d Candidates=%v Walk.Next=%d,%v; want 0, -1, [], -1,false",
			r.Len(), r.Home("k"), r.Candidates("k"), x, ok)
	}
}

func TestRingConcurrent(t *testing.T) {
	r := mustNewRing(t, ringMembers("redis-a", "redis-b", "redis-c", "redis-d"))
	want := make([][]int, 1000)
	for i := range want {
		want[i] = r.Candidates(ringKey(i))
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range want {
				if got := r.Candidates(ringKey(i)); !slices.Equal(got, want[i]) || r.Home(ringKey(i)) != want[i][0] {
					t.Errorf("concurrent Candidates(%q) = %v, want %v", ringKey(i), got, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestRingLayout checks lookup boundaries, Walker wrap-around and the
// tie-break on a hand-built ring whose point hashes are known.
func TestRingLayout(t *testing.T) {
	r := &Ring{names: []string{"a", "b", "c"}, hashes: []uint64{10, 20, 30, 40}, owners: []uint8{2, 0, 0, 1}}
	r.index, r.shift = bucketIndex(r.hashes) // every point in bucket 0 of 4
	for _, tt := range []struct {
		h    uint64
		want int
	}{{0, 0}, {10, 0}, {11, 1}, {20, 1}, {39, 3}, {40, 3}, {41, 0}, {math.MaxUint64, 0}} {
		if got := r.search(tt.h); got != tt.want {
			t.Errorf("search(%d) = %d, want %d (first point >= h, wrapping)", tt.h, got, tt.want)
		}
	}
	for _, tt := range []struct {
		pos  int
		want []int
	}{{0, []int{2, 0, 1}}, {2, []int{0, 1, 2}}, {3, []int{1, 2, 0}}} {
		w, got := Walker{r: r, pos: tt.pos, left: r.Len()}, []int(nil)
		for x, ok := w.Next(); ok; x, ok = w.Next() {
			got = append(got, x)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("walk from point %d = %v, want %v", tt.pos, got, tt.want)
		}
	}
	// Equal hashes are ordered by name, whatever the owner indices.
	names := []string{"zed", "amy"}
	for _, pts := range [][]ringPoint{{{5, 0}, {5, 1}, {1, 0}}, {{5, 1}, {1, 0}, {5, 0}}} {
		sortRingPoints(pts, names)
		if want := []ringPoint{{1, 0}, {5, 1}, {5, 0}}; !slices.Equal(pts, want) {
			t.Errorf("sortRingPoints = %v, want %v (ties by name)", pts, want)
		}
	}
}

// TestRingSearchIndex holds search, which looks only in a hash's bucket,
// to a binary search of the whole ring: for every point's hash and its
// neighbours, the ends of the hash space and random hashes, on rings of 1
// to 16 members and of unequal weights.
func TestRingSearchIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, weights := range [][]int{{1}, {1, 1, 1}, {3, 1}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {100, 1}} {
		ms := make([]Member, len(weights))
		for i, w := range weights {
			ms[i] = Member{Name: fmt.Sprintf("n%d", i), Weight: w}
		}
		r, err := NewRing(ms)
		if err != nil {
			t.Fatal(err)
		}
		want := func(h uint64) int {
			i, _ := slices.BinarySearch(r.hashes, h)
			if i == len(r.hashes) {
				return 0
			}
			return i
		}
		hs := []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 1, 1 << 63}
		for _, p := range r.hashes {
			hs = append(hs, p, p-1, p+1)
		}
		for range 20000 {
			hs = append(hs, rng.Uint64())
		}
		for _, h := range hs {
			if got, w := r.search(h), want(h); got != w {
				t.Fatalf("weights %v: search(%#x) = %d, want %d", weights, h, got, w)
			}
		}
		if n := len(r.index) - 1; n < len(r.hashes) && n < 1<<20 || n&(n-1) != 0 {
			t.Errorf("weights %v: %d buckets for %d points, want a power of two at least as many", weights, n, len(r.hashes))
		}
	}
}
