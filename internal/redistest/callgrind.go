package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Callgrind counts the instructions redis-server runs, for measures that
// must not move with the machine's load (timings on shared cores move by
// ±10 % or more; two counts of the same work agree within a fraction of a
// percent). It counts instructions, not time: a cache miss costs one.
type Callgrind struct {
	t    testing.TB
	dir  string // the wrapper's, and the dumps'
	kept int    // dumps kept so far (SHARDIS_CALLGRIND_KEEP)
}

// UnderCallgrind makes every redis-server the test starts from now on
// (Start, or anything that finds redis-server on PATH) run under
// valgrind's callgrind: a wrapper goes first on PATH for the rest of the
// test (t.Setenv). A test that calls it is a measure, not a check: it is
// skipped unless SHARDIS_CALLGRIND is set, and when redis-server or
// valgrind (callgrind_control) is missing.
func UnderCallgrind(t testing.TB) *Callgrind {
	t.Helper()
	if os.Getenv("SHARDIS_CALLGRIND") == "" {
		t.Skip("a measure: set SHARDIS_CALLGRIND=1 (and install valgrind) to run it")
	}
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server")
	}
	if _, err := exec.LookPath("callgrind_control"); err != nil {
		t.Skip("no valgrind (callgrind_control)")
	}
	dir := t.TempDir()
	// names uncompressed: callgrind numbers a name once per process, in
	// the first dump that holds it, so a later dump kept alone
	// (SHARDIS_CALLGRIND_KEEP) would name its functions by number only
	wrapper := "#!/bin/sh\nexec valgrind --tool=callgrind --compress-strings=no --callgrind-out-file=" + dir + "/cg.%p " + server + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "redis-server"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(callgrindMark, "1")
	return &Callgrind{t: t, dir: dir}
}

// callgrindMark is the environment variable UnderCallgrind sets for the
// rest of its test (CallgrindRunning).
const callgrindMark = "SHARDIS_UNDER_CALLGRIND"

// CallgrindRunning reports whether the calling test called UnderCallgrind:
// the servers it starts run under callgrind, many times slower, so a
// deadline it gives a whole test should be minutes, not seconds.
func CallgrindRunning() bool { return os.Getenv(callgrindMark) != "" }

// Count returns the instructions the server c talks to ran during work:
// its counters are zeroed before work and dumped after it. Work that the
// server has not run before (its first script calls) is best run once
// before, outside the count. It fails the test when the server is not
// under callgrind or leaves no count.
func (g *Callgrind) Count(ctx context.Context, c *redis.Client, work func()) float64 {
	g.t.Helper()
	return g.CountAll(ctx, []*redis.Client{c}, work)[0]
}

// CountAll is Count for several servers at once: each one's count of the
// instructions it ran during work, in the order of clients (all are
// zeroed before work, then each is dumped).
func (g *Callgrind) CountAll(ctx context.Context, clients []*redis.Client, work func()) []float64 {
	g.t.Helper()
	pids := make([]string, len(clients))
	for i, c := range clients {
		pids[i] = serverPid(ctx, c)
		if out, err := exec.Command("callgrind_control", "-z", pids[i]).CombinedOutput(); err != nil {
			g.t.Fatalf("callgrind_control -z %s: %v: %s", pids[i], err, out)
		}
	}
	work()
	out := make([]float64, len(clients))
	for i, pid := range pids {
		out[i] = g.dump(pid)
	}
	return out
}

// serverPid is the process id the server c talks to reports ("" when
// INFO fails: callgrind_control then fails the test).
func serverPid(ctx context.Context, c *redis.Client) string {
	for _, l := range strings.Split(c.Info(ctx, "server").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			return v
		}
	}
	return ""
}

// dump has callgrind write process pid's counts since they were last
// zeroed and returns their instruction count (kept when
// SHARDIS_CALLGRIND_KEEP says where).
func (g *Callgrind) dump(pid string) float64 {
	g.t.Helper()
	before, _ := filepath.Glob(filepath.Join(g.dir, "cg."+pid+".*"))
	if out, err := exec.Command("callgrind_control", "-d", pid).CombinedOutput(); err != nil {
		g.t.Fatalf("callgrind_control -d %s: %v: %s", pid, err, out)
	}
	after, _ := filepath.Glob(filepath.Join(g.dir, "cg."+pid+".*"))
	if len(after) != len(before)+1 {
		g.t.Fatalf("callgrind dumps %v after %v: want one more", after, before)
	}
	i := slices.IndexFunc(after, func(f string) bool { return !slices.Contains(before, f) })
	if i < 0 {
		g.t.Fatalf("callgrind dumps %v after %v: no new one", after, before)
	}
	n, err := dumpSummary(after[i])
	if err != nil {
		g.t.Fatal(err)
	}
	if keep := os.Getenv("SHARDIS_CALLGRIND_KEEP"); keep != "" {
		g.keep(keep, after[i])
	}
	return n
}

