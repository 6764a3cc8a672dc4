package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalKills: after the first SIGINT has cancelled the context
// of untilSignal (the process shutting down), a second SIGINT kills the
// process. `shardis sync` caught every signal until it returned, so a
// close that hung could not be interrupted. The process under test is
// this test binary again, running signalChild.
func TestSecondSignalKills(t *testing.T) {
	if os.Getenv("SHARDIS_SIGNAL_CHILD") == "1" {
		signalChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecondSignalKills$")
	cmd.Env = append(os.Environ(), "SHARDIS_SIGNAL_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	next := func(want string) {
		t.Helper()
		for lines.Scan() {
			if strings.Contains(lines.Text(), want) {
				return
			}
		}
		_ = cmd.Process.Kill()
		t.Fatalf("the child never printed %q", want)
	}
	next("waiting")
	_ = cmd.Process.Signal(syscall.SIGINT)
	next("shutting down")
	_ = cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
			t.Fatalf("child ended with %v; want killed by the second SIGINT", err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("a second SIGINT while shutting down did not kill the process")
	}
}

// signalChild waits for the first signal, then "shuts down" for a minute.
func signalChild() {
	ctx, stop := untilSignal()
	defer stop()
	os.Stdout.WriteString("waiting\n")
	<-ctx.Done()
	os.Stdout.WriteString("shutting down\n")
	time.Sleep(time.Minute)
	os.Stdout.WriteString("closed\n")
}
