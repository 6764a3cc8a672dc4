package bench

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Worker is the per-goroutine state handed to an operation: its index, a
// private random source and a private counter (for unique ids). It is
// never shared between goroutines.
type Worker struct {
	ID  int        // the worker's index, 0 ≤ ID < the load's goroutines
	Rng *rand.Rand // private random source, seeded from the load's seed and ID
	Seq int64      // private counter for unique ids; operations advance it
	Buf []byte     // scratch space for building ids without fmt
}

// Op is one operation of a load run. It runs on its worker's goroutine; an
// error counts as a failed operation (its latency is not recorded).
type Op func(w *Worker) error

// Sample is the outcome of one load run: one variant, one round.
type Sample struct {
	Ops      int64         // operations that succeeded
	Errors   int64         // operations that failed
	Elapsed  time.Duration // from the start barrier until every worker stopped
	P50      time.Duration // median latency of the successful operations
	P99      time.Duration // 99th-percentile latency of the successful operations
	FirstErr string        // the first failure's message
	// CPU time the processes used during the run (see Cluster.measure):
	// this process (the clients), the redis-servers, twemproxy, and the
	// service child of the RPC section (rpcserve.go).
	ClientCPU, ServerCPU, ProxyCPU, ServiceCPU time.Duration
	// Scripts the nodes ran (EVAL, EVALSHA, FCALL: one round trip each), the
	// time they spent running them, and the other commands they executed
	// (including those the scripts called), from INFO commandstats.
	Scripts    int64         // scripts the nodes ran
	ScriptExec time.Duration // time the nodes spent running them
	Commands   int64         // other commands the nodes executed
	// Mallocs counts this process's heap allocations during the run.
	Mallocs int64
}

// PerOp returns CPU time per successful operation.
func (s Sample) PerOp(d time.Duration) time.Duration {
	if s.Ops == 0 {
		return 0
	}
	return d / time.Duration(s.Ops)
}

// OpsPerSec is the run's throughput of successful operations.
func (s Sample) OpsPerSec() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Ops) / s.Elapsed.Seconds()
}

// Load runs closed-loop load: conc goroutines each run op back to back for
// dur. Latency is recorded per goroutine (no shared state on the hot path)
// and merged afterwards.
type Load struct {
	conc    int
	workers []*Worker
	lat     [][]int64 // per worker, nanoseconds; reused across runs
}

// NewLoad returns a load driver for conc goroutines. seed makes the key
// choices reproducible.
func NewLoad(conc int, seed uint64) *Load {
	l := &Load{conc: conc, workers: make([]*Worker, conc), lat: make([][]int64, conc)}
	for i := range l.workers {
		l.workers[i] = &Worker{ID: i, Rng: rand.New(rand.NewPCG(seed, uint64(i))), Buf: make([]byte, 0, 64)}
		l.lat[i] = make([]int64, 0, 1<<14)
	}
	return l
}

// Run runs op for dur on every goroutine and returns the sample.
func (l *Load) Run(dur time.Duration, op Op) Sample {
	var (
		stop  atomic.Bool
		errs  atomic.Int64
		first atomic.Pointer[error]
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i, w := range l.workers {
		l.lat[i] = l.lat[i][:0]
		wg.Add(1)
		go func(i int, w *Worker) {
			defer wg.Done()
			lat := l.lat[i]
			<-start
			for !stop.Load() {
				t0 := time.Now()
				err := op(w)
				d := time.Since(t0)
				if err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, &err)
					continue
				}
				lat = append(lat, int64(d))
			}
			l.lat[i] = lat
		}(i, w)
	}
	t0 := time.Now()
	timer := time.AfterFunc(dur, func() { stop.Store(true) })
	close(start)
	wg.Wait()
	timer.Stop()
	elapsed := time.Since(t0)

	s := Sample{Elapsed: elapsed, Errors: errs.Load()}
	if p := first.Load(); p != nil {
		s.FirstErr = (*p).Error()
	}
	all := mergeLatencies(l.lat)
	s.Ops = int64(len(all))
	s.P50, s.P99 = percentile(all, 0.50), percentile(all, 0.99)
	return s
}

func mergeLatencies(per [][]int64) []int64 {
	n := 0
	for _, p := range per {
		n += len(p)
	}
	all := make([]int64, 0, n)
	for _, p := range per {
		all = append(all, p...)
	}
	slices.Sort(all)
	return all
}

