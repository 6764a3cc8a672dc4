package redistest

import "syscall"

// sysProcAttr puts redis-server in its own process group (so the whole
// group can be signalled) and asks the kernel to SIGKILL it if the thread
// that started it dies, so it does not outlive a crashed or timed-out test
// binary that never ran its cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
