package sandbox

import (
	"context"

	"github.com/chainedsql/chainedsql/datasets"
)

// postgresDialect is PostgreSQL: one schema per task database in the DSN's database.
type postgresDialect struct{}

func (postgresDialect) Name() datasets.Dialect { return datasets.Postgres }
func (postgresDialect) Engine() string         { return "PostgreSQL" }
func (postgresDialect) Server() *Server {
	return &Server{Flag: "pg-dsn", Env: "CHAINEDSQL_PG_DSN", Usage: "PostgreSQL DSN (databases loaded with distill load)", Namespace: "schema"}
}
func (postgresDialect) Introspect(ctx context.Context, db DB) (*Schema, error) {
	return IntrospectCatalog(ctx, db, pgCatalog)
}
func (postgresDialect) QuoteIdent(name string) string { return QuoteWith(name, true, `"`) }
func (postgresDialect) Screen() ScreenRules           { return postgresScreen() }

func (postgresDialect) Connect(ctx context.Context, c *Connector) (Engine, error) {
	dsn := c.DSN[datasets.Postgres]
	srv, err := openPostgresServer(ctx, dsn, c.Access)
	if err != nil {
		return nil, err
	}
	return &postgresEngine{srv: srv, dsn: dsn, acc: c.Access}, nil
}

func (postgresDialect) EnsureReader(ctx context.Context, dsn, name string, _ ReaderSetup, targets []string) (ReaderReport, error) {
	return ensurePGReader(ctx, dsn, name, targets)
}
func (postgresDialect) DropReader(ctx context.Context, dsn, name string) error {
	return dropPGReader(ctx, dsn, name)
}
func (postgresDialect) DescribeDSNUser(ctx context.Context, dsn string) (string, error) {
	return describePGUser(ctx, dsn)
}

// postgresEngine is one server handle shared by the Connector's PostgreSQL DBs.
type postgresEngine struct {
	srv *pgServer
	dsn string
	acc Access
}

func (e *postgresEngine) Key(t datasets.Task) (string, error) { return t.DBID, nil }
func (e *postgresEngine) Open(ctx context.Context, t datasets.Task) (DB, error) {
	db, err := newPostgresDB(ctx, e.srv, e.dsn, t.DBID, e.acc)
	if err != nil {
		return nil, err
	}
	return db, nil
}
func (e *postgresEngine) Runaways() Runaways { return e.srv.runaways() }
func (e *postgresEngine) Close() error       { return e.srv.closeAll() }
