package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/plural"
	"github.com/chainedsql/chainedsql/sandbox"
)

var loadCmd = &cli.Command{
	Name:    "load",
	Summary: "copy the tasks' SQLite databases into PostgreSQL or MySQL and create the reader statements run as",
	Help: `Copies the SQLite database of every distinct db_id of the tasks into PostgreSQL (schema =
db_id) or MySQL (database = db_id), where distill's Connector finds them, and creates or
updates the reader that statements run as, granted read access to each of them.`,
	Setup: setupLoad,
}

func setupLoad(fs *flag.FlagSet) cli.Func {
	tasks := cli.AddTasks(fs, cli.TaskOptions{Default: "sample", Limit: true, Note: "their databases are loaded"})
	dialect := cli.AddDialect(fs, "", "the server to load into (required)", serverDialects()...)
	dsn := fs.String("dsn", "", "DSN of the target server (required)")
	var reader string
	cli.AddReader(fs, &reader)
	readerHosts := fs.String("reader-hosts", strings.Join(sandbox.DefaultReaderHosts, ","), "mysql: comma-separated hosts the reader user is created for (the host this machine connects from must be one)")
	return func(ctx context.Context, c *cli.Call) error {
		d := dialect.One()
		if d == "" {
			return cli.Usagef("--dialect is required: want %s", sandbox.NameList(serverDialects(), " or "))
		}
		if *dsn == "" {
			return cli.Usagef("--dsn is required")
		}
		ts, err := tasks.Load()
		if err != nil {
			return err
		}
		return load(ctx, c.Stderr, ts, d, *dsn, reader, *readerHosts)
	}
}

// serverDialects are the registered dialects on a server: those distill load loads into.
func serverDialects() []datasets.Dialect {
	var out []datasets.Dialect
	for _, d := range sandbox.Dialects() {
		if d.Server() != nil {
			out = append(out, d.Name())
		}
	}
	return out
}

// load copies the databases of tasks into dialect d's server at dsn and sets up the reader.
func load(ctx context.Context, stderr io.Writer, tasks []datasets.Task, d datasets.Dialect, dsn, reader, readerHosts string) error {
	paths := map[string]string{}
	for _, t := range tasks {
		if t.DBPath == "" {
			return fmt.Errorf("task %s (db %s) has no SQLite database to copy", t.ID, t.DBID)
		}
		if p, ok := paths[t.DBID]; ok && p != t.DBPath {
			return fmt.Errorf("db_id %s names two SQLite files: %s and %s", t.DBID, p, t.DBPath)
		}
		paths[t.DBID] = t.DBPath
	}
	ids := make([]string, 0, len(paths))
	for id := range paths {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var hosts []string
	for _, h := range strings.Split(readerHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	setup := sandbox.ReaderSetup{Name: reader, Hosts: hosts}
	for i, id := range ids {
		st, err := sandbox.CopySQLite(ctx, paths[id], d, dsn, id)
		if err != nil {
			return fmt.Errorf("copying %s into %s: %w", id, d, err)
		}
		what := fmt.Sprintf("%s, %s, %d primary and %s", plural.Count(st.Tables, "table"), plural.Count(st.Rows, "row"), st.PrimaryKeys, plural.Count(st.ForeignKeys, "foreign key"))
		if st.Skipped {
			what = "already copied from this file, skipped"
		}
		fmt.Fprintf(stderr, "[%d/%d] %s → %s: %s in %s\n", i+1, len(ids), id, d, what, st.Duration.Round(time.Millisecond))
		for _, n := range st.Notes {
			fmt.Fprintf(stderr, "    note: %s\n", n)
		}
	}
	rep, err := sandbox.EnsureReader(ctx, d, dsn, setup, ids)
	if err != nil {
		return fmt.Errorf("the reader statements run as: %w", err)
	}
	what := "updated"
	if rep.Created {
		what = "created"
	}
	kind := "database"
	if dl, ok := sandbox.Lookup(d); ok && dl.Server() != nil {
		kind = dl.Server().Namespace
	}
	fmt.Fprintf(stderr, "reader %s %s: may read the %d loaded %s, nothing else (its password is kept on the server, in chainedsql_meta)\n", rep.Name, what, len(rep.Granted), plural.Noun(len(rep.Granted), kind))
	for _, c := range rep.Changes {
		fmt.Fprintf(stderr, "    reset: %s\n", c)
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(stderr, "    warning: %s\n", w)
	}
	return nil
}
