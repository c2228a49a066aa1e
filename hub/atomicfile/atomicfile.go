// Package atomicfile replaces small files (certificates, the identity table, static pod
// manifests) so that a crash or a power cut leaves either the old file or the new one.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data: a hidden temporary file in the same directory (kubelet and other
// directory readers ignore dot files) is written with perm, fsynced and renamed over path, then
// the directory is fsynced so the rename itself survives a power cut. The directory is created
// (0700) when missing.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
