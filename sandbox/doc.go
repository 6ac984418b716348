// Package sandbox runs the statements a policy writes against a task's database, read-only and
// bounded. It is the core the engines share and imports none of them: the Dialect interface and
// its registry, connecting per dialect (Connector), what every engine's Exec shares (StartExec,
// Collect, the result limits), the least-privileged reader's API and its one check
// (CheckReader), schema introspection and DDL rendering, the screen, and copying a SQLite
// database into the server engines (CopySQLite, for distill load).
//
// Each engine is a sub-package implementing Dialect through this package's exported API
// (sandbox/sqlite, sandbox/postgres, sandbox/mysql), and sandbox/engines registers them; a new
// dialect is its sub-package and one Register line there.
package sandbox
