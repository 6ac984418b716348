package datasets

// This file fixes the API other packages build against; the datasets work fills in the bodies
// in the files named beside each declaration.

import (
	"context"
	"errors"
)

var errTODO = errors.New("datasets: not built yet")

// Connector opens task databases per dialect and keeps one pool per (dialect, database).
// SQLite tasks open Task.DBPath; PostgreSQL uses schema = db_id inside the database of
// PostgresDSN; MySQL uses database = db_id on the server of MySQLDSN. (connect.go)
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

// Column is one column of a table. (schema.go)
type Column struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	PrimaryKey bool   `json:"primary_key,omitempty"`
	NotNull    bool   `json:"not_null,omitempty"`
	// Samples are a few distinct non-null values, rendered as text.
	Samples []string `json:"samples,omitempty"`
}

// ForeignKey links columns of one table to another's.
type ForeignKey struct {
	Columns    []string `json:"columns"`
	RefTable   string   `json:"ref_table"`
	RefColumns []string `json:"ref_columns"`
}

// Table is one table of a schema.
type Table struct {
	Name        string       `json:"name"`
	Columns     []Column     `json:"columns"`
	PrimaryKey  []string     `json:"primary_key,omitempty"`
	ForeignKeys []ForeignKey `json:"foreign_keys,omitempty"`
}

// Schema is the structure of one database.
type Schema struct {
	DBID   string  `json:"db_id"`
	Tables []Table `json:"tables"`
}

// Introspect reads the schema of db with up to samples distinct values per column.
func Introspect(ctx context.Context, db DB, samples int) (*Schema, error) { return nil, errTODO }

// DDL renders the schema as CREATE TABLE statements of dialect d, sample values as comments.
func (s *Schema) DDL(d Dialect) string { return "" }

// Match reports whether pred answers the same as gold: BIRD EX (set equality of rows, column
// order kept) when ordered is false; ordered comparison of row lists when true. Values that are
// the same across engines compare equal (see judge.go for the float tolerance). (judge.go)
func Match(gold, pred *Result, ordered bool) bool { return false }

// HasOrderBy reports whether the outermost query of sql has an ORDER BY clause.
func HasOrderBy(sql string) bool { return false }

// LoadTasks loads a task spec: "sample", "bird:PATH", "minidev:PATH", "spider:PATH"; dbRoot,
// when not empty, overrides where the SQLite databases are looked for. (load.go)
func LoadTasks(spec, dbRoot string) ([]Task, error) { return nil, errTODO }
