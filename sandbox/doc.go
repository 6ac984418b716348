// Package sandbox runs the statements a policy writes against a task's database, read-only and
// bounded: connecting per dialect (Connector), the least-privileged reader on the servers,
// schema introspection and DDL rendering, the screen, result limits and normalisation, and
// copying a SQLite database into the server engines (CopySQLite, for distill load).
package sandbox
