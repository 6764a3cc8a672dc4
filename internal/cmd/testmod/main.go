// Command testmod prints the path of the module file that make vet and make
// test build with: the repository's go.mod plus one replace directive, which
// points go-redis at a copy of the same release with one compile-time change.
//
// Why: go-redis v9.23.0's baseClient holds a weak.Pointer[Client]. Every
// package that compiles a type reaching it instantiates that pointer again,
// and an instantiation whose type argument is a struct with embedded method
// sets makes the compiler write wrappers for the methods the struct promotes
// (redis.Client's ~740: 1,478 functions). That was ~4 s of CPU in most of the
// ~90 compiles of shardis packages per make test, a quarter of its CPU
// together with node's atomic.Pointer[redis.Client], which did the same until
// node's clientRef took its place. The copy keeps the back-reference in a
// closure (clientWeakRef, below), so no type holds the instantiation. It
// behaves the same: only client-side caching reads the field, and shardis
// does not enable it.
//
// The copy lives in the user's cache folder (os.UserCacheDir()/shardis, or
// bin/testmod in the checkout when there is none), named by version and
// patch, built in a folder of its own and renamed into place, so concurrent
// runs are safe; later runs reuse it. Every edit must match exactly once: a
// go-redis upgrade that moves those lines makes testmod fail naming the file,
// and then the patch is updated, or dropped once upstream has no
// weak.Pointer[Client] in a type.
//
// Builds outside make (go build, go test by hand, programs importing shardis)
// use go-redis as released.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// module is the module path the copy replaces.
const module = "github.com/redis/go-redis/v9"

// edit replaces old, which must occur exactly once in file, with new.
type edit struct{ file, old, new string }

var edits = []edit{
	{"redis.go", "cscClientWeak weak.Pointer[Client]", "cscClientWeak clientWeakRef"},
	{"redis.go", "= weak.Make(&c)", "= weakRef(weak.Make(&c))"},
	{"redis.go", "= weak.Make(clone.cscLifecycleOwner)", "= weakRef(weak.Make(clone.cscLifecycleOwner))"},
}

// addedName and added are the file the copy gains: the closure type that
// takes weak.Pointer[Client]'s place in baseClient.
const addedName = "shardis_weakref.go"

const added = `// Added by shardis's internal/cmd/testmod for its own test builds.

package redis

import "weak"

// clientWeakRef yields the canonical *Client while it is reachable, and nil
// once it was collected or was never set.
type clientWeakRef func() *Client

// Value returns the client, or nil.
func (f clientWeakRef) Value() *Client {
	if f == nil {
		return nil
	}
	return f()
}

// weakRef wraps w, so that weak.Pointer[Client] is instantiated only here.
func weakRef(w weak.Pointer[Client]) clientWeakRef {
	return func() *Client { return w.Value() }
}
`

func main() {
	path, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testmod:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

// run makes (or finds) the patched copy and the module file naming it, and
// returns the module file's path. It runs in the repository's root.
func run() (string, error) {
	src, version, err := download()
	if err != nil {
		return "", err
	}
	home := filepath.Join("bin", "testmod") // without a user cache folder: beside make build's output
	if cache, err := os.UserCacheDir(); err == nil {
		home = filepath.Join(cache, "shardis")
	}
	if home, err = filepath.Abs(home); err != nil {
		return "", err
	}
	if err := os.MkdirAll(home, 0o755); err != nil {
		return "", err
	}
	dir := filepath.Join(home, "go-redis-"+version+"-"+patchKey(version))
	if _, err := os.Stat(filepath.Join(dir, addedName)); err != nil {
		if err := makeCopy(src, dir, home); err != nil {
			return "", err
		}
	}
	return writeModFile(home, dir)
}

// download returns the module cache folder and version of the go-redis
// release go.mod requires.
func download() (dir, version string, err error) {
	out, err := exec.Command("go", "mod", "download", "-json", module).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	var m struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	if m.Error != "" || m.Dir == "" {
		return "", "", fmt.Errorf("go mod download %s: %s", module, m.Error)
	}
	return m.Dir, m.Version, nil
}

// patchKey names a version and this patch, so a changed patch gets a new copy.
func patchKey(version string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", version, addedName, added)
	for _, e := range edits {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00", e.file, e.old, e.new)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// makeCopy copies the module from src without its tests, applies the patch
// and renames the result to dir. A copy another run renamed first wins.
func makeCopy(src, dir, home string) error {
	tmp, err := os.MkdirTemp(home, "tmp-go-redis-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(tmp, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case !d.Type().IsRegular() || strings.HasSuffix(p, "_test.go"):
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := patch(tmp); err != nil {
		return fmt.Errorf("%s (%s): %w; update or drop internal/cmd/testmod's patch", module, src, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, addedName)); serr == nil {
			return nil // another run placed its copy first
		}
		return err
	}
	return nil
}

// patch applies edits and adds the closure type in the copy at dir.
func patch(dir string) error {
	for _, e := range edits {
		p := filepath.Join(dir, e.file)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if n := bytes.Count(b, []byte(e.old)); n != 1 {
			return fmt.Errorf("%s holds %q %d times, want once", e.file, e.old, n)
		}
		b = bytes.Replace(b, []byte(e.old), []byte(e.new), 1)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, addedName), []byte(added), 0o644)
}

// writeModFile writes go.mod plus the replace directive, and go.sum beside it
// (go reads the sums of -modfile=X.mod from X.sum), under a name made from
// their contents; it returns the module file's path.
func writeModFile(home, copyDir string) (string, error) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(mod), "\n") {
		if f := strings.Fields(line); slices.Contains(f, module) && slices.Contains(f, "=>") {
			return "", fmt.Errorf("go.mod already replaces %s: %s", module, strings.TrimSpace(line))
		}
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		return "", err
	}
	mod = fmt.Appendf(append(mod, '\n'), "replace %s => %s\n", module, copyDir)
	h := sha256.New()
	h.Write(mod)
	h.Write([]byte{0})
	h.Write(sum)
	base := filepath.Join(home, "testmod-"+hex.EncodeToString(h.Sum(nil))[:12])
	if err := writeAtomic(base+".sum", sum); err != nil {
		return "", err
	}
	return base + ".mod", writeAtomic(base+".mod", mod)
}

// writeAtomic writes b to name through a temporary file and a rename.
func writeAtomic(name string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), filepath.Base(name)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}
