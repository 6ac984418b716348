// Package regular opens and reads files that must be regular files (a model's weights and its
// JSON beside them), checking the file it opened rather than the path beforehand: a path checked
// with os.Stat and then opened may have been swapped in between for a FIFO (whose open waits
// for a writer for good) or a link to a device such as /dev/zero (whose read never ends). The
// open does not wait on a FIFO, and what was opened is refused unless it is a regular file.
package regular

import (
	"fmt"
	"io"
	"os"
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
	return f, st.Size(), nil
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
