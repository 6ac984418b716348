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
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// MaxJSON is the most bytes ReadJSON reads: a model directory's JSON files are kilobytes to a
// few tens of megabytes (a tokenizer.json), and a larger one (a huge sparse file) would
// otherwise be read into memory whole.
const MaxJSON = 256 << 20

// Open opens path for reading, without waiting on a FIFO, and returns it only when what it
// opened (links followed) is a regular file, with its size.
func Open(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|nonBlock, 0)
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
	if err := confined(path, f); err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// ErrOutsideRoot is wrapped by Open's refusal of a file opened under a Confine'd directory that
// is, as opened, outside its root.
var ErrOutsideRoot = errors.New("outside the weights root")

var confines struct {
	sync.Mutex
	list []*confinement // one per Confine not yet released
}

// confinement is one Confine call: dir and root absolute, clean and links resolved.
type confinement struct{ dir, root string }

// Confine makes Open, until release is called, refuse (ErrOutsideRoot) a file named under dir
// whose open descriptor's real path (read back from /proc/self/fd) is not root or below it:
// the check is of the file opened, so a link inside dir, or a directory on the way to it,
// re-pointed after any check of the paths changes nothing. dir and root are absolute, clean,
// with their links resolved. Where /proc/self/fd cannot be read the file is refused, unless
// root is / (which every file is under).
//
// The confinement is process-wide, by the path a file is opened by, not by the caller: every
// Open under dir meanwhile is checked, whoever opens it. Calls may overlap (two servers'
// reloads of one directory, a directory and one below it): each is kept until its own release,
// and a file under several confined directories must be inside every one's root.
func Confine(dir, root string) (release func()) {
	c := &confinement{dir, root}
	confines.Lock()
	defer confines.Unlock()
	confines.list = append(confines.list, c)
	return func() {
		confines.Lock()
		defer confines.Unlock()
		if i := slices.Index(confines.list, c); i >= 0 {
			confines.list = slices.Delete(confines.list, i, i+1)
		}
	}
}

// confined checks f, opened as path, against the root of every Confine'd directory path is
// under.
func confined(path string, f *os.File) error {
	confines.Lock()
	if len(confines.list) == 0 {
		confines.Unlock()
		return nil
	}
	var roots []string
	abs, err := filepath.Abs(path)
	for _, c := range confines.list {
		if (err != nil || Within(c.dir, abs)) && c.root != "/" { // every file is under /
			roots = append(roots, c.root)
		}
	}
	confines.Unlock()
	if len(roots) == 0 {
		return nil
	}
	real, err := realPath(f)
	if err != nil {
		return fmt.Errorf("%s: cannot tell where the file opened is (%v), so it is refused as perhaps %w %s", path, err, ErrOutsideRoot, roots[0])
	}
	for _, root := range roots {
		if !Within(root, real) {
			return fmt.Errorf("%s opened %s, %w %s: this server loads weights only from there (its --weights-root)", path, real, ErrOutsideRoot, root)
		}
	}
	return nil
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
func ReadFile(path string, max int64) ([]byte, error) {
	f, size, err := Open(path)
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
