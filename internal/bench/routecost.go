package bench

import (
	"testing"
	"time"

	"github.com/shardis/shardis/router"
)

// LookupResult is one routing-cost benchmark.
type LookupResult struct {
	Name        string  // the benchmark's name, e.g. "Set.Pick(key)"
	NsPerOp     float64 // ns per lookup
	AllocsPerOp int64   // heap allocations per lookup
	BytesPerOp  int64   // heap bytes allocated per lookup
}

// lookupKeys are the keys routed by the lookup benchmarks, cycled.
var lookupKeys = kvKeys(1024)

// LookupBenchmarks are the routing-cost benchmarks: picking the node of a
// key through the router's public API, through a held *Set, and with the
// bare ring (what the hand-routed baseline does). They are plain Go
// benchmarks, also run by `go test -bench . ./internal/bench/`.
func LookupBenchmarks(r *router.Router, hand *router.Ring) []struct {
	Name string
	F    func(b *testing.B)
} {
	set, _ := r.Set(kvServer, kvRoute)
	return []struct {
		Name string
		F    func(b *testing.B)
	}{
		{"Router.Client(server, route, key)", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := r.Client(kvServer, kvRoute, lookupKeys[i&1023]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		}},
		{"Set.Pick(key)", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := set.Pick(lookupKeys[i&1023]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		}},
		{"Ring.Home(key) (hand-routed baseline)", func(b *testing.B) {
			b.ReportAllocs()
			i, sum := 0, 0
			for b.Loop() {
				sum += hand.Home(lookupKeys[i&1023])
				i++
			}
			_ = sum
		}},
	}
}

// RunLookups runs the routing-cost benchmarks with testing.Benchmark (1s
// each, the go test default).
func RunLookups(r *router.Router, hand *router.Ring) []LookupResult {
	var out []LookupResult
	for _, bm := range LookupBenchmarks(r, hand) {
		var br testing.BenchmarkResult
		// A lookup fails only while a node is not usable (an overloaded
		// machine can make a probe time out): wait and measure again.
		for attempt := 0; attempt < 3; attempt++ {
			_ = waitUsable(r.Nodes(), 15*time.Second)
			if br = testing.Benchmark(bm.F); br.N > 0 {
				break
			}
		}
		out = append(out, LookupResult{
			Name:        bm.Name,
			NsPerOp:     float64(br.T.Nanoseconds()) / float64(max(br.N, 1)),
			AllocsPerOp: br.AllocsPerOp(),
			BytesPerOp:  br.AllocedBytesPerOp(),
		})
	}
	return out
}
