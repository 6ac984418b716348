package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
)

// runLoad copies the SQLite database of every distinct db_id of a task spec into PostgreSQL
// (schema = db_id) or MySQL (database = db_id), where distill's Connector finds them, and
// creates or updates the reader that statements run as, granted read access to each of them.
func runLoad(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("distill load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	taskSpec := fs.String("tasks", "sample", "tasks whose databases to load: sample, bird:PATH, minidev:PATH, spider:PATH")
	dbRoot := fs.String("db-root", "", "directory holding <db>/<db>.sqlite, overriding the task file's")
	dialect := fs.String("dialect", "", "target: postgres or mysql")
	dsn := fs.String("dsn", "", "DSN of the target server")
	limit := fs.Int("limit", 0, "only the databases of the first N tasks (0 = all)")
	reader := fs.String("reader", envOr("CHAINEDSQL_READER", datasets.DefaultReader), "role (postgres) or user (mysql) created or updated to run the statements as, granted read access to the loaded databases; default $CHAINEDSQL_READER or "+datasets.DefaultReader)
	readerHosts := fs.String("reader-hosts", strings.Join(datasets.DefaultReaderHosts, ","), "mysql: comma-separated hosts the reader user is created for (the host this machine connects from must be one)")
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
	var hosts []string
	for _, h := range strings.Split(*readerHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	setup := datasets.ReaderSetup{Name: *reader, Hosts: hosts}
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
	rep, err := datasets.EnsureReader(ctx, d, *dsn, setup, ids)
	if err != nil {
		return fail(fmt.Errorf("the reader statements run as: %w", err))
	}
	what := "updated"
	if rep.Created {
		what = "created"
	}
	kind := map[datasets.Dialect]string{datasets.Postgres: "schema", datasets.MySQL: "database"}[d]
	if len(rep.Granted) != 1 {
		kind += "s"
	}
	fmt.Fprintf(stderr, "reader %s %s: may read the %d loaded %s, nothing else (its password is kept on the server, in chainedsql_meta)\n", rep.Name, what, len(rep.Granted), kind)
	for _, c := range rep.Changes {
		fmt.Fprintf(stderr, "    reset: %s\n", c)
	}
	return 0
}
