package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// ProfileResult is the CPU profile of this process (the client side)
// while it ran the 3-item reserve load, read back with `go tool pprof`.
type ProfileResult struct {
	Path     string        // the profile file
	Duration time.Duration // of the load
	Orders   float64       // orders/s during the profile
	Lines    []ProfileLine // selected functions, by cumulative share
	Top      []ProfileLine // the top functions by flat share
	Err      string        // why the profile could not be read back (go tool missing)
}

// ProfileLine is one function's share of the profile's samples.
type ProfileLine struct {
	Name    string  // the function's name as pprof prints it
	What    string  // what it stands for, for the report
	Flat    float64 // percent of the samples in the function itself
	Cum     float64 // percent of the samples in it or the functions it called
	Missing bool    // no sample fell in it
}

// Reread reads the profile file again (if it is still there), e.g. when
// the report is rendered from saved results by a newer version.
func (pr *ProfileResult) Reread() {
	if _, err := os.Stat(pr.Path); err != nil {
		return
	}
	lines, top, err := readProfile(pr.Path)
	if err != nil {
		return
	}
	pr.Lines, pr.Top, pr.Err = lines, top, ""
}

// profileFocus lists the functions the report shows, with what each one
// stands for on the reserve path.
var profileFocus = []struct{ name, what string }{
	{"github.com/shardis/shardis/inventory.(*Inventory).Reserve", "Reserve, everything it does on the client"},
	{"github.com/shardis/shardis/inventory.(*Inventory).stageAndTake", "the one-round path's round: the home node's stage and the other nodes' takes, sent at once"},
	{"github.com/shardis/shardis/inventory.(*Inventory).start", "beginning a round's calls to several nodes (a sender goroutine only for a call that finds a free slot)"},
	{"github.com/shardis/shardis/inventory.(*Inventory).carry", "the commit handed to the next write group on its home node (carry.go)"},
	{"github.com/shardis/shardis/inventory.(*Inventory).sendCommit", "a commit no group carried, sent by itself off the caller's path"},
	{"github.com/shardis/shardis/inventory.(*Inventory).runGrouped", "group commit: a call queued or sent, and its wait"},
	{"github.com/shardis/shardis/inventory.(*Inventory).sendGroup", "group commit: one script call for a group, and its replies handed out"},
	{"github.com/shardis/shardis/inventory.(*Inventory).call", "script calls (FCALL, through go-redis), network I/O included"},
	{"syscall.write", "socket writes"},
	{"syscall.read", "socket reads"},
	{"github.com/shardis/shardis/inventory.encodeOrderPartsHoles", "the parts' list (a compact string) the stage promises"},
	{"github.com/shardis/shardis/inventory.withOffsets", "the commit's list: the promised one with the taken offsets written in"},
	{"runtime.newproc", "starting goroutines"},
	{"runtime.copystack", "stack growth of goroutines"},
	{"runtime.schedule", "goroutine scheduling"},
	{"runtime.mallocgc", "allocation"},
	{"runtime.gcBgMarkWorker", "garbage collection"},
}

// ProfileReserve takes a CPU profile of this process during d of the
// 3-item reserve load and reads it back with `go tool pprof`.
func ProfileReserve(ctx context.Context, c *Cluster, p Plan, d time.Duration, dir string) (*ProfileResult, error) {
	wl, err := invWorkloads(ctx, c, p.SKUs)
	if err != nil {
		return nil, err
	}
	if err := retrySetup(c.Router.Nodes(), func() error {
		if err := c.Reset(ctx); err != nil {
			return err
		}
		return wl[VarInv3].setup(ctx)
	}); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	res := &ProfileResult{Path: filepath.Join(dir, "reserve3.cpu.pprof"), Duration: d}
	f, err := os.Create(res.Path)
	if err != nil {
		return nil, err
	}
	load := NewLoad(p.Conc, 6)
	load.Run(p.Warmup, wl[VarInv3].op)
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	s := load.Run(d, wl[VarInv3].op)
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		return nil, err
	}
	res.Orders = s.OpsPerSec()
	var rerr error
	res.Lines, res.Top, rerr = readProfile(res.Path)
	if rerr != nil {
		res.Err = rerr.Error()
	}
	return res, nil
}

// readProfile runs `go tool pprof -top -cum` on the profile and picks the
// focus functions (absent ones get Missing) and the top ten by flat share.
func readProfile(path string) (focus, top []ProfileLine, err error) {
	// Go CPU profiles carry their symbols: no binary needed.
	out, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=100000", "-nodefraction=0", "-edgefraction=0", path).Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go tool pprof: %w", err)
	}
	byName := map[string]ProfileLine{}
	var all []ProfileLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// flat flat% sum% cum cum% name
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") || !strings.HasSuffix(f[4], "%") {
			continue
		}
		flat, err1 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cum, err2 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		l := ProfileLine{Name: strings.Join(f[5:], " "), Flat: flat, Cum: cum}
		l.Name = strings.TrimSuffix(l.Name, " (inline)")
		byName[l.Name] = l
		all = append(all, l)
	}
	for _, pf := range profileFocus {
		l, ok := byName[pf.name]
		if !ok {
			l = ProfileLine{Name: pf.name, Missing: true}
		}
		l.What = pf.what
		focus = append(focus, l)
	}
	// Top ten by flat share.
	for len(top) < 10 && len(all) > 0 {
		best := 0
		for i, l := range all {
			if l.Flat > all[best].Flat {
				best = i
			}
		}
		top = append(top, all[best])
		all = append(all[:best], all[best+1:]...)
	}
	return focus, top, nil
}
