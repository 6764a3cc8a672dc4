package redisproc

import "syscall"

// sysProcAttr puts redis-server in its own process group (so the whole
// group can be signalled) and, if killWithParent is set, asks the kernel to
// SIGKILL it when the thread that started it dies, so it does not outlive a
// crashed or killed parent that never stopped it.
func sysProcAttr(killWithParent bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if killWithParent {
		a.Pdeathsig = syscall.SIGKILL
	}
	return a
}
