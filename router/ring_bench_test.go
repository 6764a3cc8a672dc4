package router

import (
	"fmt"
	"testing"
)

// benchKeys is a fixed key set so benchmarks measure lookups, not key
// formatting.
var benchKeys = func() []string {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d:profile", i)
	}
	return keys
}()

func benchRing(b *testing.B, n int) *Ring {
	b.Helper()
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{Name: fmt.Sprintf("redis-%02d:6379", i), Weight: 1}
	}
	r, err := NewRing(ms)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func BenchmarkHome(b *testing.B) {
	for _, n := range []int{3, 16} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			r := benchRing(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r.Home(benchKeys[i&1023])
				i++
			}
		})
	}
}

func BenchmarkWalkFirst(b *testing.B) {
	for _, n := range []int{3, 16} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			r := benchRing(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				w := r.Walk(benchKeys[i&1023])
				w.Next()
				i++
			}
		})
	}
}

func BenchmarkCandidates(b *testing.B) {
	for _, n := range []int{3, 16} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			r := benchRing(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r.Candidates(benchKeys[i&1023])
				i++
			}
		})
	}
}

func BenchmarkNewRing(b *testing.B) {
	for _, n := range []int{3, 16} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			ms := make([]Member, n)
			for i := range ms {
				ms[i] = Member{Name: fmt.Sprintf("redis-%02d:6379", i), Weight: 1}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := NewRing(ms); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestRingAllocs(t *testing.T) {
	r := mustNewRing(t, ringMembers("redis-a", "redis-b", "redis-c"))
	keys := []string{"key:1", "{user1000}.following", "foo{}{bar}", "x"}
	sum := 0
	tests := []struct {
		name string
		f    func()
	}{
		{"Home", func() {
			for _, k := range keys {
				sum += r.Home(k)
			}
		}},
		{"Walk+Next", func() {
			for _, k := range keys {
				w := r.Walk(k)
				for x, ok := w.Next(); ok; x, ok = w.Next() {
					sum += x
				}
			}
		}},
	}
	for _, tt := range tests {
		if allocs := testing.AllocsPerRun(100, tt.f); allocs != 0 {
			t.Errorf("%s: %v allocs per run, want 0", tt.name, allocs)
		}
	}
	_ = sum
}
