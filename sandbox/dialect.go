package sandbox

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/chainedsql/chainedsql/datasets"
)

// Dialect is one SQL engine behind the sandbox. Each engine implements it once, in its own
// sub-package of sandbox, and sandbox/engines registers it with Register; everything outside the
// engine's package reaches the engine through Lookup and Dialects, never by naming it, so that
// adding an engine is its package and one Register line.
//
// The contract:
//   - Name is unique among the registered dialects and a valid datasets.Dialect: lower-case
//     letters, what --dialect, run dirs and datasets.Task.Gold call it.
//   - Connect is called at most once per Connector and dialect, on the Connector's first Open of
//     it; the Engine it returns is the Connector's, closed by Connector.Close, and safe for
//     concurrent use. Connect and Engine.Open must not keep ctx beyond their return.
//   - Every DB an Engine opens executes statements read-only as DB says: screened, within
//     ExecOptions, results bounded by the shared limits, Dialect() returning Name.
//   - Introspect reads a DB of this dialect; QuoteIdent quotes a name so that the engine reads it
//     back unchanged.
//   - Screen returns the engine's own refusals (ScreenRules), which every Exec of its DBs applies
//     after the screen's rules of every engine; a zero ScreenRules adds none.
//   - Server is nil for a file engine (the task's SQLite file); a server engine names its DSN flag
//     and, when it holds a least-privileged reader, implements ReaderAdmin.
type Dialect interface {
	// Name is the dialect's name ("sqlite").
	Name() datasets.Dialect
	// Engine is the engine's name for people and prompts ("SQLite").
	Engine() string
	// Server says how the dialect is reached on a server; nil for a file engine.
	Server() *Server
	// Connect opens the dialect's share of c, from c's settings (Connector.DSN[Name],
	// Connector.SQLiteRoot, Connector.Access).
	Connect(ctx context.Context, c *Connector) (Engine, error)
	// Introspect reads the tables, columns and keys of db from the engine's catalog, without
	// samples and in the catalog's order (Introspect sorts and samples).
	Introspect(ctx context.Context, db DB) (*Schema, error)
	// QuoteIdent quotes name as an identifier of the engine when it needs quoting.
	QuoteIdent(name string) string
	// Screen returns the engine's own refusals: what reaches outside the task's data, or past
	// the deadline, on this engine only.
	Screen() ScreenRules
}

// Server describes a server dialect's connection settings for the command line.
type Server struct {
	// Flag is the DSN flag without dashes ("pg-dsn"); Env the environment variable that is its
	// default ("CHAINEDSQL_PG_DSN"); Usage the flag's help text.
	Flag, Env, Usage string
	// Namespace is what one task database is on the server: "schema" or "database".
	Namespace string
}

// Engine is one Connector's share of a dialect: its task databases and what they share.
type Engine interface {
	// Open returns the database of task t; the Connector caches it per task database.
	Open(ctx context.Context, t datasets.Task) (DB, error)
	// Key names t's database among the Engine's (the SQLite path, or the db_id on a server),
	// or says why t has none.
	Key(t datasets.Task) (string, error)
	// Runaways counts the statements that outlived their deadline (see Runaways).
	Runaways() Runaways
	// Close closes what Open shares (the DBs themselves are closed by the Connector).
	Close() error
}

// ReaderAdmin is the optional part of a server Dialect that keeps the least-privileged reader
// (see EnsureReader): creating it, dropping it, and describing the DSN's own user.
type ReaderAdmin interface {
	EnsureReader(ctx context.Context, dsn, name string, setup ReaderSetup, targets []string) (ReaderReport, error)
	DropReader(ctx context.Context, dsn, name string) error
	DescribeDSNUser(ctx context.Context, dsn string) (string, error)
}

var registry struct {
	mu    sync.RWMutex
	order []Dialect
	by    map[datasets.Dialect]Dialect
}

// Register makes d available to Lookup and Dialects; a second dialect of the same name, or a
// name that is not lower-case letters, panics (registration runs at init).
func Register(d Dialect) {
	n := d.Name()
	if n == "" || strings.Trim(string(n), "abcdefghijklmnopqrstuvwxyz") != "" {
		panic(fmt.Sprintf("sandbox: dialect name %q: want lower-case letters", n))
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.by == nil {
		registry.by = map[datasets.Dialect]Dialect{}
	}
	if _, dup := registry.by[n]; dup {
		panic(fmt.Sprintf("sandbox: dialect %q registered twice", n))
	}
	registry.by[n] = d
	registry.order = append(registry.order, d)
}

// Lookup returns the registered dialect named n.
func Lookup(n datasets.Dialect) (Dialect, bool) {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	d, ok := registry.by[n]
	return d, ok
}

// Dialects returns the registered dialects in registration order.
func Dialects() []Dialect {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	return append([]Dialect(nil), registry.order...)
}

// optionalPart returns dialect d as T, an optional part of a Dialect (ReaderAdmin, Loader), or an
// error naming the registered dialects that implement T.
func optionalPart[T any](d datasets.Dialect) (T, error) {
	var with []datasets.Dialect
	for _, x := range Dialects() {
		if _, ok := x.(T); ok {
			with = append(with, x.Name())
		}
	}
	if x, ok := Lookup(d); ok {
		if p, ok := x.(T); ok {
			return p, nil
		}
	}
	var none T
	return none, fmt.Errorf("dialect %q: want %s", d, NameList(with, " or "))
}

// Names returns the registered dialects' names in registration order.
func Names() []datasets.Dialect {
	var out []datasets.Dialect
	for _, d := range Dialects() {
		out = append(out, d.Name())
	}
	return out
}

// Check returns an error naming the registered dialects when n is not one of them.
func Check(n datasets.Dialect) (Dialect, error) {
	if d, ok := Lookup(n); ok {
		return d, nil
	}
	return nil, fmt.Errorf("unknown dialect %q (want %s)", n, NameList(Names(), " or "))
}

// NameList joins names, the last with sep ("sqlite, postgres or mysql").
func NameList(names []datasets.Dialect, sep string) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + sep + s[len(s)-1]
}

// EngineName is the engine's name of dialect n ("PostgreSQL"), or n itself when n is not
// registered.
func EngineName(n datasets.Dialect) string {
	if d, ok := Lookup(n); ok {
		return d.Engine()
	}
	return string(n)
}

// QuoteIdent quotes name as an identifier of dialect d when it needs quoting (unknown dialects:
// ANSI double quotes).
func QuoteIdent(d datasets.Dialect, name string) string {
	if x, ok := Lookup(d); ok {
		return x.QuoteIdent(name)
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
