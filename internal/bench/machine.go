package bench

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Machine describes where the benchmark ran.
type Machine struct {
	Cores      int
	GOMAXPROCS int
	CPU        string
	Kernel     string
	Go         string
	Redis      string
	Twemproxy  string
	Date       time.Time
}

func goMaxProcs() int { return runtime.GOMAXPROCS(0) }

// DescribeMachine collects the machine description.
func DescribeMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GOMAXPROCS: goMaxProcs(), Go: runtime.Version(),
		Date: time.Now().UTC(), CPU: "unknown", Redis: "unknown", Twemproxy: NutcrackerVersion()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	} else {
		m.Kernel = runtime.GOOS
	}
	if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if v, ok := strings.CutPrefix(f, "v="); ok {
				m.Redis = v
			}
		}
	}
	return m
}
