package datasets

import (
	"context"
	"errors"
)

var errTODO = errors.New("datasets: not built yet")

// Connector opens task databases per dialect and keeps one pool per (dialect, database).
// SQLite tasks open Task.DBPath; PostgreSQL uses schema = db_id inside the database of
// PostgresDSN; MySQL uses database = db_id on the server of MySQLDSN.
type Connector struct {
	PostgresDSN string
	MySQLDSN    string
	// SQLiteRoot overrides the directory holding <db>/<db>.sqlite, when set.
	SQLiteRoot string
}

// Open returns the task's database in dialect d. The Connector owns the returned DB; callers
// must not Close it (Connector.Close does).
func (c *Connector) Open(ctx context.Context, d Dialect, t Task) (DB, error) { return nil, errTODO }

// Close closes every pool the Connector opened.
func (c *Connector) Close() error { return nil }
