package redisproc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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
// names. A copy taken while the server appends can end inside a write: in
// a command, or inside the MULTI … EXEC that holds one script's writes.
// The server refuses such a copy (aof-load-truncated no, Options.AOF) and
// Restart repairs it first (RepairAOF), as an operator restoring it would.
// The copy is whole only if no AOF rewrite runs meanwhile: a caller that
// needs it whole waits for one to finish first (a rewrite leaves a small
// AOF that no automatic rewrite follows soon). It fails, leaving dst
// partly written, when a file cannot be read or written.
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

// tornAOFLog is what redis-server logs when it refuses an AOF that ends
// inside a command or a transaction (aof-load-truncated no).
const tornAOFLog = "Unexpected end of file reading the append only file"

// RepairAOF runs redis-check-aof --fix on the multi-part AOF in dir (an
// appendonlydir: a server's, or a CopyAOF copy), which cuts its last file
// back to the end of its last whole command outside a transaction: a
// script's writes, which the AOF holds as one MULTI … EXEC, are then
// either all there or all gone. That is the repair an operator makes when
// redis-server refuses to load an AOF cut by a crash (aof-load-truncated
// no). It returns the tool's report; it fails when the tool is missing,
// dir holds no manifest, or the tool cannot fix the files.
//
// Why not aof-load-truncated yes, Redis's default: Redis 7.0 then cuts
// such a file at its last whole command even inside a MULTI, so the
// server starts without the torn script's writes but keeps the first of
// them in the file, behind an open MULTI; at the next restart they are
// queued into the next transaction in the file and applied with it: half
// a script, its other half lost (TestRestartRepairsATornAOF shows the
// file; valkey-io/valkey#4342 fixed the loader).
func RepairAOF(dir string) (string, error) {
	manifests, err := filepath.Glob(filepath.Join(dir, "*.manifest"))
	if err != nil || len(manifests) != 1 {
		return "", fmt.Errorf("redisproc: repairing the AOF in %s: want one manifest, found %d (%v)", dir, len(manifests), err)
	}
	bin, err := exec.LookPath("redis-check-aof")
	if err != nil {
		return "", fmt.Errorf("redisproc: repairing the AOF in %s: %w (Debian's redis-tools package has it)", dir, err)
	}
	cmd := exec.Command(bin, "--fix", manifests[0])
	cmd.Stdin = strings.NewReader("y\n") // it asks before it truncates
	out, err := cmd.CombinedOutput()
	report := strings.TrimSpace(string(out))
	if err != nil {
		return report, fmt.Errorf("redisproc: redis-check-aof --fix %s: %w\n%s", manifests[0], err, report)
	}
	return report, nil
}
