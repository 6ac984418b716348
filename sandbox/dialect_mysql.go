package sandbox

import (
	"context"
	"fmt"
	"regexp"

	"github.com/go-sql-driver/mysql"

	"github.com/chainedsql/chainedsql/datasets"
)

// readerHost is what a MySQL host part may be (names, addresses, % and _ wildcards).
var readerHost = regexp.MustCompile(`^[A-Za-z0-9_.%:-]{1,255}$`)

// mysqlDialect is MySQL and MariaDB: one database per task database on the DSN's server.
type mysqlDialect struct{}

func (mysqlDialect) Name() datasets.Dialect { return datasets.MySQL }
func (mysqlDialect) Engine() string         { return "MySQL" }
func (mysqlDialect) Server() *Server {
	return &Server{Flag: "mysql-dsn", Env: "CHAINEDSQL_MYSQL_DSN", Usage: "MySQL/MariaDB DSN in go-sql-driver form", Namespace: "database"}
}
func (mysqlDialect) Introspect(ctx context.Context, db DB) (*Schema, error) {
	return IntrospectCatalog(ctx, db, mysqlCatalog)
}
func (mysqlDialect) QuoteIdent(name string) string { return QuoteWith(name, false, "`") }
func (mysqlDialect) Screen() ScreenRules           { return mysqlScreen() }

func (mysqlDialect) Connect(ctx context.Context, c *Connector) (Engine, error) {
	cfg, err := mysqlExecConfig(ctx, c.DSN[datasets.MySQL], c.Access)
	if err != nil {
		return nil, err
	}
	srv, err := newMySQLServer(ctx, cfg, c.myShare)
	if err != nil {
		return nil, err
	}
	return &mysqlEngine{cfg: cfg, srv: srv, acc: c.Access}, nil
}

func (mysqlDialect) EnsureReader(ctx context.Context, dsn, name string, setup ReaderSetup, targets []string) (ReaderReport, error) {
	hosts := setup.Hosts
	if hosts == nil {
		hosts = DefaultReaderHosts
	}
	if len(hosts) == 0 {
		return ReaderReport{Name: name}, fmt.Errorf("reader %s: no hosts to create the MySQL user for", name)
	}
	for _, h := range hosts {
		if !readerHost.MatchString(h) {
			return ReaderReport{Name: name}, fmt.Errorf("reader %s: host %q: want a host name, an address or a %% pattern", name, h)
		}
	}
	return ensureMySQLReader(ctx, dsn, name, hosts, targets)
}
func (mysqlDialect) DropReader(ctx context.Context, dsn, name string) error {
	return dropMySQLReader(ctx, dsn, name)
}
func (mysqlDialect) DescribeDSNUser(ctx context.Context, dsn string) (string, error) {
	return describeMySQLUser(ctx, dsn)
}

// mysqlEngine is the login the Connector's MySQL DBs run as and their share of the server.
type mysqlEngine struct {
	cfg *mysql.Config
	srv *mysqlServer
	acc Access
}

func (e *mysqlEngine) Key(t datasets.Task) (string, error) { return t.DBID, nil }
func (e *mysqlEngine) Open(ctx context.Context, t datasets.Task) (DB, error) {
	db, err := openMySQLConfig(ctx, e.cfg, t.DBID, e.acc, e.srv)
	if err != nil {
		return nil, err
	}
	return db, nil
}
func (e *mysqlEngine) Runaways() Runaways { return e.srv.Runaways() }
func (e *mysqlEngine) Close() error       { return e.srv.close() }
