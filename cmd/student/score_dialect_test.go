package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/pgtest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
)

// scoreTask is one task of the mini-dev set the dialect tests score: its gold per dialect
// (sqlite always; a server missing has the SQLite gold only) and the prediction per dialect
// ("" for none).
type scoreTask struct {
	diff string
	gold map[datasets.Dialect]string
	pred map[datasets.Dialect]string
}

// scoreTasks: 0 right, 1 wrong, 2 SQLite gold only that fails on both servers (printf is
// SQLite's), judged against its answer on the SQLite file, 3 each dialect's own gold (each
// fails on the other engines), 4 a prediction that fails, 5 no prediction.
var scoreTasks = []scoreTask{
	{"simple", all("SELECT COUNT(*) FROM items"), all("SELECT COUNT(id) FROM items")},
	{"moderate", all("SELECT name FROM items WHERE price > 1"), all("SELECT name FROM items")},
	{"moderate", map[datasets.Dialect]string{datasets.SQLite: "SELECT printf('%s!', name) FROM items WHERE id = 1"},
		map[datasets.Dialect]string{datasets.Postgres: "SELECT name || '!' FROM items WHERE id = 1", datasets.MySQL: "SELECT CONCAT(name, '!') FROM items WHERE id = 1"}},
	{"challenging", year, year},
	{"moderate", all("SELECT name FROM items"), all("SELECT nope FROM items")},
	{"simple", all("SELECT name FROM items"), nil},
}

var year = map[datasets.Dialect]string{datasets.SQLite: "SELECT strftime('%Y', '2020-05-01')",
	datasets.Postgres: "SELECT to_char(DATE '2020-05-01', 'YYYY')", datasets.MySQL: "SELECT DATE_FORMAT('2020-05-01', '%Y')"}

// all is one gold or prediction for every dialect.
func all(sql string) map[datasets.Dialect]string {
	return map[datasets.Dialect]string{datasets.SQLite: sql, datasets.Postgres: sql, datasets.MySQL: sql}
}

// miniDevFiles are BIRD mini-dev's per-dialect question files.
var miniDevFiles = map[datasets.Dialect]string{datasets.SQLite: "mini_dev_sqlite.json",
	datasets.Postgres: "mini_dev_postgresql.json", datasets.MySQL: "mini_dev_mysql.json"}

