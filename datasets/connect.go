package datasets

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
)

// Connector opens task databases per dialect and keeps one pool per (dialect, database).
// SQLite tasks open Task.DBPath; PostgreSQL uses schema = db_id inside the database of
// PostgresDSN; MySQL uses database = db_id on the server of MySQLDSN.
type Connector struct {
	PostgresDSN string
	MySQLDSN    string
	// SQLiteRoot overrides the directory holding <db>/<db>.sqlite, when set.
	SQLiteRoot string

	mu  sync.Mutex
	dbs map[string]DB
}

// Open returns the task's database in dialect d. The Connector owns the returned DB; callers
// must not Close it (Connector.Close does).
func (c *Connector) Open(ctx context.Context, d Dialect, t Task) (DB, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d != SQLite {
		return nil, fmt.Errorf("open %s database %s: the %s dialect is not built yet (use sqlite)", d, t.DBID, d)
	}
	path := t.DBPath
	if c.SQLiteRoot != "" {
		path = filepath.Join(c.SQLiteRoot, t.DBID, t.DBID+".sqlite")
	}
	if path == "" {
		return nil, fmt.Errorf("open sqlite database of task %s: no database path (set the db root)", t.ID)
	}
	key := string(d) + "\x00" + path
	c.mu.Lock()
	defer c.mu.Unlock()
	if db, ok := c.dbs[key]; ok {
		return db, nil
	}
	db, err := OpenSQLite(path)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.ID, err)
	}
	if c.dbs == nil {
		c.dbs = map[string]DB{}
	}
	c.dbs[key] = db
	return db, nil
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
	return errors.Join(errs...)
}
