// Package regular opens and reads files that must be regular files (a model's weights and its
// JSON beside them), checking the file it opened rather than the path beforehand: a path checked
// with os.Stat and then opened may have been swapped in between for a FIFO (whose open waits
// for a writer for good) or a link to a device such as /dev/zero (whose read never ends). The
// open does not wait on a FIFO, and what was opened is refused unless it is a regular file.
package regular

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// MaxJSON is the most bytes ReadJSON reads: a model directory's JSON files are kilobytes to a
// few tens of megabytes (a tokenizer.json), and a larger one (a huge sparse file) would
// otherwise be read into memory whole.
const MaxJSON = 256 << 20

// Open opens path for reading, without waiting on a FIFO, and returns it only when what it
// opened (links followed) is a regular file, with its size. It is the plain Opener's Open.
func Open(path string) (*os.File, int64, error) { return (*Opener)(nil).Open(path) }

// ErrOutsideRoot is wrapped by a confined Opener's refusal of a file that leads out of its
// root.
var ErrOutsideRoot = errors.New("outside the weights root")

// Opener opens the files of one load (a model directory's weights and JSON) as Open does:
// plainly, or, made by Confine, only beneath a root. A loader is handed the Opener its caller
// chose and opens every file through it; a nil or zero Opener opens plainly. An Opener is safe
// for concurrent use, and one confines only what is opened through it.
type Opener struct {
	root string      // absolute, clean, links resolved; "" opens plainly
	id   fs.FileInfo // the directory root named at Confine (nil if it could not be read)
}

// Confine returns an Opener that opens a file only beneath root (os.Root: no link or ".." on
// the way, however re-pointed after any check of the paths, takes the open out of root, so
// nothing outside it is opened at all) and refuses (ErrOutsideRoot) one that leads out of it;
// a link to an absolute path inside root, which os.Root refuses, is followed and what it leads
// to opened beneath root (a ".." after a link taken from where the link leads, as the kernel
// does). The directory root names is taken now: if root is moved and a link put in its place
// before an Open, that Open is refused. Where /proc/self/fd can be read, the real path of the
// file opened is checked against root too. root is absolute, clean, with its links resolved; a
// root of / confines nothing (the plain Opener).
func Confine(root string) *Opener {
	if root == "/" {
		return &Opener{}
	}
	o := &Opener{root: root}
	if fi, err := os.Stat(root); err == nil {
		o.id = fi
	}
	return o
}

// Root is the directory o opens beneath ("" for a plain Opener).
func (o *Opener) Root() string {
	if o == nil {
		return ""
	}
	return o.root
}

// Open opens path for reading, without waiting on a FIFO, and returns it only when what it
// opened (links followed) is a regular file, with its size; a confined Opener opens it beneath
// its root.
func (o *Opener) Open(path string) (*os.File, int64, error) {
	var f *os.File
	var err error
	confined := o.Root() != ""
	if confined {
		f, err = o.openBeneath(path)
	} else {
		f, err = os.OpenFile(path, os.O_RDONLY|nonBlock, 0)
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	if confined {
		if err := o.opened(path, f); err != nil {
			f.Close()
			return nil, 0, err
		}
	}
	return f, st.Size(), nil
}

// openBeneath opens path beneath o's root (os.Root: no link or ".." takes the open out of it,
// however they change meanwhile), which must be the directory it was at Confine (a root
// renamed away and a link out put in its place would take the open with it).
func (o *Opener) openBeneath(path string) (*os.File, error) {
	r, parts, err := o.beneath(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.OpenFile(joined(parts), os.O_RDONLY|nonBlock, 0)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return f, named(err, path)
	}
	// os.Root refuses every link to an absolute path, even one inside the root (a trainer's
	// link to a file of another step): follow the links here, inside the root only, and open
	// what they lead to, again beneath the root. A link re-pointed in between is refused by
	// that open.
	rel, err := resolveIn(r, o.root, parts)
	if err != nil {
		return nil, outside(path, o.root, err)
	}
	if f, err = r.OpenFile(rel, os.O_RDONLY|nonBlock, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, outside(path, o.root, err)
	}
	return f, named(err, path)
}

// Resolve returns path, absolute, with its symbolic links followed. A plain Opener follows them
// as filepath.EvalSymlinks does. A confined Opener follows them beneath its root only and looks
// at nothing outside it: a path outside the root, or a link on the way that leads out of it
// (whether what it names exists or not), is ErrOutsideRoot, which names path and the link's
// own text but nothing found outside the root, so that the refusal tells a client of `student
// serve` nothing about files there. A missing component below the root is fs.ErrNotExist.
func (o *Opener) Resolve(path string) (string, error) {
	if o.Root() == "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return "", err
		}
		return filepath.EvalSymlinks(abs)
	}
	r, rel, err := o.resolved(path)
	if err != nil {
		return "", err
	}
	defer r.Close()
	if _, err := r.Lstat(rel); err != nil {
		return "", named(err, path)
	}
	return filepath.Join(o.root, rel), nil
}

