package sandbox

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/chainedsql/chainedsql/datasets"
)

// sqliteDialect is SQLite: the task's own file, opened read-only.
type sqliteDialect struct{}

func (sqliteDialect) Name() datasets.Dialect { return datasets.SQLite }
func (sqliteDialect) Engine() string         { return "SQLite" }
func (sqliteDialect) Server() *Server        { return nil }
func (sqliteDialect) Introspect(ctx context.Context, db DB) (*Schema, error) {
	return introspectSQLite(ctx, db)
}
func (sqliteDialect) QuoteIdent(name string) string { return QuoteWith(name, false, `"`) }
func (sqliteDialect) Screen() ScreenRules           { return sqliteScreen() }

func (sqliteDialect) Connect(_ context.Context, c *Connector) (Engine, error) {
	return sqliteEngine{root: c.SQLiteRoot}, nil
}

// sqliteEngine opens task files, under root when set; its runaways are the process's.
type sqliteEngine struct{ root string }

func (e sqliteEngine) Key(t datasets.Task) (string, error) {
	path := t.DBPath
	if e.root != "" {
		path = filepath.Join(e.root, t.DBID, t.DBID+".sqlite")
	}
	if path == "" {
		return "", fmt.Errorf("open sqlite database of task %s: no database path (set the db root)", t.ID)
	}
	return path, nil
}

func (e sqliteEngine) Open(_ context.Context, t datasets.Task) (DB, error) {
	path, err := e.Key(t)
	if err != nil {
		return nil, err
	}
	return OpenSQLite(path)
}

func (sqliteEngine) Runaways() Runaways {
	return Runaways{Total: sqliteRunawaysTotal.Load(), Running: sqliteRunawaysNow.Load()}
}

func (sqliteEngine) Close() error { return nil }
