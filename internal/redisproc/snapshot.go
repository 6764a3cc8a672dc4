package redisproc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Older copies of a server's data, for the faults that bring a node back
// from one (a restored backup, writes lost before they reached disk): the
// chaos runner's rollback nemesis and the explorer's data-loss actor.

// aofDir is the AOF directory redis-server keeps under Dir (its default
// appenddirname).
const aofDir = "appendonlydir"

// CopyAOF copies the server's AOF directory (Options.AOF) into dst, a new
// directory: the manifest of the multi-part AOF first, then the files it
// names, so a copy taken while the server appends holds at worst a
// truncated last command (which redis-server drops when it loads it). The
// copy is whole only if no AOF rewrite runs meanwhile: a caller that needs
// it whole waits for one to finish first (a rewrite leaves a small AOF
// that no automatic rewrite follows soon). It fails, leaving dst partly
// written, when a file cannot be read or written.
func (s *Server) CopyAOF(dst string) error {
	return copyDir(filepath.Join(s.dir, aofDir), dst)
}

// RestartFrom kills the server (SIGKILL), puts the AOF directory snap (a
// copy CopyAOF made) in place of its own, moving it, not copying it, and
// starts the server again, which then holds the data of the copy. An error
// before the restart leaves the server not running.
func (s *Server) RestartFrom(snap string) error {
	if err := s.Kill(); err != nil {
		return err
	}
	aof := filepath.Join(s.dir, aofDir)
	if err := os.RemoveAll(aof); err != nil {
		return fmt.Errorf("redisproc: removing %s: %w", aof, err)
	}
	if err := os.Rename(snap, aof); err != nil {
		return fmt.Errorf("redisproc: putting %s in place: %w", snap, err)
	}
	return s.Restart()
}

// copyDir copies the regular files of src into a new directory dst, the
// manifest of a multi-part AOF first.
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for i, e := range ents {
		if strings.HasSuffix(e.Name(), ".manifest") && i != 0 {
			ents[0], ents[i] = ents[i], ents[0]
		}
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
