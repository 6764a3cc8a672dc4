package redisproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Clock skew: a server started with SkewEnv's environment reads its wall
// clock (gettimeofday, time, clock_gettime of CLOCK_REALTIME: Redis's
// TIME and key expiry) moved by the number of ms written in a file, which
// may be rewritten while the server runs (read again at most every 10
// ms); the monotonic clock is left alone. The library is a small
// LD_PRELOAD built with gcc (libfaketime deadlocks in Redis 7's jemalloc
// start-up).

// ErrNoCompiler is returned by BuildSkewClock when gcc is not installed.
var ErrNoCompiler = errors.New("redisproc: gcc not installed: cannot build the clock skew library")

// BuildSkewClock builds the clock skew library in dir and returns its
// path, or an error wrapping ErrNoCompiler when gcc is missing.
func BuildSkewClock(dir string) (string, error) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		return "", ErrNoCompiler
	}
	src, lib := filepath.Join(dir, "skew.c"), filepath.Join(dir, "skew.so")
	if err := os.WriteFile(src, []byte(skewSrc), 0o644); err != nil {
		return "", fmt.Errorf("redisproc: writing the clock skew library's source: %w", err)
	}
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("redisproc: building the clock skew library: %v\n%s", err, out)
	}
	return lib, nil
}

// SkewEnv is the environment (Options.Env) that runs a server with the
// library lib (BuildSkewClock), its skew read from file (SetSkew; no
// file, or one that does not hold a number: no skew).
func SkewEnv(lib, file string) []string {
	return []string{"LD_PRELOAD=" + lib, "SKEW_FILE=" + file}
}

// SetSkew writes ms to a skew file and returns once the servers reading
// it see it (past the library's 10 ms cache): from then on they read
// their wall clock ms later (earlier when negative).
func SetSkew(file string, ms int64) error {
	if err := os.WriteFile(file, []byte(strconv.FormatInt(ms, 10)), 0o644); err != nil {
		return fmt.Errorf("redisproc: setting a clock skew: %w", err)
	}
	time.Sleep(20 * time.Millisecond)
	return nil
}
