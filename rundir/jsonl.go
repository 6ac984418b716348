package rundir

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxLine bounds one JSONL line of a run dir, its newline included. The writer never writes a
// longer line (Commit refuses it); the readers skip one (Lines yields it as a *BadLine) instead
// of holding it in memory. A trajectory is far below it: distill bounds every text it keeps
// (internal/textcap).
const MaxLine = 64 << 20

// BadLine is a line a reader skipped: longer than MaxLine, or, where the reader decodes its
// lines, not JSON of the expected shape. Lines and rundir.Trajectories yield it as their error
// and go on to the next line when the consumer does: a consumer that reads damaged run dirs
// counts and reports it (with errors.As) and continues; one that must not lose a line stops.
type BadLine struct {
	// File is the file's name (a shard's, or failures.jsonl), Path its path; N counts the file's
	// lines from 1; Bytes is the line's length with its newline, End the offset just past it.
	File  string
	Path  string
	N     int
	Bytes int64
	End   int64
	// Key is the key the journal records for the line, "" when it records none.
	Key string
	// Err says what is wrong with it.
	Err error
}

// Error names the file, the line, its length and key, and what is wrong.
func (b *BadLine) Error() string {
	key := ""
	if b.Key != "" {
		key = ", key " + b.Key
	}
	return fmt.Sprintf("%s line %d (%d bytes%s): %v", b.Path, b.N, b.Bytes, key, b.Err)
}

// Unwrap returns what is wrong with the line.
func (b *BadLine) Unwrap() error { return b.Err }

// errTooLong is a BadLine's error for a line over MaxLine.
var errTooLong = fmt.Errorf("the line is longer than the readers' limit of %d bytes", MaxLine)

// readJSONL reads path line by line into fn (each line with the offset just past it), the
// first limit bytes only when limit >= 0. It returns the byte length of the valid prefix: a
// last line without its newline, or a last line that does not decode (fn returned a
// decodeError), is torn and not passed on. A bad line elsewhere (over MaxLine, or not decoding)
// goes to skip, which returns nil to skip it and read on; with a nil skip it is an error naming
// the file and line. A missing file is empty. Each line passed on is its own copy, without its
// line ending.
func readJSONL(path string, limit int64, fn func(line []byte, end int64) error, skip func(*BadLine) error) (valid int64, torn bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	var r io.Reader = f
	if limit >= 0 {
		r = io.LimitReader(f, limit)
	}
	br := bufio.NewReaderSize(r, 1<<16)
	var (
		pos     int64
		lineNo  int
		pending *BadLine // the previous line did not decode: bad unless it was the last
	)
	bad := func(b *BadLine) error {
		if skip == nil {
			return fmt.Errorf("%s line %d: %w", path, b.N, b.Err)
		}
		if err := skip(b); err != nil {
			return err
		}
		pos = b.End
		return nil
	}
	for {
		line, n, rerr := readLine(br)
		if n == 0 && rerr == io.EOF {
			break
		}
		if pending != nil {
			if err := bad(pending); err != nil {
				return pos, false, err
			}
			pending = nil
		}
		lineNo++
		if rerr == io.EOF { // no trailing newline: torn
			return pos, true, nil
		}
		if errors.Is(rerr, errTooLong) {
			if err := bad(&BadLine{Path: path, N: lineNo, Bytes: n, End: pos + n, Err: errTooLong}); err != nil {
				return pos, false, err
			}
			continue
		}
		if rerr != nil {
			return pos, false, fmt.Errorf("%s line %d: %w", path, lineNo, rerr)
		}
		body := bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(body)) > 0 {
			if err := fn(body, pos+n); err != nil {
				var de *decodeError
				if errors.As(err, &de) {
					pending = &BadLine{Path: path, N: lineNo, Bytes: n, End: pos + n, Err: de.err}
					continue
				}
				return pos, false, err
			}
		}
		pos += n
	}
	if pending != nil {
		// The last line does not decode: a torn write that happened to end in a newline.
		return pos, true, nil
	}
	return pos, false, nil
}

// decodeError marks a line that is not valid JSON (as opposed to an error of the callback).
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }

// readLine reads one line including its newline into a new slice, and its length n. A line
// longer than MaxLine is read past without being kept: nil, its length and errTooLong, or
// io.EOF when the input ends before its newline.
func readLine(br *bufio.Reader) (line []byte, n int64, err error) {
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		n += int64(len(chunk))
		if !long {
			if n > MaxLine {
				long, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if long && err == nil {
			err = errTooLong
		}
		return line, n, err
	}
}

// decodeInto returns a readJSONL callback that decodes each line into v, a decodeError when the
// line is not JSON of v's shape.
func decodeInto(v any) func([]byte, int64) error {
	return func(line []byte, _ int64) error {
		if err := json.Unmarshal(line, v); err != nil {
			return &decodeError{err}
		}
		return nil
	}
}
