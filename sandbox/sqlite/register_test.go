package sqlite

import "github.com/chainedsql/chainedsql/sandbox"

// The tests reach SQLite through the registry too (a Connector, sandboxtest): registered here
// as sandbox/engines registers it, which this package's tests cannot import.
func init() { sandbox.Register(Dialect{}) }
