package postgres

import (
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/sqlite"
)

// The tests reach the engines through the registry too (a Connector, CopySQLite from a SQLite
// file, sandboxtest): SQLite and this engine registered here as sandbox/engines registers them,
// which this package's tests cannot import.
func init() {
	sandbox.Register(sqlite.Dialect{})
	sandbox.Register(Dialect{})
}
