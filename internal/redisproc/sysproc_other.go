//go:build !linux

package redisproc

import "syscall"

// sysProcAttr puts redis-server in its own process group so the whole
// group can be signalled. killWithParent is not supported here and ignored.
func sysProcAttr(killWithParent bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
