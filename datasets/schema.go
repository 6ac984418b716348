package datasets

import "context"

// Column is one column of a table.
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
