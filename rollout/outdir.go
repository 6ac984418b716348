package rollout

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/chainedsql/chainedsql/internal/atomicfile"
)

// The refusals of OutDir.Resolve and OutDir.Write, wrapped with the name and the reason.
var (
	// ErrBadName is a name that cannot be a table's file: empty, a directory, in a directory
	// that does not exist.
	ErrBadName = errors.New("not a file name in the output directory")
	// ErrOutside is a name outside the output directory: an absolute path elsewhere, one that
	// climbs out with "..", or one through a symbolic link that leads out.
	ErrOutside = errors.New("outside the output directory")
	// ErrNotTable is an existing file that is not a rollout table this tool wrote (another
	// file, a symbolic link, a directory): never replaced.
	ErrNotTable = errors.New("not a rollout table")
)

// createdBy is the application the writer names in the Parquet footer's created_by.
const createdBy = "chainedsql student rollout"

// OutDir is the one directory a rollout process writes its tables in: `student rollout --serve`
// confines every request's file to it (--out-dir, else --out's directory), and Write writes
// through it. A name is resolved in it (a relative one from it, an absolute one only inside it),
// never through a symbolic link that leads out of it (every file operation goes through an
// os.Root of it), and an existing file is replaced only when it is a rollout table: a Parquet
// file whose footer holds this package's format and writer.
type OutDir struct {
	dir  string // absolute, as given
	real string // dir with its symbolic links resolved
	root *os.Root
}

// OpenOutDir opens the directory dir, which must exist; Close releases it.
func OpenOutDir(dir string) (*OutDir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("rollout: output directory %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("rollout: output directory %s: %w", dir, err)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("rollout: output directory %s: %w", dir, err)
	}
	return &OutDir{dir: abs, real: real, root: root}, nil
}

// Dir is the directory's absolute path.
func (d *OutDir) Dir() string { return d.dir }

// Close releases the directory.
func (d *OutDir) Close() error { return d.root.Close() }

// Resolve checks that name may be written: a file inside the directory (relative names are
// taken from it), in a directory that exists, and either absent or a rollout table. It returns
// the file's absolute path. Its errors wrap ErrBadName, ErrOutside or ErrNotTable, or are the
// file system's.
func (d *OutDir) Resolve(name string) (string, error) {
	rel, err := d.rel(name)
	if err != nil {
		return "", err
	}
	path := filepath.Join(d.dir, rel)
	if err := d.check(rel, path); err != nil {
		return "", err
	}
	return path, nil
}

// Write writes rows to name (as Resolve takes it, which it checks again just before) as one zstd
// Parquet file, atomically: a cancelled or failed write leaves no file and an old one unchanged.
func (d *OutDir) Write(name string, rows []Row) error {
	rel, err := d.rel(name)
	if err != nil {
		return err
	}
	path := filepath.Join(d.dir, rel)
	if err := d.check(rel, path); err != nil {
		return err
	}
	f, err := atomicfile.CreateIn(d.root, rel, 0o644)
	if err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	if err := write(f, rows); err != nil {
		f.Abort()
		return fmt.Errorf("rollout: write %s: %w", path, err)
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	return nil
}

// rel is name relative to the directory, cleaned, or the reason it is not a file in it.
func (d *OutDir) rel(name string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("rollout: an empty file name: %w", ErrBadName)
	case strings.ContainsRune(name, 0):
		return "", fmt.Errorf("rollout: %q: a NUL byte in the name: %w", name, ErrBadName)
	case strings.HasSuffix(name, "/") || strings.HasSuffix(name, string(filepath.Separator)):
		return "", fmt.Errorf("rollout: %s names a directory: %w", name, ErrBadName)
	}
	rel := filepath.Clean(name)
	if filepath.IsAbs(rel) {
		r, err := filepath.Rel(d.dir, rel)
		if err != nil || !local(r) {
			// The same directory by its real path is inside too.
			if r2, err2 := filepath.Rel(d.real, rel); err2 == nil && local(r2) {
				r, err = r2, nil
			} else {
				return "", fmt.Errorf("rollout: %s is %w %s", name, ErrOutside, d.dir)
			}
		}
		rel = r
	}
	if !local(rel) {
		return "", fmt.Errorf("rollout: %s is %w %s", name, ErrOutside, d.dir)
	}
	if rel == "." {
		return "", fmt.Errorf("rollout: %s names the directory itself: %w", name, ErrBadName)
	}
	return rel, nil
}

// local reports whether the cleaned relative path rel stays below its directory.
func local(rel string) bool {
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// check refuses rel (path in messages) when its directory leads out of d through a symbolic
// link or does not exist, and when it exists and is not a rollout table.
func (d *OutDir) check(rel, path string) error {
	parent, err := filepath.EvalSymlinks(filepath.Join(d.real, filepath.Dir(rel)))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rollout: %s: %w: there is no directory %s", path, ErrBadName, filepath.Dir(path))
	}
	if err != nil {
		return fmt.Errorf("rollout: %s: %w", path, err)
	}
	if r, err := filepath.Rel(d.real, parent); err != nil || !local(r) {
		return fmt.Errorf("rollout: %s: a symbolic link leads %w %s (to %s)", path, ErrOutside, d.dir, parent)
	}
	fi, err := d.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("rollout: %s: %w", path, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("rollout: %s is a symbolic link, %w: it is not replaced", path, ErrNotTable)
	case fi.IsDir():
		return fmt.Errorf("rollout: %s is a directory: %w", path, ErrBadName)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("rollout: %s is not a regular file, %w: it is not replaced", path, ErrNotTable)
	}
	f, err := d.root.Open(rel)
	if err != nil {
		return fmt.Errorf("rollout: %s: %w", path, err)
	}
	defer f.Close()
	if err := checkTable(f, fi.Size()); err != nil {
		return fmt.Errorf("rollout: %s exists and %w, %w: it is not replaced", path, err, ErrNotTable)
	}
	return nil
}

// checkTable says why the file of size bytes is not a rollout table: its Parquet magic at
// both ends, and in its footer this package's format and writer.
func checkTable(f io.ReaderAt, size int64) error {
	magic := []byte("PAR1")
	head, tail := make([]byte, 4), make([]byte, 4)
	if size < 12 {
		return errors.New("is not a Parquet file")
	}
	if _, err := f.ReadAt(head, 0); err != nil {
		return err
	}
	if _, err := f.ReadAt(tail, size-4); err != nil {
		return err
	}
	if !bytes.Equal(head, magic) || !bytes.Equal(tail, magic) {
		return errors.New("is not a Parquet file")
	}
	pf, err := parquet.OpenFile(f, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return fmt.Errorf("is not a readable Parquet file (%v)", err)
	}
	format, _ := pf.Lookup("chainedsql.format")
	if by := pf.Metadata().CreatedBy; format != Format || !strings.HasPrefix(by, createdBy+" ") {
		return fmt.Errorf("is a Parquet file of format %q by %q, not %s by %s", format, by, Format, createdBy)
	}
	return nil
}
