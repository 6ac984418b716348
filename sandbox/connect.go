package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/chainedsql/chainedsql/datasets"
)

// Connector opens task databases per dialect and keeps one DB per (dialect, database), through
// each dialect's Engine (Dialect.Connect): SQLite tasks open Task.DBPath; PostgreSQL uses
// schema = db_id inside the database of DSN["postgres"]; MySQL uses database = db_id on the
// server of DSN["mysql"].
type Connector struct {
	// DSN holds each server dialect's DSN by name.
	DSN map[datasets.Dialect]string
	// SQLiteRoot overrides the directory holding <db>/<db>.sqlite, when set.
	SQLiteRoot string
	// Access says whom statements run as on the servers: by default the reader EnsureReader
	// made (DefaultReader), whose password the DSNs' users look up; see Access.
	Access Access

	mu      sync.Mutex
	dbs     map[string]DB
	engines map[datasets.Dialect]Engine
}

// Open returns the task's database in dialect d. The Connector owns the returned DB; callers
// must not Close it (Connector.Close does). The first Open of a dialect connects its Engine
// (Dialect.Connect), which the dialect's DBs share: on PostgreSQL one server handle with a cap
// on the statements in flight, on MySQL one share of the server's max_connections. On a server, the first Open looks up and checks the reader (errors wrap
// ErrReader when it is missing or holds more than reads) and each Open checks that the reader
// may read the task's schema or database.
func (c *Connector) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (DB, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dl, ok := Lookup(d)
	if !ok {
		return nil, fmt.Errorf("open database of task %s: unknown dialect %q (want %s)", t.ID, d, NameList(Names(), " or "))
	}
	if srv := dl.Server(); srv != nil {
		if t.DBID == "" {
			return nil, fmt.Errorf("open %s database of task %s: the task has no db_id", d, t.ID)
		}
		if c.DSN[d] == "" {
			return nil, fmt.Errorf("open %s database %s of task %s: no %s DSN configured", d, t.DBID, t.ID, d)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	eng := c.engines[d]
	if eng == nil {
		var err error
		if eng, err = dl.Connect(ctx, c); err != nil {
			return nil, fmt.Errorf("task %s: %w", t.ID, err)
		}
		if c.engines == nil {
			c.engines = map[datasets.Dialect]Engine{}
		}
		c.engines[d] = eng
	}
	name, err := eng.Key(t)
	if err != nil {
		return nil, err
	}
	key := string(d) + "\x00" + name
	if db, ok := c.dbs[key]; ok {
		return db, nil
	}
	db, err := eng.Open(ctx, t)
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
	eng := c.engines[d]
	c.mu.Unlock()
	if eng == nil {
		if dl, ok := Lookup(d); ok && dl.Server() == nil {
			// A file engine counts per process: ask a fresh share of it.
			if e, err := dl.Connect(context.Background(), c); err == nil {
				defer e.Close()
				return e.Runaways()
			}
		}
		return Runaways{}
	}
	return eng.Runaways()
}

// DSNUserWarnings returns, when c.Access.AsDSNUser, a warning for each server dialect of
// dialects naming the DSN's user the statements run as and what it may do; nil otherwise.
func (c *Connector) DSNUserWarnings(ctx context.Context, dialects []datasets.Dialect) []string {
	if !c.Access.AsDSNUser {
		return nil
	}
	var out []string
	for _, d := range dialects {
		if dl, ok := Lookup(d); ok && dl.Server() != nil && c.DSN[d] != "" {
			out = append(out, asDSNUserWarning(ctx, d, c.DSN[d]))
		}
	}
	return out
}

// Close closes every DB and Engine the Connector opened.
func (c *Connector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for k, db := range c.dbs {
		errs = append(errs, db.Close())
		delete(c.dbs, k)
	}
	for d, e := range c.engines {
		errs = append(errs, e.Close())
		delete(c.engines, d)
	}
	return errors.Join(errs...)
}
