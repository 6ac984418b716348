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
		valid, torn, err := readJSONL(path, -1, func(line []byte) error {
			if err := decode(line); err != nil {
				return err
			}
			lines++
			return nil
		})
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
		// The valid prefix alone reads back cleanly with the same lines.
		if err == nil {
			if err := os.WriteFile(path, data[:valid], 0o644); err != nil {
				t.Fatal(err)
			}
			again := 0
			v2, torn2, err2 := readJSONL(path, -1, func(line []byte) error { again++; return decode(line) })
			if err2 != nil || torn2 || v2 != valid || again != lines {
				t.Fatalf("prefix reread: valid %d torn %v err %v lines %d, want %d false nil %d", v2, torn2, err2, again, valid, lines)
			}
		}
	})
}
