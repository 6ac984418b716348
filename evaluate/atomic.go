package evaluate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// atomicFile is a file written under a temp name in its directory and renamed over the target
// on commit (after fsync), so readers see the old file or the new one, never a torn one.
type atomicFile struct {
	path string
	f    *os.File
	w    *bufio.Writer
	done bool
}

func createAtomic(path string) (*atomicFile, error) {
	// A process killed between CreateTemp and the rename left its temp file behind; the derived
	// files have a single writer (the eval dir's), so any such file is stale.
	prefix := "." + filepath.Base(path) + ".tmp-"
	if ents, err := os.ReadDir(filepath.Dir(path)); err == nil {
		for _, e := range ents {
			if !e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
				os.Remove(filepath.Join(filepath.Dir(path), e.Name()))
			}
		}
	}
	f, err := os.CreateTemp(filepath.Dir(path), prefix+"*")
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	// CreateTemp makes the file 0600; results are read by others (a merge job, a colleague on
	// the cluster's shared disk), as os.Create's files are.
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return &atomicFile{path: path, f: f, w: bufio.NewWriterSize(f, 1<<16)}, nil
}

func (a *atomicFile) Write(p []byte) (int, error) {
	n, err := a.w.Write(p)
	if err != nil {
		return n, fmt.Errorf("writing %s: %w", a.path, err)
	}
	return n, nil
}

// writeLine writes line and a newline.
func (a *atomicFile) writeLine(line []byte) error {
	if _, err := a.Write(line); err != nil {
		return err
	}
	_, err := a.Write([]byte{'\n'})
	return err
}

// commit flushes, fsyncs and renames the temp file over the target, then fsyncs the directory.
func (a *atomicFile) commit() error {
	err := a.w.Flush()
	if err == nil {
		err = a.f.Sync()
	}
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(a.f.Name(), a.path)
	}
	a.done = true
	if err != nil {
		os.Remove(a.f.Name())
		return fmt.Errorf("writing %s: %w", a.path, err)
	}
	d, err := os.Open(filepath.Dir(a.path))
	if err != nil {
		return fmt.Errorf("fsync %s: %w", filepath.Dir(a.path), err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", filepath.Dir(a.path), err)
	}
	return nil
}

// abort removes the temp file unless commit ran; safe to defer.
func (a *atomicFile) abort() {
	if !a.done {
		a.f.Close()
		os.Remove(a.f.Name())
		a.done = true
	}
}

// writeJSONAtomic writes v as indented JSON to path atomically.
func writeJSONAtomic(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	f, err := createAtomic(path)
	if err != nil {
		return err
	}
	defer f.abort()
	if err := f.writeLine(data); err != nil {
		return err
	}
	return f.commit()
}
