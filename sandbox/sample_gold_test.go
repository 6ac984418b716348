package sandbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/datasets/sample"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/sqlite"
)

// sampleTasks loads the sample into a fresh db root.
func sampleTasks(t *testing.T) []datasets.Task {
	t.Helper()
	tasks, err := datasets.LoadTasks(datasets.SpecSample, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

// sqliteGold runs every task's SQLite gold on its database and returns the results by task ID.
func sqliteGold(t *testing.T, tasks []datasets.Task) map[string]*sandbox.Result {
	t.Helper()
	ctx := context.Background()
	dbs := map[string]sandbox.DB{}
	defer func() {
		for _, db := range dbs {
			db.Close()
		}
	}()
	out := map[string]*sandbox.Result{}
	for _, task := range tasks {
		db, ok := dbs[task.DBPath]
		if !ok {
			var err error
			if db, err = sqlite.Open(task.DBPath); err != nil {
				t.Fatal(err)
			}
			dbs[task.DBPath] = db
		}
		res, err := db.Exec(ctx, task.Gold[datasets.SQLite], sandbox.ExecOptions{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("%s: %v", task.ID, err)
		}
		out[task.ID] = res
	}
	return out
}

func TestSampleGoldRunsOnSQLite(t *testing.T) {
	tasks := sampleTasks(t)
	results := sqliteGold(t, tasks)
	for _, task := range tasks {
		res := results[task.ID]
		if !res.OK() {
			t.Errorf("%s: %s gold failed: %s %s\n%s", task.ID, datasets.SQLite, res.Outcome, res.Error, task.Gold[datasets.SQLite])
			continue
		}
		if res.Total == 0 {
			t.Errorf("%s: gold returns no rows\n%s", task.ID, task.Gold[datasets.SQLite])
			continue
		}
		// A real answer: some cell is neither NULL nor zero.
		blank := true
		for _, row := range res.Rows {
			for _, v := range row {
				if k := judge.RowKey([]any{v}); k != judge.RowKey([]any{nil}) && k != judge.RowKey([]any{int64(0)}) {
					blank = false
				}
			}
		}
		if blank {
			t.Errorf("%s: gold answer is only NULLs or zeros: %v\n%s", task.ID, res.Rows, task.Gold[datasets.SQLite])
		}
	}
}

// sampleEngine runs the sample's scripts and gold queries in one server dialect.
type sampleEngine struct {
	// setup creates an empty namespace (schema or database) for db, runs script in it and
	// returns its name and a query function over it; the namespace is dropped in cleanup.
	setup func(t *testing.T, ctx context.Context, db, script string) (string, func(ctx context.Context, q string) (*sandbox.Result, error))
}

// sampleNamespace is a schema or database name for db that no other test run uses.
func sampleNamespace(db string) string {
	return fmt.Sprintf("csql_sample_%s_%d_%d", db, os.Getpid(), rand.Uint32())
}

var samplePostgres = sampleEngine{setup: func(t *testing.T, ctx context.Context, db, script string) (string, func(context.Context, string) (*sandbox.Result, error)) {
	conn, err := pgx.Connect(ctx, shared.PostgresDSN())
	if err != nil {
		t.Fatalf("postgres %s: %v (set CHAINEDSQL_NO_SERVERS to skip)", shared.PostgresDSN(), err)
	}
	schema := sampleNamespace(db)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		conn.Close(ctx)
	})
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema+"; SET search_path TO "+schema); err != nil {
		t.Fatalf("postgres schema %s: %v", schema, err)
	}
	if _, err := conn.Exec(ctx, script); err != nil {
		t.Fatalf("postgres: script of %s: %v", db, err)
	}
	return schema, func(ctx context.Context, q string) (*sandbox.Result, error) {
		rows, err := conn.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		res := &sandbox.Result{Outcome: sandbox.OutcomeOK}
		for _, f := range rows.FieldDescriptions() {
			res.Columns = append(res.Columns, f.Name)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return nil, err
			}
			for i, v := range vals {
				if vals[i], err = samplePGValue(v); err != nil {
					return nil, fmt.Errorf("column %s: %w", res.Columns[i], err)
				}
			}
			res.Rows = append(res.Rows, vals)
			res.Total++
		}
		return res, rows.Err()
	}
}}

