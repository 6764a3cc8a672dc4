package pgtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/shardis/shardis/internal/pgproc"
)

// templates holds, per superuser password, the template cluster this
// process found or made (one initdb per password and process at most).
var templates sync.Map // password → *templateOnce

type templateOnce struct {
	once sync.Once
	dir  string
	err  error
}

// template returns the folder of the template cluster for password and
// this process's user, making it when this machine has none yet. Several test processes may
// make one at once: each runs initdb into a folder of its own and
// renames it into place, and the first rename wins (a folder appears
// whole or not at all).
func template(password string) (string, error) {
	v, _ := templates.LoadOrStore(password, &templateOnce{})
	t := v.(*templateOnce)
	t.once.Do(func() { t.dir, t.err = findOrMakeTemplate(password) })
	return t.dir, t.err
}

func findOrMakeTemplate(password string) (string, error) {
	bin, err := pgproc.FindBin("")
	if err != nil {
		return "", err
	}
	// Per user too: root's template belongs to the user PostgreSQL runs
	// as, and another user could not read it.
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s", bin, os.Geteuid(), password)))
	dir := filepath.Join(os.TempDir(), "shardis-pgtest-"+hex.EncodeToString(h[:8]))
	if pgproc.HasCluster(dir) {
		return dir, nil
	}
	// The folder initdb fills must be searchable by the user it runs as
	// (MkdirTemp makes it 0700, and Init hands it over).
	tmp, err := os.MkdirTemp(os.TempDir(), "shardis-pgtest-new-")
	if err != nil {
		return "", fmt.Errorf("pgtest: template folder: %w", err)
	}
	if err := pgproc.Init(pgproc.Options{Dir: tmp, Password: password}); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		if pgproc.HasCluster(dir) {
			return dir, nil // another process made it first
		}
		if errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("pgtest: %s exists but holds no cluster: delete it", dir)
		}
		return "", fmt.Errorf("pgtest: template: %w", err)
	}
	return dir, nil
}
