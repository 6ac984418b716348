package sandbox

import (
	"context"
	"fmt"
	"strings"
)

// Catalog holds the catalog queries of one server engine, each limited to the schema the DB
// executes in (PostgreSQL: current_schema(), the db_id schema on the search_path; MySQL:
// DATABASE(), the db_id database).
type Catalog struct {
	// Columns returns table, column, declared type, not-null (bool or 'NO'/'YES'), ordered by
	// table and column position; only base tables.
	Columns string
	// Keys returns table, constraint name, 'p' or 'f', column, referenced table, referenced
	// column, ordered by table, constraint and position within the constraint.
	Keys string
}

// IntrospectCatalog reads the tables, columns and keys of a server engine's current schema.
func IntrospectCatalog(ctx context.Context, db DB, c Catalog) (*Schema, error) {
	cols, err := CatalogQuery(ctx, db, c.Columns)
	if err != nil {
		return nil, fmt.Errorf("columns: %w", err)
	}
	s := &Schema{}
	index := map[string]int{}
	for _, r := range cols.Rows {
		table := ValueText(r[0])
		i, ok := index[table]
		if !ok {
			i = len(s.Tables)
			index[table] = i
			s.Tables = append(s.Tables, Table{Name: table})
		}
		notNull := false
		switch x := r[3].(type) {
		case bool:
			notNull = x
		default:
			notNull = strings.EqualFold(ValueText(x), "NO")
		}
		s.Tables[i].Columns = append(s.Tables[i].Columns, Column{Name: ValueText(r[1]), Type: ValueText(r[2]), NotNull: notNull})
	}
	keys, err := CatalogQuery(ctx, db, c.Keys)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	lastFK := map[int]string{}
	for _, r := range keys.Rows {
		i, ok := index[ValueText(r[0])]
		if !ok {
			continue
		}
		t := &s.Tables[i]
		name, kind, col := ValueText(r[1]), ValueText(r[2]), ValueText(r[3])
		if kind == "p" {
			t.PrimaryKey = append(t.PrimaryKey, col)
			for ci := range t.Columns {
				if t.Columns[ci].Name == col {
					t.Columns[ci].PrimaryKey = true
				}
			}
			continue
		}
		if f, seen := lastFK[i]; !seen || f != name {
			t.ForeignKeys = append(t.ForeignKeys, ForeignKey{RefTable: ValueText(r[4])})
			lastFK[i] = name
		}
		fk := &t.ForeignKeys[len(t.ForeignKeys)-1]
		fk.Columns = append(fk.Columns, col)
		fk.RefColumns = append(fk.RefColumns, ValueText(r[5]))
	}
	return s, nil
}
