package inventory

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLocalScriptInstructions counts the instructions the node runs per
// order of the local reserve script, for each variant of localCostCuts,
// in group calls of 20 one-item orders: what TestLocalScriptCost times,
// counted instead. A count hardly moves with the machine's load (two
// runs agree within a few hundred instructions per order, under 0.5 %)
// where timings on two shared cores move by ±10 % or more, so a change of
// a few percent shows. The node runs
// under valgrind's callgrind (this test puts a redis-server that starts
// it first on PATH); its counters are zeroed after 5 warm-up calls and
// dumped after 40 more (callgrind_control). It counts instructions, not
// time: a cache miss costs one. It is a measure, not a check: it runs
// only with SHARDIS_CALLGRIND set and valgrind installed, e.g.
//
//	SHARDIS_CALLGRIND=1 go test -count=1 -run TestLocalScriptInstructions -v ./inventory/
func TestLocalScriptInstructions(t *testing.T) {
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
	wrapper := "#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=" + dir + "/cg.%p " + server + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "redis-server"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	e := newGroupEnv(t, 32) // route a on n1 alone, under callgrind
	group := localCostGroups(t, e)
	pid := ""
	for _, l := range strings.Split(e.admin.Info(e.ctx, "server").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			pid = v
		}
	}
	const per, calls = 20, 40
	// perOrder: instructions per order of calls of per orders of s
	perOrder := func(s *luaScript, general bool) float64 {
		for range 5 {
			group(s, per, general)
		}
		if out, err := exec.Command("callgrind_control", "-z", pid).CombinedOutput(); err != nil {
			t.Fatalf("callgrind_control -z: %v: %s", err, out)
		}
		for range calls {
			group(s, per, general)
		}
		before, _ := filepath.Glob(filepath.Join(dir, "cg."+pid+".*"))
		if out, err := exec.Command("callgrind_control", "-d", pid).CombinedOutput(); err != nil {
			t.Fatalf("callgrind_control -d: %v: %s", err, out)
		}
		after, _ := filepath.Glob(filepath.Join(dir, "cg."+pid+".*"))
		if len(after) != len(before)+1 {
			t.Fatalf("callgrind dumps %v after %v: want one more", after, before)
		}
		dump := after[len(after)-1]
		for _, f := range after {
			if !strings.Contains(strings.Join(before, "\n"), f) {
				dump = f
			}
		}
		b, err := os.ReadFile(dump)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "summary: "); ok {
				n, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
				if err != nil {
					t.Fatalf("%s: %q", dump, l)
				}
				return n / (per * calls)
			}
		}
		t.Fatalf("%s: no summary line", dump)
		return 0
	}
	for _, v := range localCostCuts {
		fmt.Printf("%-55s %7.0f instructions/order\n", v.name, perOrder(cutScript(t, localScript, v.cuts...), v.general))
	}
}