// Stat is os.Stat through o: a confined Opener follows path's links beneath its root only
// (Resolve) and stats what they lead to there, so that a load's look at a file, as its open,
// tells nothing of one outside the root: a link out is ErrOutsideRoot whether what it names
// exists or not.
func (o *Opener) Stat(path string) (fs.FileInfo, error) {
	if o.Root() == "" {
		return os.Stat(path)
	}
	r, rel, err := o.resolved(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	fi, err := r.Stat(rel)
	if err != nil {
		return nil, outside(path, o.root, err)
	}
	return fi, nil
}

// ReadDir is os.ReadDir through o: a confined Opener lists the directory path leads to beneath
// its root only (a link out of it, on the way or re-pointed meanwhile, is ErrOutsideRoot).
func (o *Opener) ReadDir(path string) ([]fs.DirEntry, error) {
	if o.Root() == "" {
		return os.ReadDir(path)
	}
	r, rel, err := o.resolved(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	d, err := r.Open(rel)
	if err != nil {
		return nil, outside(path, o.root, err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("reading directory %s: %w", path, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// resolved is o's root opened (beneath) and path below it with its links followed there
// (resolveIn), for a confined Opener.
func (o *Opener) resolved(path string) (*os.Root, string, error) {
	r, parts, err := o.beneath(path)
	if err != nil {
		return nil, "", err
	}
	rel, err := resolveIn(r, o.root, parts)
	if err != nil {
		r.Close()
		return nil, "", outside(path, o.root, err)
	}
	return r, rel, nil
}

// beneath opens o's root, checked to be the directory it was at Confine, and returns path's
// components below it (".." kept: os.Root and resolveIn take each after the links before it,
// as the kernel does; a path cleaned lexically, a/../b where a is a link, is b, but a's
// target's b for the kernel), or ErrOutsideRoot for a path that is not below it.
func (o *Opener) beneath(path string) (*os.Root, []string, error) {
	root := o.root
	raw := path
	if !filepath.IsAbs(raw) {
		wd, err := os.Getwd()
		if err != nil {
			return nil, nil, err
		}
		raw = wd + string(filepath.Separator) + raw
	}
	if abs := filepath.Clean(raw); !Within(root, abs) {
		return nil, nil, refuse(root, "%s is", path)
	}
	parts, ok := below(root, raw)
	if !ok {
		return nil, nil, refuse(root, "%s is", path)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, nil, err
	}
	if st, err := r.Stat("."); err != nil || o.id == nil || !os.SameFile(o.id, st) {
		r.Close()
		return nil, nil, refuse(root, "%s: %s is not the directory it was when confined (moved, or a link put in its place), so", path, root)
	}
	return r, parts, nil
}

// named is err, an os.Root error naming a path below the root, naming path instead, as
// os.Open's would.
func named(err error, path string) error {
	if pe, ok := err.(*fs.PathError); ok {
		return &fs.PathError{Op: "open", Path: path, Err: pe.Err}
	}
	return err
}

// errLeadsOut is resolveIn's error for a link to an absolute path outside the root.
var errLeadsOut = errors.New("a link escapes from the root")

// components are the names in p, a path, less the empty ones and ".".
func components(p string) []string {
	parts := strings.Split(p, string(filepath.Separator))
	return slices.DeleteFunc(parts, func(s string) bool { return s == "" || s == "." })
}

// below returns the components of p, an absolute path, after root's (all of them, in order,
// literally: not cleaned, so that a ".." after a link is taken from where the link leads), or
// false when p does not begin with them.
func below(root, p string) ([]string, bool) {
	rp, pp := components(root), components(p)
	if len(pp) < len(rp) || !slices.Equal(rp, pp[:len(rp)]) {
		return nil, false
	}
	return pp[len(rp):], true
}

// joined is parts as a path below a root ("." for none: the root itself).
func joined(parts []string) string {
	if len(parts) == 0 {
		return "."
	}
	return strings.Join(parts, string(filepath.Separator))
}

// resolveIn returns parts, a path's components below root opened as r, with the links on its
// way followed (at most 40, as Linux's), looking at nothing outside root and as the kernel
// does (a ".." after a link goes up from where the link leads): a link to an absolute path
// beginning with root is taken as the path below it that it names, any other is errLeadsOut,
// and a ".." above root is errLeadsOut too.
func resolveIn(r *os.Root, root string, parts []string) (string, error) {
	done := ""
	for links := 0; len(parts) > 0; {
		p := parts[0]
		parts = parts[1:]
		if p == ".." {
			if done == "" {
				return "", fmt.Errorf("a \"..\" goes above %s (%w)", root, errLeadsOut)
			}
			if done = filepath.Dir(done); done == "." {
				done = ""
			}
			continue
		}
		next := filepath.Join(done, p)
		fi, err := r.Lstat(next)
		if err != nil {
			if len(parts) > 0 { // the kernel's "missing/..": not found
				return "", err
			}
			done = next // a missing file is for the open to say
			continue
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if !fi.IsDir() && len(parts) > 0 { // the kernel's "file/..": not a directory
				return "", &fs.PathError{Op: "open", Path: next, Err: syscall.ENOTDIR}
			}
			done = next
			continue
		}
		if links++; links > 40 {
			return "", &fs.PathError{Op: "open", Path: next, Err: syscall.ELOOP}
		}
		target, err := r.Readlink(next)
		if err != nil {
			return "", err
		}
		more := components(target)
		if filepath.IsAbs(target) {
			var ok bool
			if more, ok = below(root, target); !ok {
				return "", fmt.Errorf("%s is a link to %s (%w)", filepath.Join(root, next), target, errLeadsOut)
			}
			done = ""
		}
		parts = append(more, parts...)
	}
	return joined(components(done)), nil
}

// outside is the error of an open beneath root that failed with err: ErrOutsideRoot when the
// path led out of it (os.Root's "path escapes from parent", which os does not export: told by
// its text, not by the path's, which may hold "escapes"), else err.
func outside(path, root string, err error) error {
	if errors.Is(err, errLeadsOut) {
		return refuse(root, "%s: %v,", path, err)
	}
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Err.Error() == "path escapes from parent" {
		return refuse(root, "%s leads", path)
	}
	return named(err, path)
}

// opened checks f, opened as path beneath o's root: the file's real path is read back
// (/proc/self/fd), so that a root re-pointed between the check of its identity and the open is
// caught too. Where it cannot be read back the open beneath the root stands.
func (o *Opener) opened(path string, f *os.File) error {
	real, err := realPath(f)
	if err != nil {
		return nil
	}
	if !Within(o.root, real) {
		return refuse(o.root, "%s opened %s,", path, real)
	}
	return nil
}

// refuse is the ErrOutsideRoot of an open beneath root: format and args say what led out, and
// the root and its flag follow, for a user of `student serve`.
func refuse(root, format string, args ...any) error {
	return fmt.Errorf(format+" %w %s: this server loads weights only from there (its --weights-root)", append(args, ErrOutsideRoot, root)...)
}

// realPath is where the open file f is, as the kernel tells it (a variable for the tests of a
// system without /proc).
var realPath = func(f *os.File) (string, error) {
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
}

// Within says whether path is root or below it (both clean and absolute).
func Within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// ReadFile is os.ReadFile for a file that must be regular (Open) and of at most max bytes;
// a larger one is refused unread. Its errors wrap os.Open's (fs.ErrNotExist for a missing one).
// It is the plain Opener's ReadFile.
func ReadFile(path string, max int64) ([]byte, error) { return (*Opener)(nil).ReadFile(path, max) }

// ReadFile is os.ReadFile for a file that must be regular (o.Open) and of at most max bytes;
// a larger one is refused unread. Its errors wrap os.Open's (fs.ErrNotExist for a missing one).
func (o *Opener) ReadFile(path string, max int64) ([]byte, error) {
	f, size, err := o.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > max {
		return nil, fmt.Errorf("%s: %d bytes, over the limit of %d", path, size, max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: over the limit of %d bytes (it grew while read)", path, max)
	}
	return b, nil
}

// ReadJSON is ReadFile with the limit MaxJSON.
func ReadJSON(path string) ([]byte, error) { return ReadFile(path, MaxJSON) }

// ReadJSON is o.ReadFile with the limit MaxJSON.
func (o *Opener) ReadJSON(path string) ([]byte, error) { return o.ReadFile(path, MaxJSON) }