// writeScoreMiniDev writes scoreTasks as a BIRD mini-dev folder on database dbID (writeShopDB's,
// at dev_databases/dbID/dbID.sqlite) with the question files of dialects; a task whose
// gold lacks a dialect is left out of that file. It returns the folder.
func writeScoreMiniDev(t *testing.T, dbID string, dialects ...datasets.Dialect) string {
	t.Helper()
	dir := t.TempDir()
	writeShopDB(t, filepath.Join(dir, "dev_databases", dbID, dbID+".sqlite"))
	for _, d := range dialects {
		recs := []map[string]any{}
		for i, task := range scoreTasks {
			if gold, ok := task.gold[d]; ok {
				recs = append(recs, map[string]any{"question_id": i, "db_id": dbID, "question": fmt.Sprintf("question %d", i),
					"evidence": "", "SQL": gold, "difficulty": task.diff})
			}
		}
		data, _ := json.Marshal(recs)
		if err := os.WriteFile(filepath.Join(dir, miniDevFiles[d]), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// writeScorePredictions writes the predictions of dialect d for dbID as a predict_dev.json in
// a folder of its own and returns its path.
func writeScorePredictions(t *testing.T, d datasets.Dialect, dbID string) string {
	t.Helper()
	preds := map[string]string{}
	for i, task := range scoreTasks {
		if sql, ok := task.pred[d]; ok {
			preds[fmt.Sprint(i)] = sql + evaluate.BIRDSeparator + dbID
		}
	}
	data, _ := json.Marshal(preds)
	path := filepath.Join(t.TempDir(), evaluate.PredictFile)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadServer copies the SQLite database at path into dialect d's test server as database (or
// schema) dbID and grants a reader of the test's own read access to it, as distill load does;
// it returns the DSN and the reader. Both are dropped when t ends. PostgreSQL: in a fresh
// database of t's own.
func loadServer(t *testing.T, d datasets.Dialect, path, dbID string) (dsn, reader string) {
	t.Helper()
	shared.SkipServers(t)
	ctx := context.Background()
	reader = fmt.Sprintf("cs_rd_sc%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	admin := shared.MySQLDSN()
	if d == datasets.Postgres {
		admin = shared.PostgresDSN()
	}
	t.Cleanup(func() { // after the database's drop below (cleanups run last first)
		if err := sandbox.DropReader(context.Background(), d, admin, reader); err != nil {
			t.Errorf("drop reader %s: %v", reader, err)
		}
	})
	switch d {
	case datasets.Postgres:
		var drop func()
		dsn, drop = pgtest.FreshDB(t, "cs_sc")
		t.Cleanup(drop)
	case datasets.MySQL:
		dsn = shared.MySQLDSN()
		my, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			defer my.Close()
			if _, err := my.Exec("DROP DATABASE IF EXISTS " + dbID); err != nil {
				t.Errorf("drop the mysql copy: %v", err)
			}
			my.Exec("DELETE FROM chainedsql_meta.copies WHERE target = ?", dbID)
		})
	}
	if _, err := sandbox.CopySQLite(ctx, path, d, dsn, dbID); err != nil {
		t.Fatalf("copy into %s (is the server running? set CHAINEDSQL_NO_SERVERS=1 to skip): %v", d, err)
	}
	if _, err := sandbox.EnsureReader(ctx, d, dsn, sandbox.ReaderSetup{Name: reader}, []string{dbID}); err != nil {
		t.Fatal(err)
	}
	return dsn, reader
}

// TestScoreServerDialects scores predictions written for PostgreSQL and for MariaDB on the
// server, as the reader: each task's gold for that dialect, the SQLite reference for the task
// with SQLite gold only (and without the SQLite file, that task unjudged and a warning); then
// student eval's predictions on the server, scored on the eval dir's dialect with no --dialect.
func TestScoreServerDialects(t *testing.T) {
	shared.SkipServers(t)
	for _, d := range []datasets.Dialect{datasets.Postgres, datasets.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			dbID := fmt.Sprintf("cs_sc%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
			dir := writeScoreMiniDev(t, dbID, datasets.SQLite, datasets.Postgres, datasets.MySQL)
			dsn, reader := loadServer(t, d, filepath.Join(dir, "dev_databases", dbID, dbID+".sqlite"), dbID)
			server := []string{"--" + map[datasets.Dialect]string{datasets.Postgres: "pg-dsn", datasets.MySQL: "mysql-dsn"}[d], dsn, "--reader", reader}
			spec := "minidev:" + dir
			preds := writeScorePredictions(t, d, dbID)

			jsonPath := filepath.Join(t.TempDir(), "items.json")
			args := append([]string{"score", "--predictions", preds, "--tasks", spec, "--dialect", string(d), "--json", jsonPath}, server...)
			code, out, errs := run(t, args...)
			want := "EX 50.00% (simple 50.00, moderate 33.33, challenging 100.00) (bird style, on " + string(d) + ")"
			if code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, "gold on the SQLite reference: 1 of 6,") ||
				!strings.Contains(out, "outcomes: error 1, missing 1, ok 4") || strings.Contains(out, "unjudged") || strings.Contains(errs, "WARNING") {
				t.Fatalf("exit %d\n%s\n%s\nwant %s", code, out, errs, want)
			}
			var rep evaluate.ScoreReport
			data, err := os.ReadFile(jsonPath)
			if err != nil || json.Unmarshal(data, &rep) != nil || len(rep.Items) != len(scoreTasks) {
				t.Fatalf("--json: %v %s", err, data)
			}
			if rep.Dialect != d {
				t.Errorf("report dialect %q", rep.Dialect)
			}
			for i, w := range []struct {
				correct     bool
				outcome     string
				goldDialect datasets.Dialect
			}{{true, "ok", ""}, {false, "ok", ""}, {true, "ok", datasets.SQLite}, {true, "ok", ""}, {false, "error", ""}, {false, "missing", ""}} {
				it := rep.Items[i]
				if it.Correct != w.correct || it.Outcome != w.outcome || it.GoldDialect != w.goldDialect || it.GoldError != "" {
					t.Errorf("item %d: correct %v outcome %q gold_dialect %q gold_error %q (%s), want %v %q %q", i, it.Correct, it.Outcome, it.GoldDialect, it.GoldError, it.Error, w.correct, w.outcome, w.goldDialect)
				}
			}

			// Without the SQLite file the task with SQLite gold only has no reference: a warning
			// at start, and it is unjudged.
			args = append([]string{"score", "--predictions", preds, "--tasks", spec, "--dialect", string(d), "--db-root", t.TempDir(), "--json", jsonPath}, server...)
			code, out, errs = run(t, args...)
			if code != 0 || !strings.HasPrefix(out, "EX 33.33%") || !strings.Contains(out, "unjudged: 1 of 6") ||
				!strings.Contains(errs, "WARNING: 1 of 1 tasks on "+string(d)+" have SQLite gold only and no SQLite database here") {
				t.Errorf("without the SQLite file: exit %d\n%s\n%s", code, out, errs)
			}
			var noRef evaluate.ScoreReport
			if data, err := os.ReadFile(jsonPath); err != nil || json.Unmarshal(data, &noRef) != nil || noRef.Items[2].GoldError == "" || noRef.Items[2].GoldDialect != "" {
				t.Errorf("without the SQLite file, item 2: %+v %v", noRef.Items[2], err)
			}

			// student eval on the server, then its predictions scored with no --dialect: on the
			// eval dir's. The oracle's answer to task 2 is its SQLite gold, which fails there.
			evalDir := filepath.Join(t.TempDir(), "eval")
			args = append([]string{"eval", "--policy", "oracle", "--tasks", spec, "--dialect", string(d), "--out", evalDir, "--progress", "off"}, server...)
			if code, out, errs := run(t, args...); code != 0 {
				t.Fatalf("eval: exit %d\n%s\n%s", code, out, errs)
			}
			args = append([]string{"score", "--predictions", filepath.Join(evalDir, evaluate.PredictFile), "--tasks", spec}, server...)
			code, out, errs = run(t, args...)
			if code != 0 || !strings.HasPrefix(out, "EX 83.33% (simple 100.00, moderate 66.67, challenging 100.00) (bird style, on "+string(d)+")") ||
				!strings.Contains(errs, "scoring on "+string(d)+", the dialect of the eval dir") {
				t.Errorf("eval dir's predictions: exit %d\n%s\n%s", code, out, errs)
			}
		})
	}
}

// TestScoreDialectErrors: a server dialect without its DSN (given, or the eval dir's), a
// dialect the tasks have no gold for and a server whose databases distill load has not loaded
// are each one error before any task is scored; --dialect other than the eval dir's warns.
func TestScoreDialectErrors(t *testing.T) {
	t.Setenv("CHAINEDSQL_PG_DSN", "")
	t.Setenv("CHAINEDSQL_MYSQL_DSN", "")
	dbID := "shop"
	lite := writeScoreMiniDev(t, dbID, datasets.SQLite)
	pgOnly := writeScoreMiniDev(t, dbID, datasets.Postgres)
	preds := writeScorePredictions(t, datasets.Postgres, dbID)
	// An eval dir's predictions: summary.json beside them says they were written on postgres.
	summary, _ := json.Marshal(evaluate.Summary{Policy: "oracle", Dialect: datasets.Postgres})
	if err := os.WriteFile(filepath.Join(filepath.Dir(preds), evaluate.SummaryFile), summary, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--tasks", "minidev:" + lite, "--dialect", "postgres"}, 2, []string{"dialect postgres needs --pg-dsn (or $CHAINEDSQL_PG_DSN)"}},
		{[]string{"--tasks", "minidev:" + lite}, 2, []string{"scoring on postgres, the dialect of the eval dir", "dialect postgres needs --pg-dsn"}},
		{[]string{"--tasks", "minidev:" + pgOnly, "--dialect", "mysql", "--mysql-dsn", "root@tcp(127.0.0.1:1)/"}, 1,
			[]string{"5 of 5 tasks have no gold SQL for mysql (task minidev/0 has gold for postgres only): score on postgres"}},
		{[]string{"--tasks", "minidev:" + pgOnly, "--dialect", "sqlite"}, 1, []string{"5 of 5 tasks have no gold SQL for sqlite"}},
		{[]string{"--tasks", "minidev:" + lite, "--dialect", "oracle"}, 2, []string{"want sqlite, postgres or mysql"}},
	} {
		code, out, errs := run(t, append([]string{"score", "--predictions", preds}, c.args...)...)
		for _, w := range c.want {
			if code != c.code || !strings.Contains(errs, w) || out != "" {
				t.Errorf("%v: exit %d, stdout %q, stderr %q, want exit %d and %q", c.args, code, out, errs, c.code, w)
			}
		}
	}
	// Scored on SQLite as --dialect says, with a warning.
	code, out, errs := run(t, "score", "--predictions", preds, "--tasks", "minidev:"+lite, "--dialect", "sqlite")
	if code != 0 || !strings.HasPrefix(out, "EX ") || !strings.Contains(out, "(bird style, on sqlite)") ||
		!strings.Contains(errs, "WARNING: "+preds+" was written on postgres (its eval dir's summary.json); scoring it on sqlite as --dialect says") {
		t.Errorf("--dialect sqlite on a postgres eval dir's predictions: exit %d\n%s\n%s", code, out, errs)
	}

	// Databases not loaded: the reader distill load makes does not exist.
	shared.SkipServers(t)
	for d, flags := range map[datasets.Dialect][]string{datasets.Postgres: {"--pg-dsn", shared.PostgresDSN()}, datasets.MySQL: {"--mysql-dsn", shared.MySQLDSN()}} {
		reader := fmt.Sprintf("cs_rd_none_%d", os.Getpid())
		args := append([]string{"score", "--predictions", preds, "--tasks", "minidev:" + lite, "--dialect", string(d), "--reader", reader}, flags...)
		code, out, errs := run(t, args...)
		if code != 1 || out != "" || !strings.Contains(errs, "distill load --dialect "+string(d)) || !strings.Contains(errs, reader) || !strings.Contains(errs, "nothing was run") {
			t.Errorf("%s not loaded: exit %d, stdout %q, stderr %q", d, code, out, errs)
		}
	}
}
