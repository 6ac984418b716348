package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// TestExport drives the built binary: curate export writes the rows a --where filter selects
// as Parquet (read back with parquet-go, and by DuckDB when CHAINEDSQL_NODE_MODULES holds
// @duckdb/node-api) and JSONL; bad input is a usage error or one line and exit 1.
func TestExport(t *testing.T) {
	sd := newSampleDataset(t)
	bin, tmp, run, ds := sd.bin, sd.tmp, sd.run, sd.ds
	var rows []curate.Row
	if err := curate.ReadRows(t.Context(), ds, func(r *curate.Row) error { rows = append(rows, *r); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		where string
		keep  func(r *curate.Row) bool
	}{
		{"", func(*curate.Row) bool { return true }},
		{"db_id=library&difficulty=simple", func(r *curate.Row) bool { return r.DBID == "library" && r.Difficulty == "simple" }},
		{"text=join&in=sql", func(r *curate.Row) bool { return regexp.MustCompile(`(?i)\bjoin`).MatchString(r.FinalSQL) }},
		{"turns_min=2&sort=-tokens&offset=3&limit=1", func(r *curate.Row) bool { return r.Turns >= 2 }},
	} {
		var want []string
		for i := range rows {
			if c.keep(&rows[i]) {
				want = append(want, rows[i].Key)
			}
		}
		for _, ext := range []string{"parquet", "jsonl"} {
			out := filepath.Join(tmp, fmt.Sprintf("out-%d.%s", len(want), ext))
			r := runBinary(t, bin, "export", ds, "--where", c.where, "--out", out)
			if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("%d of %d rows written", len(want), len(rows))) {
				t.Fatalf("export --where %q: exit %d, stdout %q, stderr %q; want %d rows", c.where, r.code, r.stdout, r.stderr, len(want))
			}
			var got []string
			if ext == "parquet" {
				f, err := os.Open(out)
				if err != nil {
					t.Fatal(err)
				}
				pr := parquet.NewGenericReader[curate.Row](f)
				buf := make([]curate.Row, pr.NumRows())
				n, _ := pr.Read(buf)
				for _, r := range buf[:n] {
					got = append(got, r.Key)
				}
				pr.Close()
				f.Close()
				duckRows(t, out, len(want))
			} else {
				f, err := os.Open(out)
				if err != nil {
					t.Fatal(err)
				}
				sc := bufio.NewScanner(f)
				sc.Buffer(nil, 1<<24)
				for sc.Scan() {
					var r curate.Row
					if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
						t.Fatalf("%s: %v", out, err)
					}
					got = append(got, r.Key)
				}
				f.Close()
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("export --where %q as %s: keys %q, want %q", c.where, ext, got, want)
			}
		}
	}
	if len(rows) == 0 {
		t.Fatal("no rows to export")
	}

	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad filter value", []string{"export", ds, "--where", "correct=maybe", "--out", filepath.Join(tmp, "x.jsonl")}, 2, "correct="},
		{"unknown key", []string{"export", ds, "--where", "bogus=1", "--out", filepath.Join(tmp, "x.jsonl")}, 2, `unknown key "bogus": want teacher, dialect,`},
		{"misspelt key", []string{"export", ds, "--where", "teachers=glm", "--out", filepath.Join(tmp, "x.jsonl")}, 2, `unknown key "teachers" (did you mean "teacher"?)`},
		{"unknown sort column", []string{"export", ds, "--where", "sort=nothing", "--out", filepath.Join(tmp, "x.jsonl")}, 2, "sort="},
		{"no --out", []string{"export", ds}, 2, "--out"},
		{"unknown extension", []string{"export", ds, "--out", filepath.Join(tmp, "x.csv")}, 2, ".parquet or .jsonl"},
		{"bad format", []string{"export", ds, "--format", "csv", "--out", filepath.Join(tmp, "x.jsonl")}, 2, "--format"},
		{"a run dir", []string{"export", run, "--out", filepath.Join(tmp, "x.jsonl")}, 1, "curate build first"},
		{"no such output dir", []string{"export", ds, "--out", filepath.Join(tmp, "none", "x.jsonl")}, 1, filepath.Join(tmp, "none")},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runBinary(t, bin, c.args...)
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %q: want exit %d and %q", r.code, r.stderr, c.code, c.want)
			}
			if c.code == 1 && strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("stderr is not one line: %q", r.stderr)
			}
		})
	}
	if m, _ := filepath.Glob(filepath.Join(tmp, ".x.jsonl.tmp-*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

// sampleDataset is the built binary, the sample run (oracle, SQLite) in tmp/run and the
// dataset the binary builds from it with the shared tokenizer in tmp/ds.
type sampleDataset struct{ tok, bin, tmp, run, ds string }

func newSampleDataset(t *testing.T) sampleDataset {
	t.Helper()
	sd := sampleDataset{tok: shared.Path(t, "tokenizer/qwen2.5/tokenizer.json"), bin: testbin.Build(t, "."), tmp: t.TempDir()}
	sd.run, sd.ds = filepath.Join(sd.tmp, "run"), filepath.Join(sd.tmp, "ds")
	sampleRun(t, sd.run)
	if r := runBinary(t, sd.bin, "build", sd.run, "--tokenizer", sd.tok, "--out", sd.ds, "--quiet"); r.code != 0 {
		t.Fatalf("build: %d %s", r.code, r.stderr)
	}
	return sd
}

// duckRows has DuckDB count the rows of a Parquet file, when testbin.NodeModulesEnv names a
// node_modules folder with @duckdb/node-api.
func duckRows(t *testing.T, path string, want int) {
	t.Helper()
	if got, ok := testbin.DuckDB(t, "select count(*) as n from read_parquet('"+path+"')"); ok && got != fmt.Sprintf(`[{"n":"%d"}]`, want) {
		t.Errorf("DuckDB counts %s rows in %s, want %d", got, path, want)
	}
}
