package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
)

// runLoad copies the SQLite database of every distinct db_id of a task spec into PostgreSQL
// (schema = db_id) or MySQL (database = db_id), where distill's Connector finds them.
func runLoad(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("distill load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	taskSpec := fs.String("tasks", "sample", "tasks whose databases to load: sample, bird:PATH, minidev:PATH, spider:PATH")
	dbRoot := fs.String("db-root", "", "directory holding <db>/<db>.sqlite, overriding the task file's")
	dialect := fs.String("dialect", "", "target: postgres or mysql")
	dsn := fs.String("dsn", "", "DSN of the target server")
	limit := fs.Int("limit", 0, "only the databases of the first N tasks (0 = all)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "distill load: %v\n", err)
		return 1
	}
	d := datasets.Dialect(*dialect)
	if d != datasets.Postgres && d != datasets.MySQL {
		return fail(fmt.Errorf("--dialect %q: want postgres or mysql", *dialect))
	}
	if *dsn == "" {
		return fail(fmt.Errorf("--dsn is required"))
	}
	tasks, err := datasets.LoadTasks(*taskSpec, *dbRoot)
	if err != nil {
		return fail(fmt.Errorf("tasks %s: %w", *taskSpec, err))
	}
	if *limit > 0 && *limit < len(tasks) {
		tasks = tasks[:*limit]
	}
	paths := map[string]string{}
	for _, t := range tasks {
		if t.DBPath == "" {
			return fail(fmt.Errorf("task %s (db %s) has no SQLite database to copy", t.ID, t.DBID))
		}
		if p, ok := paths[t.DBID]; ok && p != t.DBPath {
			return fail(fmt.Errorf("db_id %s names two SQLite files: %s and %s", t.DBID, p, t.DBPath))
		}
		paths[t.DBID] = t.DBPath
	}
	ids := make([]string, 0, len(paths))
	for id := range paths {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for i, id := range ids {
		st, err := datasets.CopySQLite(ctx, paths[id], d, *dsn, id)
		if err != nil {
			return fail(fmt.Errorf("copying %s into %s: %w", id, d, err))
		}
		what := fmt.Sprintf("%d tables, %d rows, %d primary and %d foreign keys", st.Tables, st.Rows, st.PrimaryKeys, st.ForeignKeys)
		if st.Skipped {
			what = "already copied from this file, skipped"
		}
		fmt.Fprintf(stderr, "[%d/%d] %s → %s: %s in %s\n", i+1, len(ids), id, d, what, st.Duration.Round(time.Millisecond))
		for _, n := range st.Notes {
			fmt.Fprintf(stderr, "    note: %s\n", n)
		}
	}
	return 0
}