// samplePGValue maps pgx's decoded values onto Result's value types.
func samplePGValue(v any) (any, error) {
	switch x := v.(type) {
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case float32:
		return float64(x), nil
	case pgtype.Numeric:
		if !x.Valid {
			return nil, nil
		}
		f, err := x.Float64Value()
		if err != nil {
			return nil, err
		}
		return f.Float64, nil
	}
	return sandbox.Normalise(v), nil
}

var sampleMySQL = sampleEngine{setup: func(t *testing.T, ctx context.Context, db, script string) (string, func(context.Context, string) (*sandbox.Result, error)) {
	cfg, err := mysql.ParseDSN(shared.MySQLDSN())
	if err != nil {
		t.Fatalf("mysql dsn %s: %v", shared.MySQLDSN(), err)
	}
	cfg.MultiStatements = true
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	name := sampleNamespace(db)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		admin.Close()
		t.Fatalf("mysql %s: create database %s: %v (set CHAINEDSQL_NO_SERVERS to skip)", shared.MySQLDSN(), name, err)
	}
	cfg.DBName = name
	conn, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
		admin.Close()
	})
	if _, err := conn.ExecContext(ctx, script); err != nil {
		t.Fatalf("mysql: script of %s: %v", db, err)
	}
	return name, func(ctx context.Context, q string) (*sandbox.Result, error) {
		rows, err := conn.QueryContext(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		types, err := rows.ColumnTypes()
		if err != nil {
			return nil, err
		}
		res := &sandbox.Result{Outcome: sandbox.OutcomeOK}
		for _, c := range types {
			res.Columns = append(res.Columns, c.Name())
		}
		for rows.Next() {
			vals := make([]any, len(types))
			ptrs := make([]any, len(types))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return nil, err
			}
			for i, v := range vals {
				if vals[i], err = sampleMySQLValue(types[i].DatabaseTypeName(), v); err != nil {
					return nil, fmt.Errorf("column %s: %w", res.Columns[i], err)
				}
			}
			res.Rows = append(res.Rows, vals)
			res.Total++
		}
		return res, rows.Err()
	}
}}

// sampleMySQLValue maps go-sql-driver's text-protocol values onto Result's value types: DECIMAL
// text becomes a number, other text a string.
func sampleMySQLValue(typ string, v any) (any, error) {
	b, ok := v.([]byte)
	if !ok {
		return sandbox.Normalise(v), nil
	}
	if typ == "DECIMAL" {
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return nil, fmt.Errorf("DECIMAL %q: %w", b, err)
		}
		return f, nil
	}
	return string(b), nil
}

// TestSampleGoldAgreesAcrossEngines builds every sample database in PostgreSQL (a schema per db)
// and MariaDB/MySQL (a database per db) from the same scripts and checks that each dialect's gold
// answers what the SQLite gold answers, ordered when the SQLite gold has ORDER BY.
func TestSampleGoldAgreesAcrossEngines(t *testing.T) {
	shared.SkipServers(t)
	tasks := sampleTasks(t)
	want := sqliteGold(t, tasks)
	for _, e := range []struct {
		dialect datasets.Dialect
		engine  sampleEngine
	}{{datasets.Postgres, samplePostgres}, {datasets.MySQL, sampleMySQL}} {
		t.Run(string(e.dialect), func(t *testing.T) {
			for _, db := range sample.Databases() {
				t.Run(db, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					script, err := sample.Script(db)
					if err != nil {
						t.Fatal(err)
					}
					_, query := e.engine.setup(t, ctx, db, script)
					for _, task := range tasks {
						if task.DBID != db {
							continue
						}
						gold := task.Gold[e.dialect]
						got, err := query(ctx, gold)
						if err != nil {
							t.Errorf("%s: %s gold failed: %v\n%s", task.ID, e.dialect, err, gold)
							continue
						}
						ordered := judge.HasOrderBy(task.Gold[datasets.SQLite])
						if !judge.Match(want[task.ID], got, ordered) {
							t.Errorf("%s: %s gold answers differently (ordered %v)\nsqlite: %v\n%s: %v\n%s",
								task.ID, e.dialect, ordered, want[task.ID].Rows, e.dialect, got.Rows, gold)
						}
					}
				})
			}
		})
	}
}
