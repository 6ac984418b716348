// Package engines registers the toolkit's SQL engines with sandbox, in the order flags and
// messages list them. Whoever opens databases by dialect name (the commands, and the packages
// whose prompts name an engine) imports it, usually for its side effect alone:
//
//	import _ "github.com/chainedsql/chainedsql/sandbox/engines"
//
// A new dialect is its sub-package of sandbox (a sandbox.Dialect) and one Register line here.
package engines

import (
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/mysql"
	"github.com/chainedsql/chainedsql/sandbox/postgres"
	"github.com/chainedsql/chainedsql/sandbox/sqlite"
)

func init() {
	sandbox.Register(sqlite.Dialect{})
	sandbox.Register(postgres.Dialect{})
	sandbox.Register(mysql.Dialect{})
}
