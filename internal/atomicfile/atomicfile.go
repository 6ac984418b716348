// Package atomicfile writes files so that a reader, or a crash or Ctrl-C part way, sees the old
// file or the complete new one, never a torn one: the data goes to a temporary file in the
// target's directory, which is fsynced, renamed over the target, and the directory fsynced.
package atomicfile

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// File is a new version of a file being written under a temporary name in the target's
// directory; Commit puts it in place, Abort removes it.
type File struct {
	path string
	f    *os.File
	w    *bufio.Writer
	done bool
}

// The steps of Commit, replaced by the tests to see their order and to make them fail.
var (
	syncFile = (*os.File).Sync
	rename   = os.Rename
	syncDir  = SyncDir
)

// tempPrefix is the prefix of the temporary names for path's base name.
func tempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }

// Create starts a new version of path: a temporary file ".BASE.tmp-RANDOM" in path's directory,
// created with perm (less the umask, as os.OpenFile does).
func Create(path string, perm fs.FileMode) (*File, error) {
	prefix := filepath.Join(filepath.Dir(path), tempPrefix(path))
	var b [8]byte
	for range 100 {
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
		f, err := os.OpenFile(prefix+hex.EncodeToString(b[:]), os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
		return &File{path: path, f: f, w: bufio.NewWriterSize(f, 1<<16)}, nil
	}
	return nil, fmt.Errorf("writing %s: no free temporary name", path)
}

// TempName is the temporary file's path, for a writer that opens the file by name (SQLite).
func (f *File) TempName() string { return f.f.Name() }

// Write writes p to the temporary file (buffered; Commit flushes).
func (f *File) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil {
		return n, fmt.Errorf("writing %s: %w", f.path, err)
	}
	return n, nil
}

// Commit flushes, fsyncs and closes the temporary file, renames it over the target and fsyncs the
// directory. On an error before the rename the temporary file is removed and the target is
// left as it was.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("writing %s: already committed or aborted", f.path)
	}
	f.done = true
	err := f.w.Flush()
	if err == nil {
		err = syncFile(f.f)
	}
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = rename(f.f.Name(), f.path)
	}
	if err != nil {
		os.Remove(f.f.Name())
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	return syncDir(filepath.Dir(f.path))
}

// Abort closes and removes the temporary file unless Commit ran; the target is untouched. It is
// safe to defer, and to call more than once.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.f.Close()
	os.Remove(f.f.Name())
}

// WriteFile writes data to path atomically, the file created with perm (less the umask).
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Commit()
}

// WriteJSON writes v to path atomically as indented JSON and a newline, the file created with
// perm (less the umask).
func WriteJSON(path string, v any, perm fs.FileMode) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return WriteFile(path, append(data, '\n'), perm)
}

// RemoveStale removes the temporary files that a process killed between Create and Commit left
// for path. Only a caller that is the target's single writer may call it: another writer's
// temporary file in flight looks the same.
func RemoveStale(path string) error {
	dir, prefix := filepath.Dir(path), tempPrefix(path)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing stale temporary files of %s: %w", path, err)
	}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing stale temporary files of %s: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs the directory dir, so that a rename or create in it survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
