package postgres

import (
	"context"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// Dialect is PostgreSQL: one schema per task database in the DSN's database.
type Dialect struct {
	// slots caps an Engine's statement slots below the default (tests that fill them); 0: none.
	slots int
}

// Name is the dialect's name (sandbox.Dialect).
func (Dialect) Name() datasets.Dialect { return datasets.Postgres }

// Engine is the engine's name for people and prompts.
func (Dialect) Engine() string { return "PostgreSQL" }

// Server says how the dialect is reached: nil for a file engine.
func (Dialect) Server() *sandbox.Server {
	return &sandbox.Server{Flag: "pg-dsn", Env: "CHAINEDSQL_PG_DSN", Usage: "PostgreSQL DSN (databases loaded with distill load)", Namespace: "schema"}
}

// Introspect reads db's tables, columns and keys from the engine's catalog.
func (Dialect) Introspect(ctx context.Context, db sandbox.DB) (*sandbox.Schema, error) {
	return sandbox.IntrospectCatalog(ctx, db, pgCatalog)
}

// QuoteIdent quotes name as the engine reads it back, when it needs quoting.
func (Dialect) QuoteIdent(name string) string { return sandbox.QuoteWith(name, true, `"`) }

// Screen is the engine's own refusals, applied after every engine's.
func (Dialect) Screen() sandbox.ScreenRules { return postgresScreen() }

// Connect opens the Connector's share of the engine (sandbox.Dialect).
func (d Dialect) Connect(ctx context.Context, c *sandbox.Connector) (sandbox.Engine, error) {
	dsn := c.DSN[datasets.Postgres]
	srv, err := openPostgresServer(ctx, dsn, c.Access, d.slots)
	if err != nil {
		return nil, err
	}
	return &postgresEngine{srv: srv, dsn: dsn, acc: c.Access}, nil
}

// EnsureReader creates or resets the reader (sandbox.ReaderAdmin).
func (Dialect) EnsureReader(ctx context.Context, dsn, name string, _ sandbox.ReaderSetup, targets []string) (sandbox.ReaderReport, error) {
	return ensurePGReader(ctx, dsn, name, targets)
}

// DropReader removes the reader (sandbox.ReaderAdmin).
func (Dialect) DropReader(ctx context.Context, dsn, name string) error {
	return dropPGReader(ctx, dsn, name)
}

// DescribeDSNUser names the DSN's user and what it may do (sandbox.ReaderAdmin).
func (Dialect) DescribeDSNUser(ctx context.Context, dsn string) (string, error) {
	return describePGUser(ctx, dsn)
}

// postgresEngine is one server handle shared by the Connector's PostgreSQL DBs.
type postgresEngine struct {
	srv *pgServer
	dsn string
	acc sandbox.Access
}

func (e *postgresEngine) Key(t datasets.Task) (string, error) { return t.DBID, nil }
func (e *postgresEngine) Open(ctx context.Context, t datasets.Task) (sandbox.DB, error) {
	db, err := newPostgresDB(ctx, e.srv, e.dsn, t.DBID, e.acc)
	if err != nil {
		return nil, err
	}
	return db, nil
}
func (e *postgresEngine) Runaways() sandbox.Runaways { return e.srv.runaways() }
func (e *postgresEngine) Close() error               { return e.srv.closeAll() }
