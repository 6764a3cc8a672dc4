package redisproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Kill sends SIGKILL to the server's process group and waits until the
// process has exited and been reaped, like kill -9 (without AOF all data
// is lost). It is idempotent and a no-op returning nil if the server is not
// running. The error reports a failed signal delivery.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

// Stop shuts the server down gracefully: SIGTERM to its process group
// (followed by SIGCONT if it is paused, so it can act on it), then waits for
// it to exit, sending SIGKILL if it is still running after 5s. It returns
// once the process has exited. It is idempotent and a no-op returning nil
// if the server is not running. The error reports a failed signal delivery.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

// Restart starts redis-server again with the same options, port and
// directory (so AOF data is kept) and returns once it answers PING. If the
// server is still running it is killed (SIGKILL) first. If the port is
// busy, Restart retries for up to 5s. When redis-server refuses its AOF
// because a crash cut it inside a write, Restart repairs it once with
// RepairAOF, the operator's step, and starts it again (AOFRepairs lists
// each repair). On failure the server is left not running and the error
// includes the tail of its log; after Close, Restart always fails.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	if err := s.killLocked(); err != nil {
		return err
	}
	deadline := time.Now().Add(restartBusyTimeout)
	repaired := false
	for {
		p, err := s.spawn()
		if err == nil {
			s.proc = p
			return nil
		}
		if isTornAOF(err) && !repaired {
			report, rerr := RepairAOF(filepath.Join(s.dir, aofDir))
			if rerr != nil {
				return fmt.Errorf("redisproc: restarting redis-server on %s: %w; repairing its AOF: %w", s.Addr(), err, rerr)
			}
			repaired = true
			s.repairs = append(s.repairs, report)
			continue
		}
		if !isAddrInUse(err) || time.Now().After(deadline) {
			return fmt.Errorf("redisproc: restarting redis-server on %s: %w", s.Addr(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pause freezes the server's process group with SIGSTOP: connections stay
// open but nothing is answered until Resume. It is a no-op returning nil if
// the server is not running or already paused. Kill, Stop, Restart and
// Close handle paused servers.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() || s.paused {
		return nil
	}
	if err := s.proc.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	s.paused = true
	return nil
}

// Resume continues a server frozen by Pause with SIGCONT. It is a no-op
// returning nil if the server is not running or not paused.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() || !s.paused {
		return nil
	}
	if err := s.proc.signal(syscall.SIGCONT); err != nil {
		return err
	}
	s.paused = false
	return nil
}

// Close stops the server like Stop and then, if Start created Dir (Options.Dir
// was ""), removes it with everything in it; a caller-given Dir is kept.
// After Close, Restart fails and the other methods are no-ops. Close is
// idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	err := s.stopLocked()
	if s.proc != nil && !s.proc.exited() {
		return err // could not stop it: keep its directory, allow a retry
	}
	s.closed = true
	if s.ownsDir {
		if rerr := os.RemoveAll(s.dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("redisproc: removing %s: %w", s.dir, rerr))
		}
	}
	return err
}

// stopLocked implements Stop. s.mu must be held.
func (s *Server) stopLocked() error {
	if s.proc == nil || s.proc.exited() {
		s.paused = false
		return nil
	}
	err := s.proc.signal(syscall.SIGTERM)
	if s.paused {
		err = errors.Join(err, s.proc.signal(syscall.SIGCONT))
		s.paused = false
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.proc.done:
		return err
	case <-timer.C:
		return errors.Join(err, s.killLocked())
	}
}

// killLocked SIGKILLs the current process group and waits for exit.
// s.mu must be held.
func (s *Server) killLocked() error {
	if s.proc == nil || s.proc.exited() {
		s.paused = false
		return nil
	}
	if err := s.proc.signal(syscall.SIGKILL); err != nil {
		return err
	}
	// SIGKILL terminates stopped processes too; SIGCONT is belt and braces.
	_ = s.proc.signal(syscall.SIGCONT)
	<-s.proc.done
	s.paused = false
	return nil
}

// Rebind moves the running server to port with CONFIG SET port (Redis 7
// changes it at run time): from then on it listens there and no longer on
// its old port, so a client that dials the old address is refused as if
// the server had gone; connections already open stay open. Restart keeps
// the new port. It fails, leaving the port as it was, when the server is
// not running, is paused, or refuses the change (port taken).
func (s *Server) Rebind(ctx context.Context, port int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	if s.proc == nil || s.proc.exited() || s.paused {
		return fmt.Errorf("redisproc: rebinding %s: the server is not running or is paused", s.Addr())
	}
	c := s.AdminClient(2 * time.Second)
	defer c.Close()
	if err := c.ConfigSet(ctx, "port", strconv.Itoa(port)).Err(); err != nil {
		return fmt.Errorf("redisproc: rebinding %s to port %d: %w", s.Addr(), port, err)
	}
	s.port.Store(int64(port))
	return nil
}

// AOFRepairs returns the report of each repair Restart made of the
// server's AOF (RepairAOF), oldest first: none when no restart met an AOF
// cut inside a write.
func (s *Server) AOFRepairs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.repairs...)
}
