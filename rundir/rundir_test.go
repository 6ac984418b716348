package rundir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
)

func line(key string) []byte { return []byte(fmt.Sprintf(`{"key":%q}`, key)) }

func rec(key, teacher string, d datasets.Dialect) Record {
	return Record{Entry: JournalEntry{Key: key, Task: "t-" + key, Teacher: teacher, Dialect: d}, Line: line(key)}
}

// readLines collects Lines(dir) as "SHARD:N:DATA".
func readLines(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for l, err := range Lines(dir) {
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(dir, ShardsDir, l.Shard); l.Path != want {
			t.Fatalf("line path %s, want %s", l.Path, want)
		}
		out = append(out, fmt.Sprintf("%s:%d:%s", l.Shard, l.N, l.Data))
	}
	return out
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestWriterCommitRotateReadResume commits lines and failures, rotating shards by line count,
// reads them back in shard order, adds torn and uncommitted tails to every file, and checks
// that readers ignore them and a resume cuts them, then continues the newest shard.
func TestWriterCommitRotateReadResume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	opts := Options{Manifest: map[string]string{"format": "test/v1"}, MaxShardBytes: 1 << 20, MaxShardLines: 2}
	w, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil || string(got) != "{\n  \"format\": \"test/v1\"\n}\n" {
		t.Fatalf("manifest %q, %v", got, err)
	}
	batch := []Record{
		rec("k0", "b", datasets.Postgres),
		rec("k1", "a", datasets.SQLite),
		{Failure: &Failure{Key: "f1", Reason: "database", Error: "first"}},
		rec("k2", "a", datasets.SQLite),
		rec("k3", "a", datasets.SQLite),
		rec("k1", "a", datasets.SQLite),             // done in this batch: skipped
		{Failure: &Failure{Key: "k0", Reason: "x"}}, // done: skipped
		rec("k4", "a", datasets.SQLite),
		rec("k5", "a", datasets.SQLite),
	}
	committed, err := w.Commit(batch)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 2, 3, 4, 7, 8}; !slices.Equal(committed, want) {
		t.Fatalf("committed %v, want %v", committed, want)
	}
	if _, err := w.Commit([]Record{{Failure: &Failure{Key: "f1", Reason: "database", Error: "second"}}, {Failure: &Failure{Key: "f2"}}}); err != nil {
		t.Fatal(err)
	}
	if !w.Done("k5") || w.Done("f1") || !w.Failed("f1") || w.Failed("k1") {
		t.Fatal("Done/Failed disagree with what was committed")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	want := []string{
		`a.sqlite.0000.jsonl:1:{"key":"k1"}`, `a.sqlite.0000.jsonl:2:{"key":"k2"}`,
		`a.sqlite.0001.jsonl:1:{"key":"k3"}`, `a.sqlite.0001.jsonl:2:{"key":"k4"}`,
		`a.sqlite.0002.jsonl:1:{"key":"k5"}`,
		`b.postgres.0000.jsonl:1:{"key":"k0"}`,
	}
	if got := readLines(t, dir); !slices.Equal(got, want) {
		t.Fatalf("lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	journal, err := os.ReadFile(filepath.Join(dir, JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(journal), "\n")
	if first != `{"key":"k0","task":"t-k0","teacher":"b","dialect":"postgres","sample":0,"shard":"b.postgres.0000.jsonl","end":13}` {
		t.Fatalf("journal line %s", first)
	}
	keys, err := DoneKeys(dir)
	if err != nil || len(keys) != 6 {
		t.Fatalf("done keys %v, %v", keys, err)
	}

	// Torn or uncommitted tails: a half line in a shard, a complete line the journal never
	// recorded, half a journal entry, half a failure.
	shard2 := filepath.Join(dir, ShardsDir, ShardName("a", datasets.SQLite, 2))
	appendTo(t, shard2, `{"key":"k9"`)
	appendTo(t, filepath.Join(dir, ShardsDir, ShardName("b", datasets.Postgres, 0)), string(line("k8"))+"\n")
	appendTo(t, filepath.Join(dir, JournalFile), `{"key":"k9","shard":"a.sql`)
	appendTo(t, filepath.Join(dir, FailuresFile), `{"key":"f3"`)
	if got := readLines(t, dir); !slices.Equal(got, want) {
		t.Fatalf("lines with torn tails\n%s", strings.Join(got, "\n"))
	}
	fails, skipped, err := ReadFailures(dir)
	if err != nil || len(skipped) != 0 || len(fails) != 2 || fails[0].Key != "f1" || fails[0].Error != "second" || fails[1].Key != "f2" {
		t.Fatalf("failures %+v, %v", fails, err)
	}

	resumed := 0
	opts.Resume = func() error { resumed++; return nil }
	w, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if resumed != 1 || len(w.Repairs()) != 4 {
		t.Fatalf("resume called %d times, repairs %q", resumed, w.Repairs())
	}
	if !w.Done("k0") || w.Done("k8") || w.Done("k9") || !w.Failed("f2") || w.Failed("f3") {
		t.Fatal("resumed Done/Failed disagree with the journal and failures")
	}
	if n := size(t, shard2); n != int64(len(line("k5"))+1) {
		t.Fatalf("shard 2 has %d bytes after the cut", n)
	}
	// The newest shard of a group has room for one more line; the next starts shard 3.
	if _, err := w.Commit([]Record{rec("k6", "a", datasets.SQLite), rec("k7", "a", datasets.SQLite), rec("k8", "b", datasets.Postgres)}); err != nil {
		t.Fatal(err)
	}
	want = append(want[:5:5], `a.sqlite.0002.jsonl:2:{"key":"k6"}`, `a.sqlite.0003.jsonl:1:{"key":"k7"}`,
		`b.postgres.0000.jsonl:1:{"key":"k0"}`, `b.postgres.0000.jsonl:2:{"key":"k8"}`)
	if got := readLines(t, dir); !slices.Equal(got, want) {
		t.Fatalf("lines after resume\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestOpenRefusals: Resume's error refuses the dir; a shard shorter than its journaled end or a
// journaled shard that is missing is damage, for the writer and the reader alike.
func TestOpenRefusals(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "nolimits"), Options{Manifest: struct{}{}, MaxShardBytes: 1 << 20}); err == nil || !strings.Contains(err.Error(), "must be positive") {
		t.Fatalf("Open without a line limit: %v", err)
	}
	opts := Options{Manifest: struct{}{}, MaxShardBytes: 1 << 20, MaxShardLines: 10}
	w, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit([]Record{rec("k0", "a", datasets.SQLite), rec("k1", "a", datasets.SQLite)}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	other := errors.New("a different run")
	opts.Resume = func() error { return other }
	if _, err := Open(dir, opts); !errors.Is(err, other) {
		t.Fatalf("Open with a refusing Resume: %v", err)
	}
	opts.Resume = nil

	shard := filepath.Join(dir, ShardsDir, ShardName("a", datasets.SQLite, 0))
	if err := os.Truncate(shard, size(t, shard)-3); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, opts); err == nil || !strings.Contains(err.Error(), "the run dir is damaged") {
		t.Fatalf("Open of a short shard: %v", err)
	}
	var lerr error
	for _, err := range Lines(dir) {
		lerr = err
	}
	if lerr == nil || !strings.Contains(lerr.Error(), "journaled part ends inside a line") {
		t.Fatalf("Lines of a short shard: %v", lerr)
	}
	if err := os.Remove(shard); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, opts); err == nil || !strings.Contains(err.Error(), "which is missing") {
		t.Fatalf("Open with a missing shard: %v", err)
	}
	lerr = nil
	for _, err := range Lines(dir) {
		lerr = err
	}
	if lerr == nil || !strings.Contains(lerr.Error(), "which is missing") {
		t.Fatalf("Lines with a missing shard: %v", lerr)
	}
}

// TestLinesNotARunDir: a dir without a manifest is refused by name; a stop ends the stream.
func TestLinesNotARunDir(t *testing.T) {
	dir := t.TempDir()
	var errs []error
	for _, err := range Lines(dir) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || errs[0] == nil || !strings.Contains(errs[0].Error(), "is not a run dir") {
		t.Fatalf("Lines of an empty dir: %v", errs)
	}
	w, err := Open(dir, Options{Manifest: struct{}{}, MaxShardBytes: 1 << 20, MaxShardLines: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Commit([]Record{rec("k0", "a", datasets.SQLite), rec("k1", "a", datasets.SQLite)}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for range Lines(dir) {
		n++
		break
	}
	var m map[string]any
	if n != 1 || readManifest(dir, &m) != nil || len(m) != 0 {
		t.Fatalf("stopped after %d lines; manifest %v", n, m)
	}
}

// TestLongLines: Commit refuses a line over MaxLine (nothing is written) and keeps a failure's
// error text bounded; Lines skips a journaled line over MaxLine (an earlier version's),
// yielding it as a *BadLine with its key and reading on, and ReadFailures skips a failure line
// that does not decode. The writer resumes such a run dir without cutting either.
func TestLongLines(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Manifest: map[string]string{"v": "1"}, MaxShardBytes: 1 << 40, MaxShardLines: 1000}
	w, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	huge := rec("huge", "a", datasets.SQLite)
	huge.Line = []byte(`{"key":"huge","x":"` + strings.Repeat("x", MaxLine) + `"}`)
	if _, err := w.Commit([]Record{huge}); err == nil || !strings.Contains(err.Error(), "over the readers' limit") {
		t.Fatalf("commit of a line over MaxLine: %v", err)
	}
	fail := &Failure{Key: "f", Reason: "database", Error: strings.Repeat("e", 1<<20)}
	if _, err := w.Commit([]Record{rec("k1", "a", datasets.SQLite), {Failure: fail}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	shard := filepath.Join(dir, ShardsDir, ShardName("a", datasets.SQLite, 0))
	if got := size(t, shard); got != int64(len(line("k1"))+1) {
		t.Fatalf("shard of %d bytes", got)
	}

	// An earlier version wrote a line over the limit, journaled, then a good one.
	end := size(t, shard)
	for _, l := range []string{string(huge.Line), string(line("k3"))} {
		appendTo(t, shard, l+"\n")
		end += int64(len(l) + 1)
		key := "k3"
		if strings.HasPrefix(l, `{"key":"huge"`) {
			key = "huge"
		}
		appendTo(t, filepath.Join(dir, JournalFile), fmt.Sprintf(`{"key":%q,"shard":%q,"end":%d}`+"\n", key, filepath.Base(shard), end))
	}
	appendTo(t, filepath.Join(dir, FailuresFile), "not json\n"+`{"key":"f2","reason":"x"}`+"\n")

	var got []string
	var bad []*BadLine
	for l, err := range Lines(dir) {
		var b *BadLine
		if errors.As(err, &b) {
			bad = append(bad, b)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s:%s", l.N, l.Key, l.Data))
	}
	if want := []string{`1:k1:{"key":"k1"}`, `3:k3:{"key":"k3"}`}; !slices.Equal(got, want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
	if len(bad) != 1 || bad[0].N != 2 || bad[0].Key != "huge" || bad[0].Bytes != int64(len(huge.Line)+1) || !errors.Is(bad[0], errTooLong) {
		t.Fatalf("bad lines %+v", bad)
	}
	fails, skipped, err := ReadFailures(dir)
	if err != nil || len(fails) != 2 || len(fails[0].Error) > 16<<10 || fails[1].Key != "f2" || len(skipped) != 1 || skipped[0].N != 2 {
		t.Fatalf("failures %d (first error %d bytes), skipped %+v, %v", len(fails), len(fails[0].Error), skipped, err)
	}

	before := size(t, shard)
	w, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if size(t, shard) != before || !w.Done("huge") || !w.Failed("f2") || len(w.Repairs()) != 1 {
		t.Fatalf("resume: shard %d → %d bytes, repairs %q", before, size(t, shard), w.Repairs())
	}
}
