package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/chainedsql/chainedsql/datasets"
)

// Connector opens task databases per dialect and keeps one pool per (dialect, database).
// SQLite tasks open Task.DBPath; PostgreSQL uses schema = db_id inside the database of
// PostgresDSN; MySQL uses database = db_id on the server of MySQLDSN.
type Connector struct {
	PostgresDSN string
	MySQLDSN    string
	// SQLiteRoot overrides the directory holding <db>/<db>.sqlite, when set.
	SQLiteRoot string
	// Access says whom statements run as on the servers: by default the reader EnsureReader
	// made (DefaultReader), whose password the DSNs' users look up; see Access.
	Access Access

	mu    sync.Mutex
	dbs   map[string]DB
	pgSrv *pgServer     // shared by the PostgreSQL DBs
	myCfg *mysql.Config // the MySQL login statements run as, resolved once
	mySrv *mysqlServer  // the MySQL server's share of connections, across databases
	// myShare caps the MySQL share below the server's (tests on a shared server); 0: none.
	myShare int
}

// Open returns the task's database in dialect d. The Connector owns the returned DB; callers
// must not Close it (Connector.Close does). PostgreSQL databases of one Connector share one
// server handle, at most pgMaxStatements statements in flight (each execution sets its
// search_path); MySQL gets a pool per database, all within one share of the server's
// max_connections (mysqlServer). On a server, the first Open looks up
// and checks the reader (errors wrap ErrReader when it is missing or holds more than reads) and
// each Open checks that the reader may read the task's schema or database.
func (c *Connector) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (DB, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var name string // the SQLite path, or the db_id on a server
	switch d {
	case datasets.SQLite:
		path := t.DBPath
		if c.SQLiteRoot != "" {
			path = filepath.Join(c.SQLiteRoot, t.DBID, t.DBID+".sqlite")
		}
		if path == "" {
			return nil, fmt.Errorf("open sqlite database of task %s: no database path (set the db root)", t.ID)
		}
		name = path
	case datasets.Postgres, datasets.MySQL:
		if t.DBID == "" {
			return nil, fmt.Errorf("open %s database of task %s: the task has no db_id", d, t.ID)
		}
		if d == datasets.Postgres && c.PostgresDSN == "" || d == datasets.MySQL && c.MySQLDSN == "" {
			return nil, fmt.Errorf("open %s database %s of task %s: no %s DSN configured", d, t.DBID, t.ID, d)
		}
		name = t.DBID
	default:
		return nil, fmt.Errorf("open database of task %s: unknown dialect %q (want sqlite, postgres or mysql)", t.ID, d)
	}
	key := string(d) + "\x00" + name
	c.mu.Lock()
	defer c.mu.Unlock()
	if db, ok := c.dbs[key]; ok {
		return db, nil
	}
	var (
		db  DB
		err error
	)
	switch d {
	case datasets.SQLite:
		db, err = OpenSQLite(name)
	case datasets.Postgres:
		if c.pgSrv == nil {
			if c.pgSrv, err = openPostgresServer(ctx, c.PostgresDSN, c.Access); err != nil {
				return nil, fmt.Errorf("task %s: %w", t.ID, err)
			}
		}
		db, err = newPostgresDB(ctx, c.pgSrv, c.PostgresDSN, t.DBID, c.Access)
	case datasets.MySQL:
		if c.myCfg == nil {
			if c.myCfg, err = mysqlExecConfig(ctx, c.MySQLDSN, c.Access); err != nil {
				return nil, fmt.Errorf("task %s: %w", t.ID, err)
			}
		}
		if c.mySrv == nil {
			if c.mySrv, err = newMySQLServer(ctx, c.myCfg, c.myShare); err != nil {
				return nil, fmt.Errorf("task %s: %w", t.ID, err)
			}
		}
		db, err = openMySQLConfig(ctx, c.myCfg, t.DBID, c.Access, c.mySrv)
	}
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.ID, err)
	}
	if c.dbs == nil {
		c.dbs = map[string]DB{}
	}
	c.dbs[key] = db
	return db, nil
}

// Runaways returns the statements of dialect d that outlived their deadline and what should
// have stopped them there (see Runaways): on the servers, those of this Connector (zero before
// its first Open of d); on SQLite, those of the process.
func (c *Connector) Runaways(d datasets.Dialect) Runaways {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case d == datasets.SQLite:
		return Runaways{Total: sqliteRunawaysTotal.Load(), Running: sqliteRunawaysNow.Load()}
	case d == datasets.Postgres && c.pgSrv != nil:
		return c.pgSrv.runaways()
	case d == datasets.MySQL && c.mySrv != nil:
		return c.mySrv.Runaways()
	}
	return Runaways{}
}

// DSNUserWarnings returns, when c.Access.AsDSNUser, a warning for each server dialect of
// dialects naming the DSN's user the statements run as and what it may do; nil otherwise.
func (c *Connector) DSNUserWarnings(ctx context.Context, dialects []datasets.Dialect) []string {
	if !c.Access.AsDSNUser {
		return nil
	}
	var out []string
	for _, d := range dialects {
		switch {
		case d == datasets.Postgres && c.PostgresDSN != "":
			out = append(out, asDSNUserWarning(ctx, d, c.PostgresDSN))
		case d == datasets.MySQL && c.MySQLDSN != "":
			out = append(out, asDSNUserWarning(ctx, d, c.MySQLDSN))
		}
	}
	return out
}

// Close closes every pool the Connector opened.
func (c *Connector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for k, db := range c.dbs {
		errs = append(errs, db.Close())
		delete(c.dbs, k)
	}
	if c.pgSrv != nil {
		errs = append(errs, c.pgSrv.closeAll())
		c.pgSrv = nil
	}
	if c.mySrv != nil {
		errs = append(errs, c.mySrv.close())
		c.mySrv = nil
	}
	return errors.Join(errs...)
}