// percentile returns the q-quantile (nearest rank) of sorted latencies.
func percentile(sorted []int64, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return time.Duration(sorted[i])
}

// Series collects the samples of one variant over the rounds.
type Series struct {
	Name    string   // the variant's name (Var…)
	Samples []Sample // one per kept round, in round order
}

// Add appends a sample.
func (s *Series) Add(x Sample) { s.Samples = append(s.Samples, x) }

// Ops returns the median throughput over the rounds.
func (s *Series) Ops() float64 {
	return medianF(mapS(s.Samples, Sample.OpsPerSec))
}

// P50 returns the median over the rounds of each round's p50.
func (s *Series) P50() time.Duration {
	return medianD(mapS(s.Samples, func(x Sample) time.Duration { return x.P50 }))
}

// P99 returns the median over the rounds of each round's p99.
func (s *Series) P99() time.Duration {
	return medianD(mapS(s.Samples, func(x Sample) time.Duration { return x.P99 }))
}

// CPUPerOp returns the medians over the rounds of the client, server and
// proxy CPU time per operation.
func (s *Series) CPUPerOp() (client, server, proxy time.Duration) {
	return medianD(mapS(s.Samples, func(x Sample) time.Duration { return x.PerOp(x.ClientCPU) })),
		medianD(mapS(s.Samples, func(x Sample) time.Duration { return x.PerOp(x.ServerCPU) })),
		medianD(mapS(s.Samples, func(x Sample) time.Duration { return x.PerOp(x.ProxyCPU) }))
}

// ServicePerOp returns the median over the rounds of the service child's
// CPU per operation (0 outside the RPC section).
func (s *Series) ServicePerOp() time.Duration {
	return medianD(mapS(s.Samples, func(x Sample) time.Duration { return x.PerOp(x.ServiceCPU) }))
}

// ServerPerOp returns the medians over the rounds of the scripts, the
// script execution time and the other commands per operation.
func (s *Series) ServerPerOp() (scripts float64, exec time.Duration, commands float64) {
	per := func(n int64, ops int64) float64 { return float64(n) / float64(max(ops, 1)) }
	return medianF(mapS(s.Samples, func(x Sample) float64 { return per(x.Scripts, x.Ops) })),
		medianD(mapS(s.Samples, func(x Sample) time.Duration { return x.PerOp(x.ScriptExec) })),
		medianF(mapS(s.Samples, func(x Sample) float64 { return per(x.Commands, x.Ops) }))
}

// AllocsPerOp returns the median over the rounds of this process's heap
// allocations per operation (the load driver itself allocates nothing per
// operation once its latency buffers have grown).
func (s *Series) AllocsPerOp() float64 {
	return medianF(mapS(s.Samples, func(x Sample) float64 { return float64(x.Mallocs) / float64(max(x.Ops, 1)) }))
}

// Errors returns the failed operations over all rounds, and the first
// failure's message.
func (s *Series) Errors() (int64, string) {
	var n int64
	var first string
	for _, x := range s.Samples {
		n += x.Errors
		if first == "" {
			first = x.FirstErr
		}
	}
	return n, first
}

// PairedRatio returns the median over the rounds of num's throughput over
// den's in the same round: a paired comparison, so drift of the machine
// between rounds cancels out. num and den must have the same rounds.
func PairedRatio(num, den []*Series) float64 {
	return medianF(pairedRatios(num, den))
}

// pairedRatios are PairedRatio's per-round ratios, in round order.
func pairedRatios(num, den []*Series) []float64 {
	var ratios []float64
	for r := range num[0].Samples {
		var a, b float64
		for _, s := range num {
			a += s.Samples[r].OpsPerSec()
		}
		for _, s := range den {
			b += s.Samples[r].OpsPerSec()
		}
		if b > 0 {
			ratios = append(ratios, a/b)
		}
	}
	return ratios
}

func mapS[T any](xs []Sample, f func(Sample) T) []T {
	out := make([]T, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func medianF(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianD(xs []time.Duration) time.Duration {
	f := make([]float64, len(xs))
	for i, x := range xs {
		f[i] = float64(x)
	}
	return time.Duration(medianF(f))
}
