package main

import (
	"database/sql"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// runBinary runs bin without the DSN and teacher variables of the caller's environment and
// returns its exit status and stderr.
func runBinary(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHAINEDSQL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	code, _, stderr := testbin.Run(t, cmd)
	return code, stderr
}

// birdFixture writes a BIRD-layout folder: dev.json with one question on db "tiny" and
// dev_databases/tiny/tiny.sqlite.
func birdFixture(t *testing.T, dir string) string {
	t.Helper()
	dbDir := filepath.Join(dir, "dev_databases", "tiny")
	if err := os.MkdirAll(dbDir, 0o755); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", filepath.Join(dbDir, "tiny.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE pets (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO pets VALUES (1, 'Rex'), (2, 'Tom');`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "dev.json")
	writeFile(t, file, `[{"question_id": 0, "db_id": "tiny", "question": "How many pets?", "evidence": "", "SQL": "SELECT COUNT(*) FROM pets", "difficulty": "simple"}]`)
	return file
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// snapshot reads every file under dir (nil when dir does not exist).
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		m[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBadInput drives the real binary with bad task files, missing and broken databases, bad
// DSNs, bad teacher configs and bad run dirs: each exits non-zero with an error naming the
// input, and the run dir is not created (or, when it existed, left as it was).
func TestBadInput(t *testing.T) {
	tmp := t.TempDir()
	bin := testbin.Build(t, ".")
	good := birdFixture(t, filepath.Join(tmp, "bird"))
	goodOut := filepath.Join(tmp, "goodrun")
	if code, stderr := runBinary(t, bin, "--tasks", "bird:"+good, "--out", goodOut, "--progress", "off"); code != 0 {
		t.Fatalf("good BIRD folder: exit %d: %s", code, stderr)
	}

	bad := func(name, content string) string {
		p := filepath.Join(tmp, "bad", name, "dev.json")
		writeFile(t, p, content)
		return p
	}
	valid, _ := os.ReadFile(good)
	truncated := bad("truncated", string(valid[:len(valid)/2]))
	wrongType := bad("wrongtype", `[{"question_id": 0, "db_id": 7, "question": "q", "SQL": "SELECT 1"}]`)
	notArray := bad("notarray", `{"question_id": 0, "db_id": "tiny"}`)
	noSQL := bad("nosql", `[{"question_id": 0, "db_id": "tiny", "question": "q"}]`)
	badDiff := bad("baddiff", `[{"question_id": 0, "db_id": "tiny", "question": "q", "SQL": "SELECT 1", "difficulty": "hard-ish"}]`)
	missingDB := bad("missingdb", `[{"question_id": 0, "db_id": "gone", "question": "q", "SQL": "SELECT 1"}]`)
	notSQLite := bad("notsqlite", `[{"question_id": 0, "db_id": "junk", "question": "q", "SQL": "SELECT 1"}]`)
	junkDB := filepath.Join(filepath.Dir(notSQLite), "dev_databases", "junk", "junk.sqlite")
	writeFile(t, junkDB, strings.Repeat("this is not a database\n", 200))
	badYAML := filepath.Join(tmp, "teachers.yaml")
	writeFile(t, badYAML, "teachers: [unclosed\n")
	unknownKey := filepath.Join(tmp, "unknown.yaml")
	writeFile(t, unknownKey, "teachers:\n  glm:\n    base_urll: http://x\n")
	aFile := filepath.Join(tmp, "afile")
	writeFile(t, aFile, "not a run dir")
	notes := filepath.Join(tmp, "notes")
	writeFile(t, filepath.Join(notes, "todo.md"), "my notes\n")
	dataset := filepath.Join(tmp, "dataset")
	writeFile(t, filepath.Join(dataset, "data", "train-00000-of-00001.parquet"), "PAR1")
	writeFile(t, filepath.Join(dataset, "README.md"), "---\n---\n")

	pgDown := "postgres://nobody:secretpw@127.0.0.1:1/test?connect_timeout=5"
	pgNoDB := "postgres://postgres@127.0.0.1:5432/chainedsql_no_such_db_h?connect_timeout=5"
	myDown := "root:secretpw@tcp(127.0.0.1:1)/test?timeout=5s"
	for _, c := range []struct {
		name string
		args []string
		want []string // all must appear in stderr
		out  bool     // --out is added by the loop unless the case names its own
	}{
		{"task file missing", []string{"--tasks", "bird:" + filepath.Join(tmp, "nosuch.json")}, []string{filepath.Join(tmp, "nosuch.json")}, true},
		{"task file truncated", []string{"--tasks", "bird:" + truncated}, []string{truncated}, true},
		{"task file wrong type", []string{"--tasks", "bird:" + wrongType}, []string{wrongType, "db_id"}, true},
		{"task file not an array", []string{"--tasks", "bird:" + notArray}, []string{notArray, "array"}, true},
		{"task without SQL", []string{"--tasks", "bird:" + noSQL}, []string{noSQL, "SQL"}, true},
		{"bad difficulty", []string{"--tasks", "bird:" + badDiff}, []string{badDiff, "hard-ish"}, true},
		{"spider folder missing", []string{"--tasks", "spider:" + filepath.Join(tmp, "nospider")}, []string{filepath.Join(tmp, "nospider")}, true},
		{"unknown task kind", []string{"--tasks", "wikisql:x"}, []string{"wikisql"}, true},
		{"database file missing", []string{"--tasks", "bird:" + missingDB}, []string{filepath.Join("dev_databases", "gone", "gone.sqlite")}, true},
		{"db root missing", []string{"--tasks", "bird:" + good, "--db-root", filepath.Join(tmp, "noroot")}, []string{filepath.Join(tmp, "noroot")}, true},
		{"database file not SQLite", []string{"--tasks", "bird:" + notSQLite}, []string{junkDB}, true},
		{"postgres unreachable", []string{"--tasks", "sample", "--dialects", "postgres", "--pg-dsn", pgDown}, []string{"postgres", "127.0.0.1:1"}, true},
		{"postgres DSN malformed", []string{"--tasks", "sample", "--dialects", "postgres", "--pg-dsn", "::not a dsn::"}, []string{"postgres", "DSN"}, true},
		{"postgres database missing", []string{"--tasks", "sample", "--dialects", "postgres", "--pg-dsn", pgNoDB}, []string{"chainedsql_no_such_db_h"}, true},
		{"postgres without DSN", []string{"--tasks", "sample", "--dialects", "postgres"}, []string{"--pg-dsn"}, true},
		{"mysql unreachable", []string{"--tasks", "sample", "--dialects", "mysql", "--mysql-dsn", myDown}, []string{"mysql", "127.0.0.1:1"}, true},
		{"mysql DSN malformed", []string{"--tasks", "sample", "--dialects", "mysql", "--mysql-dsn", "not a dsn"}, []string{"mysql", "DSN"}, true},
		{"teachers config missing", []string{"--tasks", "sample", "--config", filepath.Join(tmp, "nosuch.yaml")}, []string{filepath.Join(tmp, "nosuch.yaml")}, true},
		{"teachers config not YAML", []string{"--tasks", "sample", "--config", badYAML}, []string{badYAML}, true},
		{"teachers config unknown key", []string{"--tasks", "sample", "--config", unknownKey}, []string{unknownKey, "base_urll"}, true},
		{"out is a file", []string{"--tasks", "sample", "--out", aFile}, []string{aFile}, false},
		{"out is another task set's run dir", []string{"--tasks", "sample", "--out", goodOut}, []string{goodOut}, false},
		{"out is a folder of notes", []string{"--tasks", "sample", "--out", notes}, []string{notes, "not a run dir to resume", "todo.md"}, false},
		{"out is a dataset dir", []string{"--tasks", "sample", "--out", dataset}, []string{dataset, "not a run dir to resume"}, false},
		{"max turns 0", []string{"--tasks", "sample", "--max-turns", "0"}, []string{"--max-turns 0"}, true},
		{"samples negative", []string{"--tasks", "sample", "--samples", "-1"}, []string{"--samples -1"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--progress", "off"}, c.args...)
			out := filepath.Join(t.TempDir(), "run")
			if c.out {
				args = append(args, "--out", out)
			}
			var before map[string]string
			if !c.out {
				before = snapshot(t, args[len(args)-1])
			}
			code, stderr := runBinary(t, bin, args...)
			// A flag's value that is wrong whatever the files say is a usage error (2); one
			// that names a file or server that turns out bad is a runtime failure (1).
			want := cli.ExitFailure
			switch c.name {
			case "unknown task kind", "postgres without DSN", "max turns 0", "samples negative":
				want = cli.ExitUsage
			}
			if code != want {
				t.Fatalf("exit %d, want %d; stderr %q", code, want, stderr)
			}
			t.Logf("exit %d: %s", code, strings.TrimSpace(stderr))
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not name %q", w)
				}
			}
			if strings.Contains(stderr, "secretpw") {
				t.Errorf("stderr shows the DSN's password: %s", stderr)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("panicked: %s", stderr)
			}
			if c.out {
				if _, err := os.Stat(out); !os.IsNotExist(err) {
					t.Errorf("run dir %s created by a run that failed (stat: %v)", out, err)
				}
			} else if after := snapshot(t, args[len(args)-1]); len(after) != len(before) {
				t.Errorf("existing --out changed: %d files before, %d after", len(before), len(after))
			} else {
				for p, b := range before {
					if after[p] != b {
						t.Errorf("existing --out changed: %s", p)
					}
				}
			}
		})
	}

	t.Run("unreadable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root, which reads files whatever their mode")
		}
		dir := filepath.Join(tmp, "locked")
		file := birdFixture(t, dir)
		db := filepath.Join(dir, "dev_databases", "tiny", "tiny.sqlite")
		for _, p := range []string{file, db} {
			if err := os.Chmod(p, 0); err != nil {
				t.Fatal(err)
			}
			code, stderr := runBinary(t, bin, "--tasks", "bird:"+file, "--out", filepath.Join(t.TempDir(), "run"), "--progress", "off")
			os.Chmod(p, 0o644)
			if code == 0 || !strings.Contains(stderr, p) {
				t.Errorf("%s unreadable: exit %d, stderr %q", p, code, stderr)
			}
		}
	})
}
