// Package fakedb is a dialect made the way a new one is: one package implementing
// sandbox.Dialect through sandbox's exported API alone, and one registration line
// (sandbox.Register(fakedb.Dialect{})). Its tests run the runner over it (distill.Run through a
// sandbox.Connector), which is what docs/DESIGN.md promises of a new dialect.
//
// FakeDB is a "server" that is a directory (the DSN) holding one SQLite file per task database
// (DSN/<db_id>.sqlite), read through database/sql with mattn/go-sqlite3, its catalog read with
// SQLite's pragma functions, one refusal of its own in the screen (the word fakesecret), and a
// copy target for distill load (copy.go: sandbox.Loader).
package fakedb

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// Name is the dialect's name.
const Name datasets.Dialect = "fakedb"

// Dialect is FakeDB.
type Dialect struct{}

// Name is "fakedb".
func (Dialect) Name() datasets.Dialect { return Name }

// Engine is "FakeDB".
func (Dialect) Engine() string { return "FakeDB" }

// Server names the --fake-dsn flag: FakeDB is reached through a DSN (a directory).
func (Dialect) Server() *sandbox.Server {
	return &sandbox.Server{Flag: "fake-dsn", Env: "CHAINEDSQL_FAKE_DSN", Usage: "FakeDB directory", Namespace: "database"}
}

// catalog reads the tables' columns and primary keys with SQLite's pragma functions.
var catalog = sandbox.Catalog{
	Columns: `SELECT m.name, p.name, p.type, p."notnull" = 1 FROM sqlite_master m, pragma_table_info(m.name) p
		WHERE m.type = 'table' ORDER BY m.name, p.cid`,
	Keys: `SELECT m.name, 'pk', 'p', p.name, NULL, NULL FROM sqlite_master m, pragma_table_info(m.name) p
		WHERE m.type = 'table' AND p.pk > 0 ORDER BY m.name, p.pk`,
}

// Introspect reads db's tables through its own Exec.
func (Dialect) Introspect(ctx context.Context, db sandbox.DB) (*sandbox.Schema, error) {
	return sandbox.IntrospectCatalog(ctx, db, catalog)
}

// QuoteIdent quotes as SQLite does.
func (Dialect) QuoteIdent(name string) string { return sandbox.QuoteWith(name, false, `"`) }

// Screen refuses the word fakesecret, on FakeDB only.
func (Dialect) Screen() sandbox.ScreenRules {
	return sandbox.ScreenRules{Word: func(w string) string {
		if w == "fakesecret" {
			return "refused: fakesecret is FakeDB's"
		}
		return ""
	}}
}

// Connect returns the Connector's share of FakeDB: the directory of its DSN.
func (Dialect) Connect(_ context.Context, c *sandbox.Connector) (sandbox.Engine, error) {
	dir := c.DSN[Name]
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("fakedb %s: not a directory", dir)
	}
	return &engine{dir: dir}, nil
}

// engine opens the task databases of one directory.
type engine struct {
	dir     string
	timeout atomic.Int64
}

func (e *engine) Key(t datasets.Task) (string, error) { return t.DBID, nil }

func (e *engine) Open(ctx context.Context, t datasets.Task) (sandbox.DB, error) {
	path := filepath.Join(e.dir, t.DBID+".sqlite")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("fakedb: database %s: %w", t.DBID, err)
	}
	pool, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&immutable=1")
	if err != nil {
		return nil, err
	}
	return &db{pool: pool, eng: e}, nil
}

// Runaways counts the statements stopped at their deadline (FakeDB's statements end there).
func (e *engine) Runaways() sandbox.Runaways { return sandbox.Runaways{Total: e.timeout.Load()} }

func (e *engine) Close() error { return nil }

// db is one task database of FakeDB.
type db struct {
	pool *sql.DB
	eng  *engine
}

func (d *db) Dialect() datasets.Dialect { return Name }
func (d *db) Version() string           { return "FakeDB 1" }
func (d *db) Close() error              { return d.pool.Close() }

// Exec follows sandbox.StartExec's contract: screened, within the deadline, rows by Collect.
func (d *db) Exec(ctx context.Context, query string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	start := time.Now()
	stmt, timeout, refused := sandbox.StartExec(query, Name, opts)
	if refused != nil {
		return refused, nil
	}
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := sandbox.Collect(qctx, d.pool, stmt, opts, nil, nil)
	res.Duration = time.Since(start)
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case qctx.Err() != nil:
		d.eng.timeout.Add(1)
		return sandbox.TimedOut(timeout, res.Duration), nil
	case sandbox.IsTooLarge(err):
		return sandbox.TooLarge(res), nil
	}
	return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: err.Error(), Duration: res.Duration}, nil
}