// CountRounds counts, as Count does, the instructions the server c runs
// for each of n variants of some work, in rounds: first each variant's
// run(v) warm times, uncounted (its first script calls: their loading),
// then, round after round, each variant in turn for groups calls of
// run(v), counted. Each count runs between two full collections of the
// functions' Lua heap, the second counted, less a count of a collection
// alone made right after: so a count holds the collection of all the
// garbage its calls made, and none of what another variant's left, and
// not the marking of the heap's live objects, which a steady run spreads
// over many more calls. It returns each variant's sum over the rounds.
// What the work leaves on the server (keys, index entries) makes a later
// call cost more or less than an earlier one; in rounds it weighs on every
// variant alike. Counted one variant after another, the same script
// counted first and last differed by 1 to 8 % (2026-11-30), more than
// most differences the variants are there to show. With
// SHARDIS_CALLGRIND_KEEP the dumps come in pairs, a count and then its
// collection alone: pair j (from 1) is round (j-1)/n + 1's of variant
// (j-1) % n.
func (g *Callgrind) CountRounds(ctx context.Context, c *redis.Client, n, rounds, warm, groups int, run func(v int)) []float64 {
	g.t.Helper()
	for v := range n {
		for range warm {
			run(v)
		}
	}
	// the scripts run as Redis functions, whose Lua state is not EVAL's
	if err := c.FunctionLoadReplace(ctx, "#!lua name="+gcFunction+"\nredis.register_function('"+gcFunction+
		"', function() collectgarbage('collect') return 0 end)").Err(); err != nil {
		g.t.Fatalf("FUNCTION LOAD %s: %v", gcFunction, err)
	}
	collect := func() {
		if err := c.FCall(ctx, gcFunction, nil).Err(); err != nil {
			g.t.Fatalf("FCALL %s: %v", gcFunction, err)
		}
	}
	out := make([]float64, n)
	for range rounds {
		for v := range n {
			collect()
			out[v] += g.Count(ctx, c, func() {
				for range groups {
					run(v)
				}
				collect()
			})
			out[v] -= g.Count(ctx, c, collect)
		}
	}
	return out
}

// gcFunction is the function CountRounds loads to collect the Lua heap
// of the node's functions between counts.
const gcFunction = "shardis_measure_gc"

// CallgrindRounds and CallgrindWarm are the rounds and the uncounted
// warm-up calls the package's measures give CountRounds: 4 rounds of 10
// counted calls make the 40 each variant was counted over before rounds.
const (
	CallgrindRounds = 4
	CallgrindWarm   = 5
)

// dumpSummary is the instruction count of a callgrind dump (its summary
// line).
func dumpSummary(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "summary: "); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			n, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return 0, fmt.Errorf("callgrind dump %s: summary %q: %w", path, l, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("callgrind dump %s: no summary line", path)
}

// keep copies the dump at path into the folder dir (made if missing) as
// TESTNAME.N, N counting the test's dumps from 1, for callgrind_annotate.
func (g *Callgrind) keep(dir, path string) {
	g.kept++
	b, err := os.ReadFile(path)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		name := strings.ReplaceAll(g.t.Name(), "/", "_") + "." + strconv.Itoa(g.kept)
		err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	if err != nil {
		g.t.Fatalf("SHARDIS_CALLGRIND_KEEP: %v", err)
	}
}

// CallgrindGroup is how many orders (or entries) a callgrind measure puts
// in one script call: SHARDIS_CALLGRIND_GROUP, 20 when unset or not a
// positive integer. What a script call costs of its own is shared by the
// orders it carries, so a count per order depends on it: 20 is what group
// commit gathers under load, 1 what a lone order pays at low load.
func CallgrindGroup() int {
	if n, err := strconv.Atoi(os.Getenv("SHARDIS_CALLGRIND_GROUP")); err == nil && n > 0 {
		return n
	}
	return 20
}
