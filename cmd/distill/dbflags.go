package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
)

// dbFlags are the database flags of distill and distill env serve.
type dbFlags struct {
	root, pgDSN, myDSN, reader *string
	asDSNUser                  *bool
}

func addDBFlags(fs *flag.FlagSet) *dbFlags {
	return &dbFlags{
		root:      fs.String("db-root", "", "directory holding <db>/<db>.sqlite, overriding the task file's"),
		pgDSN:     fs.String("pg-dsn", os.Getenv("CHAINEDSQL_PG_DSN"), "PostgreSQL DSN (databases loaded with distill load); default $CHAINEDSQL_PG_DSN"),
		myDSN:     fs.String("mysql-dsn", os.Getenv("CHAINEDSQL_MYSQL_DSN"), "MySQL/MariaDB DSN in go-sql-driver form; default $CHAINEDSQL_MYSQL_DSN"),
		reader:    fs.String("reader", envOr("CHAINEDSQL_READER", datasets.DefaultReader), "role/user (made by distill load) the statements run as on the servers; the DSNs' users only look up its password; default $CHAINEDSQL_READER or "+datasets.DefaultReader),
		asDSNUser: fs.Bool("exec-as-dsn-user", false, "run the statements as the DSNs' own users instead of the reader: UNSAFE unless you made those users read-only yourself"),
	}
}

// connect returns the flags' Connector after checking that each server dialect has its DSN and
// opening every task database once in each dialect (distill.CheckDatabases); it prints the
// warnings of --exec-as-dsn-user to stderr after prog. The caller closes the Connector.
func (f *dbFlags) connect(ctx context.Context, tasks []datasets.Task, dialects []datasets.Dialect, stderr io.Writer, prog string) (*datasets.Connector, error) {
	conn := &datasets.Connector{PostgresDSN: *f.pgDSN, MySQLDSN: *f.myDSN, SQLiteRoot: *f.root,
		Access: datasets.Access{Reader: *f.reader, AsDSNUser: *f.asDSNUser}}
	for _, d := range dialects {
		if d == datasets.Postgres && conn.PostgresDSN == "" {
			return nil, errors.New("dialect postgres needs --pg-dsn (or $CHAINEDSQL_PG_DSN)")
		}
		if d == datasets.MySQL && conn.MySQLDSN == "" {
			return nil, errors.New("dialect mysql needs --mysql-dsn (or $CHAINEDSQL_MYSQL_DSN)")
		}
	}
	if err := distill.CheckDatabases(ctx, conn, tasks, dialects); err != nil {
		conn.Close()
		return nil, err
	}
	for _, w := range conn.DSNUserWarnings(ctx, dialects) {
		fmt.Fprintf(stderr, "%s: WARNING: %s\n", prog, w)
	}
	return conn, nil
}
