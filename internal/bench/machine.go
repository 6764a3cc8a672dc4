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
	Cores      int       // logical CPUs (runtime.NumCPU)
	GOMAXPROCS int       // this process's GOMAXPROCS
	CPU        string    // the CPU's model name from /proc/cpuinfo; "unknown" when not found
	Kernel     string    // "Linux " and the kernel release, or runtime.GOOS elsewhere
	Go         string    // the Go version of the build (runtime.Version)
	Redis      string    // redis-server's version; "unknown" when it could not be run
	Twemproxy  string    // nutcracker's version line; "" when it could not be run
	Date       time.Time // when the description was taken (UTC)
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
