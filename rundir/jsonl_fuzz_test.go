package rundir

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadJSONL feeds arbitrary bytes to the shard/journal line reader: it never panics, the
// valid prefix it reports ends at a line boundary within the file, every line it passes on is
// valid JSON, and a torn tail is only ever the last line.
func FuzzReadJSONL(f *testing.F) {
	for _, s := range []string{
		"", "\n", "{}\n", `{"key":"a"}` + "\n" + `{"key":"b"}` + "\n",
		`{"key":"a"}` + "\n" + `{"key":`, `{"key":"a"}` + "\n" + "not json\n",
		"not json\n{}\n", "\r\n{}\r\n", "{}\n\n\n{}", "  \n{}\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "shard.jsonl")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		var lines int
		var v any
		decode := decodeInto(&v)
		valid, torn, err := readJSONL(path, -1, func(line []byte, end int64) error {
			if err := decode(line, end); err != nil {
				return err
			}
			lines++
			return nil
		}, nil)
		if valid < 0 || valid > int64(len(data)) {
			t.Fatalf("valid prefix %d outside the file (%d bytes)", valid, len(data))
		}
		if valid > 0 && data[valid-1] != '\n' {
			t.Fatalf("valid prefix %d does not end at a newline", valid)
		}
		if err == nil && !torn && valid != int64(len(data)) {
			t.Fatalf("clean read of %d of %d bytes", valid, len(data))
		}
		if tail := data[valid:]; torn && (bytes.Count(tail, []byte("\n")) > 1 || bytes.IndexByte(tail, '\n') >= 0 && tail[len(tail)-1] != '\n') {
			t.Fatalf("torn tail %q spans more than the last line", data[valid:])
		}
		// Skipping bad lines reads everything but a torn tail, each line passed on or skipped.
		good, skipped := 0, 0
		sv, storn, serr := readJSONL(path, -1, func(line []byte, end int64) error {
			if err := decode(line, end); err != nil {
				return err
			}
			good++
			return nil
		}, func(b *BadLine) error {
			if b.End <= 0 || b.End > int64(len(data)) || data[b.End-1] != '\n' {
				t.Fatalf("bad line %d ends at %d, not after a newline", b.N, b.End)
			}
			skipped++
			return nil
		})
		if serr != nil || sv < valid || (err == nil && (sv != valid || storn != torn || good != lines || skipped != 0)) {
			t.Fatalf("skipping: valid %d torn %v err %v lines %d+%d; strict: valid %d torn %v err %v lines %d", sv, storn, serr, good, skipped, valid, torn, err, lines)
		}
		if !storn && sv != int64(len(data)) {
			t.Fatalf("skipping read %d of %d bytes without a torn tail", sv, len(data))
		}
		// The valid prefix alone reads back cleanly with the same lines.
		if err == nil {
			if err := os.WriteFile(path, data[:valid], 0o644); err != nil {
				t.Fatal(err)
			}
			again := 0
			v2, torn2, err2 := readJSONL(path, -1, func(line []byte, end int64) error { again++; return decode(line, end) }, nil)
			if err2 != nil || torn2 || v2 != valid || again != lines {
				t.Fatalf("prefix reread: valid %d torn %v err %v lines %d, want %d false nil %d", v2, torn2, err2, again, valid, lines)
			}
		}
	})
}
