package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// Dialect is SQLite: the task's own file, opened read-only.
type Dialect struct{}

// Name is the dialect's name (sandbox.Dialect).
func (Dialect) Name() datasets.Dialect { return datasets.SQLite }

// Engine is the engine's name for people and prompts.
func (Dialect) Engine() string { return "SQLite" }

// Server says how the dialect is reached: nil for a file engine.
func (Dialect) Server() *sandbox.Server { return nil }

// Introspect reads db's tables, columns and keys from the engine's catalog.
func (Dialect) Introspect(ctx context.Context, db sandbox.DB) (*sandbox.Schema, error) {
	return introspectSQLite(ctx, db)
}

// QuoteIdent quotes name as the engine reads it back, when it needs quoting.
func (Dialect) QuoteIdent(name string) string { return sandbox.QuoteWith(name, false, `"`) }

// Screen is the engine's own refusals, applied after every engine's.
func (Dialect) Screen() sandbox.ScreenRules { return sqliteScreen() }

// OpenSource opens the file at path for CopySQLite (Source).
func (Dialect) OpenSource(path string) (sandbox.DB, *sql.DB, error) {
	db, err := Open(path)
	if err != nil {
		return nil, nil, err
	}
	return db, db.(*sqliteDB).db, nil
}

// Connect opens the Connector's share of the engine (sandbox.Dialect).
func (Dialect) Connect(_ context.Context, c *sandbox.Connector) (sandbox.Engine, error) {
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

func (e sqliteEngine) Open(_ context.Context, t datasets.Task) (sandbox.DB, error) {
	path, err := e.Key(t)
	if err != nil {
		return nil, err
	}
	return Open(path)
}

func (sqliteEngine) Runaways() sandbox.Runaways {
	return sandbox.Runaways{Total: sqliteRunawaysTotal.Load(), Running: sqliteRunawaysNow.Load()}
}

func (sqliteEngine) Close() error { return nil }
