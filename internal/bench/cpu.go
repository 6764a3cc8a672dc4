package bench

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The machine is shared: other processes (builds, test runs) may take CPU
// while the benchmark runs, which would hit whichever variant happens to
// run then. A CPUMeter measures how much of the machine's CPU went to
// processes other than the benchmark's own (this process, its
// redis-servers and twemproxy) over a span, from /proc/stat and
// /proc/<pid>/stat. Rounds that other processes disturbed are re-run.

// clockTicks is USER_HZ, the unit of /proc CPU times (100 on Linux).
const clockTicks = 100

// CPUMeter samples CPU use. pids returns the benchmark's own processes
// other than this one (they may change: a restarted node has a new pid).
type CPUMeter struct {
	pids  func() []int
	worst float64 // the highest Note since the last Reset
}

// Note records the foreign share of one measured run.
func (m *CPUMeter) Note(f float64) { m.worst = max(m.worst, f) }

// resetWorst forgets the noted shares and returns the highest one.
func (m *CPUMeter) resetWorst() float64 {
	w := m.worst
	m.worst = 0
	return w
}

// CPUSnap is one sample.
type CPUSnap struct {
	at         time.Time
	busy, ours uint64 // ticks: the whole machine (all CPUs) and our processes
	ok         bool
}

// NewCPUMeter returns a meter over this process and pids().
func NewCPUMeter(pids func() []int) *CPUMeter { return &CPUMeter{pids: pids} }

// Snap takes a sample. On systems without /proc it returns a sample that
// makes Foreign report 0.
func (m *CPUMeter) Snap() CPUSnap {
	s := CPUSnap{at: time.Now()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return s
	}
	// user nice system idle iowait irq softirq steal: all but idle and
	// iowait is busy; steal is CPU the hypervisor gave to someone else.
	for i, v := range f[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseUint(v, 10, 64)
		s.busy += n
	}
	pids := []int{os.Getpid()}
	if m.pids != nil {
		pids = append(pids, m.pids()...)
	}
	for _, pid := range pids {
		s.ours += procTicks(pid)
	}
	s.ok = true
	return s
}

// procTicks returns utime+stime of a process, 0 if it is gone.
func procTicks(pid int) uint64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: fields count after ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st
}

// Foreign returns the share of the machine's CPU capacity (0..1) that
// processes other than the benchmark's used between a and b.
func Foreign(a, b CPUSnap) float64 {
	if !a.ok || !b.ok {
		return 0
	}
	wall := b.at.Sub(a.at).Seconds() * clockTicks * float64(runtime.NumCPU())
	if wall <= 0 {
		return 0
	}
	busy := float64(b.busy) - float64(a.busy)
	ours := float64(b.ours) - float64(a.ours)
	return max(0, (busy-ours)/wall)
}

// RoundStats tells how the rounds of a section went.
type RoundStats struct {
	Kept       int           // rounds kept (Plan.Rounds once the section finished)
	Discarded  int           // rounds discarded and re-run because other processes used too much CPU
	Foreign    []float64     // other processes' CPU share in each kept round
	MaxForeign float64       // the threshold a round was discarded above
	Waited     time.Duration // time spent waiting for a quiet machine
}

// MedianForeign returns the median share of the CPU other processes used
// in the kept rounds.
func (s RoundStats) MedianForeign() float64 { return medianF(s.Foreign) }

// runRounds runs p.Rounds rounds of body. A round in which other
// processes used more than p.MaxForeign of the machine's CPU, over the
// round or during any one run noted with CPUMeter.Note, is discarded
// (its samples are not committed) and run again, up to p.MaxDiscards
// times in the section; past that, disturbed rounds are kept and show in
// the report's foreign-CPU figure.
func runRounds(p Plan, meter *CPUMeter, progress func(string), what string,
	body func(round int) (commit func(), summary string, err error)) (RoundStats, error) {
	st := RoundStats{MaxForeign: p.MaxForeign}
	for st.Kept < p.Rounds {
		st.Waited += waitQuiet(meter, p.MaxForeign, p.QuietWait, progress)
		a := meter.Snap()
		meter.resetWorst()
		commit, summary, err := body(st.Kept)
		if err != nil {
			return st, err
		}
		// The round's share, or one run's if higher: a burst of other
		// work during one variant's run disturbs that variant only.
		f := max(Foreign(a, meter.Snap()), meter.resetWorst())
		if f > p.MaxForeign && st.Discarded < p.MaxDiscards {
			st.Discarded++
			progress(fmt.Sprintf("%s round %d/%d discarded: other processes used %.0f%% of the CPU (%s)",
				what, st.Kept+1, p.Rounds, 100*f, summary))
			continue
		}
		commit()
		st.Kept++
		st.Foreign = append(st.Foreign, f)
		progress(fmt.Sprintf("%s round %d/%d (other processes %.0f%% CPU): %s", what, st.Kept, p.Rounds, 100*f, summary))
	}
	return st, nil
}

// waitQuiet waits, up to limit, until other processes use at most max of
// the CPU over half a second, and returns how long it waited.
func waitQuiet(meter *CPUMeter, max float64, limit time.Duration, progress func(string)) time.Duration {
	start := time.Now()
	said := false
	for time.Since(start) < limit {
		a := meter.Snap()
		time.Sleep(500 * time.Millisecond)
		f := Foreign(a, meter.Snap())
		if f <= max {
			break
		}
		if !said {
			progress(fmt.Sprintf("waiting for a quieter machine: other processes use %.0f%% of the CPU", 100*f))
			said = true
		}
	}
	return time.Since(start)
}
