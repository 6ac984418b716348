// Package atomicfile writes files so that a reader, or a crash or Ctrl-C part way, sees the old
// file or the complete new one, never a torn one: the data goes to a temporary file in the
// target's directory, which is fsynced, renamed over the target, and the directory fsynced.
// CreateIn does the same inside an os.Root, for a target a client names: no step leaves the
// root's directory.
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
	path string // the target, as messages name it
	dir  place
	tmp  string // the temporary file's name in dir
	name string // the target's name in dir
	f    *os.File
	w    *bufio.Writer
	done bool
}

// place is where a File's temporary name and target are looked up: the process's file system
// (root nil) or an os.Root.
type place struct{ root *os.Root }

func (p place) openFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	if p.root != nil {
		return p.root.OpenFile(name, flag, perm)
	}
	return os.OpenFile(name, flag, perm)
}

func (p place) rename(old, new string) error {
	if p.root != nil {
		return rootRename(p.root, old, new)
	}
	return rename(old, new)
}

func (p place) remove(name string) error {
	if p.root != nil {
		return p.root.Remove(name)
	}
	return os.Remove(name)
}

// syncDir fsyncs the directory dir.
func (p place) syncDir(dir string) error {
	if p.root == nil {
		return syncDir(dir)
	}
	d, err := p.root.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync %s: %w", filepath.Join(p.root.Name(), dir), err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", filepath.Join(p.root.Name(), dir), err)
	}
	return nil
}

// The steps of Commit, replaced by the tests to see their order and to make them fail.
var (
	syncFile   = (*os.File).Sync
	rename     = os.Rename
	rootRename = (*os.Root).Rename
	syncDir    = SyncDir
)

// tempPrefix is the prefix of the temporary names for path's base name.
func tempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }

// Create starts a new version of path: a temporary file ".BASE.tmp-RANDOM" in path's directory,
// created with perm (less the umask, as os.OpenFile does).
func Create(path string, perm fs.FileMode) (*File, error) {
	return create(place{}, path, path, perm)
}

// CreateIn starts a new version of name inside root (a path relative to it): as Create, but the
// temporary file, the rename over the target and the directory's fsync all go through root, so
// that neither ".." nor a symbolic link takes them outside its directory (an error instead).
// The target is replaced as a name: a symbolic link there is replaced, not followed.
func CreateIn(root *os.Root, name string, perm fs.FileMode) (*File, error) {
	return create(place{root}, filepath.Join(root.Name(), name), name, perm)
}

// create makes the temporary file for name in dir; path names the target in messages.
func create(dir place, path, name string, perm fs.FileMode) (*File, error) {
	prefix := filepath.Join(filepath.Dir(name), tempPrefix(name))
	var b [8]byte
	for range 100 {
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
		tmp := prefix + hex.EncodeToString(b[:])
		f, err := dir.openFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
		return &File{path: path, dir: dir, tmp: tmp, name: name, f: f, w: bufio.NewWriterSize(f, 1<<16)}, nil
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
		err = f.dir.rename(f.tmp, f.name)
	}
	if err != nil {
		f.dir.remove(f.tmp)
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	return f.dir.syncDir(filepath.Dir(f.name))
}

// Abort closes and removes the temporary file unless Commit ran; the target is untouched. It is
// safe to defer, and to call more than once.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.f.Close()
	f.dir.remove(f.tmp)
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
