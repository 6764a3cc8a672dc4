package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"
)

// Children: the sections that measure a shardis process as users run it
// (the RPC section's `shardis serve`, the sync section's `shardis sync`)
// start this very binary again with an environment variable set; the
// benchmark's main calls ServeChild and SyncChild first thing. A child
// prints one line on stdout once it is ready and stops when its stdin
// closes (the parent is done, or gone).

// runChild runs body with the value of the environment variable env when
// it is set, under a CPU profile written to the file profileEnv names when
// that is set too, then exits the process: 1, with the error on stderr
// (naming the child: what), when body failed. It returns at once when env
// is not set.
func runChild(what, env, profileEnv string, body func(v string) error) {
	v := os.Getenv(env)
	if v == "" {
		return
	}
	if err := profiled(os.Getenv(profileEnv), func() error { return body(v) }); err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", what, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// profiled runs f under a CPU profile written to file ("" = none),
// complete once it returns.
func profiled(file string, f func() error) error {
	if file == "" {
		return f()
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := pprof.StartCPUProfile(out); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	return f()
}

// childProc is a running child.
type childProc struct {
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{}
	once  sync.Once
}

// startChild starts this binary with env added to the environment and
// returns the first line it prints on stdout, waiting up to 30 s for it
// (what names the child in errors).
func startChild(what string, env ...string) (*childProc, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting the %s: %w", what, err)
	}
	p := &childProc{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l, ok := <-line:
		if !ok {
			p.Stop()
			return nil, "", fmt.Errorf("the %s exited before it was ready", what)
		}
		return p, l, nil
	case <-time.After(30 * time.Second):
		p.Stop()
		return nil, "", fmt.Errorf("the %s was not ready within 30s", what)
	}
}

// Pid returns the child's process id.
func (p *childProc) Pid() int { return p.cmd.Process.Pid }

// Stop closes the child's stdin (it shuts down cleanly) and waits for it,
// killing it after 10s.
func (p *childProc) Stop() {
	p.once.Do(func() {
		_ = p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// untilStdinCloses returns a channel closed once stdin reaches its end.
func untilStdinCloses() <-chan struct{} {
	closed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(closed) }()
	return closed
}
