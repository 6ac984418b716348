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

// maxLine bounds one JSONL line when reading (a trajectory with five long reasoning turns is far
// below it).
const maxLine = 64 << 20

// readJSONL reads path line by line into fn, the first limit bytes only when limit >= 0. It
// returns the byte length of the valid prefix: a last line without its newline, or a last line
// that does not decode (fn returned a decodeError), is torn and not passed on. A bad line
// elsewhere is an error naming the file and line. A missing file is empty. Each line passed on
// is its own copy, without its line ending.
func readJSONL(path string, limit int64, fn func(line []byte) error) (valid int64, torn bool, err error) {
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
		pending error // decode error of the previous line: fatal unless that line was the last
	)
	for {
		line, rerr := readLine(br)
		if len(line) == 0 && rerr == io.EOF {
			break
		}
		if pending != nil {
			return pos, false, pending
		}
		lineNo++
		if rerr == io.EOF { // no trailing newline: torn
			return pos, true, nil
		}
		if rerr != nil {
			return pos, false, fmt.Errorf("%s line %d: %w", path, lineNo, rerr)
		}
		body := bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(body)) > 0 {
			if err := fn(body); err != nil {
				var de *decodeError
				if errors.As(err, &de) {
					pending = fmt.Errorf("%s line %d: %w", path, lineNo, de.err)
					continue
				}
				return pos, false, err
			}
		}
		pos += int64(len(line))
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

// readLine reads one line including its newline, up to maxLine bytes, into a new slice.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if err == bufio.ErrBufferFull {
			if len(buf) > maxLine {
				return nil, fmt.Errorf("line longer than %d bytes", maxLine)
			}
			continue
		}
		return buf, err
	}
}

// decodeInto returns a readJSONL callback that decodes each line into v, a decodeError when the
// line is not JSON of v's shape.
func decodeInto(v any) func([]byte) error {
	return func(line []byte) error {
		if err := json.Unmarshal(line, v); err != nil {
			return &decodeError{err}
		}
		return nil
	}
}
