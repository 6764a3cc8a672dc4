package pgproc

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// copyTree copies the regular files and folders under src into dst (which
// exists), keeping their permission bits: a cluster's folders are 0700 and
// PostgreSQL refuses a data directory open to others. Anything else (a
// symlink, a socket) is an error: a cluster made by initdb holds none.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if rel == "." {
				return os.Chmod(dst, info.Mode().Perm())
			}
			return os.Mkdir(target, info.Mode().Perm())
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		default:
			return fmt.Errorf("%s is neither a folder nor a regular file (%s)", path, info.Mode().Type())
		}
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in) // copy_file_range on Linux
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
