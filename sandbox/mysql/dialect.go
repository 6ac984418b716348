package mysql

import (
	"context"
	"fmt"
	"regexp"

	"github.com/go-sql-driver/mysql"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// readerHost is what a MySQL host part may be (names, addresses, % and _ wildcards).
var readerHost = regexp.MustCompile(`^[A-Za-z0-9_.%:-]{1,255}$`)

// Dialect is MySQL and MariaDB: one database per task database on the DSN's server.
type Dialect struct {
	// share caps an Engine's share of the server below the default (tests on a shared server);
	// 0: none.
	share int
}

// Name is the dialect's name (sandbox.Dialect).
func (Dialect) Name() datasets.Dialect { return datasets.MySQL }

// Engine is the engine's name for people and prompts.
func (Dialect) Engine() string { return "MySQL" }

// Server says how the dialect is reached: nil for a file engine.
func (Dialect) Server() *sandbox.Server {
	return &sandbox.Server{Flag: "mysql-dsn", Env: "CHAINEDSQL_MYSQL_DSN", Usage: "MySQL/MariaDB DSN in go-sql-driver form", Namespace: "database"}
}

// Introspect reads db's tables, columns and keys from the engine's catalog.
func (Dialect) Introspect(ctx context.Context, db sandbox.DB) (*sandbox.Schema, error) {
	return sandbox.IntrospectCatalog(ctx, db, mysqlCatalog)
}

// QuoteIdent quotes name as the engine reads it back, when it needs quoting.
func (Dialect) QuoteIdent(name string) string { return sandbox.QuoteWith(name, false, "`") }

// Screen is the engine's own refusals, applied after every engine's.
func (Dialect) Screen() sandbox.ScreenRules { return mysqlScreen() }

// Connect opens the Connector's share of the engine (sandbox.Dialect).
func (d Dialect) Connect(ctx context.Context, c *sandbox.Connector) (sandbox.Engine, error) {
	cfg, err := mysqlExecConfig(ctx, c.DSN[datasets.MySQL], c.Access)
	if err != nil {
		return nil, mysqlHourly(err) // the reader's login and checks count as its queries
	}
	srv, err := newMySQLServer(ctx, cfg, d.share)
	if err != nil {
		return nil, mysqlHourly(err)
	}
	return &mysqlEngine{cfg: cfg, srv: srv, acc: c.Access}, nil
}

// EnsureReader creates or resets the reader (sandbox.ReaderAdmin).
func (Dialect) EnsureReader(ctx context.Context, dsn, name string, setup sandbox.ReaderSetup, targets []string) (sandbox.ReaderReport, error) {
	hosts := setup.Hosts
	if hosts == nil {
		hosts = sandbox.DefaultReaderHosts
	}
	if len(hosts) == 0 {
		return sandbox.ReaderReport{Name: name}, fmt.Errorf("reader %s: no hosts to create the MySQL user for", name)
	}
	for _, h := range hosts {
		if !readerHost.MatchString(h) {
			return sandbox.ReaderReport{Name: name}, fmt.Errorf("reader %s: host %q: want a host name, an address or a %% pattern", name, h)
		}
	}
	return ensureMySQLReader(ctx, dsn, name, hosts, targets)
}

// DropReader removes the reader (sandbox.ReaderAdmin).
func (Dialect) DropReader(ctx context.Context, dsn, name string) error {
	return dropMySQLReader(ctx, dsn, name)
}

// DescribeDSNUser names the DSN's user and what it may do (sandbox.ReaderAdmin).
func (Dialect) DescribeDSNUser(ctx context.Context, dsn string) (string, error) {
	return describeMySQLUser(ctx, dsn)
}

// mysqlEngine is the login the Connector's MySQL DBs run as and their share of the server.
type mysqlEngine struct {
	cfg *mysql.Config
	srv *mysqlServer
	acc sandbox.Access
}

func (e *mysqlEngine) Key(t datasets.Task) (string, error) { return t.DBID, nil }
func (e *mysqlEngine) Open(ctx context.Context, t datasets.Task) (sandbox.DB, error) {
	db, err := openMySQLConfig(ctx, e.cfg, t.DBID, e.acc, e.srv)
	if err != nil {
		return nil, mysqlHourly(err)
	}
	return db, nil
}
func (e *mysqlEngine) Runaways() sandbox.Runaways { return e.srv.Runaways() }
func (e *mysqlEngine) Close() error               { return e.srv.close() }
