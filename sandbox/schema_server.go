package sandbox

import (
	"context"
	"fmt"
	"strings"
)

// catalog holds the catalog queries of one server engine, each limited to the schema the DB
// executes in (PostgreSQL: current_schema(), the db_id schema on the search_path; MySQL:
// DATABASE(), the db_id database).
type catalog struct {
	// columns returns table, column, declared type, not-null (bool or 'NO'/'YES'), ordered by
	// table and column position; only base tables.
	columns string
	// keys returns table, constraint name, 'p' or 'f', column, referenced table, referenced
	// column, ordered by table, constraint and position within the constraint.
	keys string
}

var pgCatalog = catalog{
	columns: `SELECT c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull
		FROM pg_catalog.pg_attribute a
		JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY c.relname, a.attnum`,
	keys: `SELECT c.relname::text, con.conname::text, con.contype::text, a.attname::text,
		COALESCE(rc.relname::text, ''), COALESCE(ra.attname::text, '')
		FROM pg_catalog.pg_constraint con
		JOIN pg_catalog.pg_class c ON c.oid = con.conrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		CROSS JOIN LATERAL unnest(con.conkey, con.confkey) WITH ORDINALITY AS k(attnum, refnum, ord)
		JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
		LEFT JOIN pg_catalog.pg_class rc ON rc.oid = con.confrelid
		LEFT JOIN pg_catalog.pg_attribute ra ON ra.attrelid = con.confrelid AND ra.attnum = k.refnum
		WHERE n.nspname = current_schema() AND con.contype IN ('p', 'f')
		ORDER BY c.relname, con.contype DESC, con.conname, k.ord`,
}

var mysqlCatalog = catalog{
	columns: `SELECT c.TABLE_NAME, c.COLUMN_NAME, c.COLUMN_TYPE, c.IS_NULLABLE
		FROM information_schema.COLUMNS c
		JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
		WHERE c.TABLE_SCHEMA = DATABASE() AND t.TABLE_TYPE = 'BASE TABLE'
		ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION`,
	keys: `SELECT k.TABLE_NAME, k.CONSTRAINT_NAME,
		CASE WHEN k.CONSTRAINT_NAME = 'PRIMARY' THEN 'p' ELSE 'f' END,
		k.COLUMN_NAME, COALESCE(k.REFERENCED_TABLE_NAME, ''), COALESCE(k.REFERENCED_COLUMN_NAME, '')
		FROM information_schema.KEY_COLUMN_USAGE k
		WHERE k.TABLE_SCHEMA = DATABASE()
		  AND (k.CONSTRAINT_NAME = 'PRIMARY' OR k.REFERENCED_TABLE_NAME IS NOT NULL)
		ORDER BY k.TABLE_NAME, k.CONSTRAINT_NAME = 'PRIMARY' DESC, k.CONSTRAINT_NAME, k.ORDINAL_POSITION`,
}

// introspectCatalog reads the tables, columns and keys of a server engine's current schema.
func introspectCatalog(ctx context.Context, db DB, c catalog) (*Schema, error) {
	cols, err := catalogQuery(ctx, db, c.columns)
	if err != nil {
		return nil, fmt.Errorf("columns: %w", err)
	}
	s := &Schema{}
	index := map[string]int{}
	for _, r := range cols.Rows {
		table := valueText(r[0])
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
			notNull = strings.EqualFold(valueText(x), "NO")
		}
		s.Tables[i].Columns = append(s.Tables[i].Columns, Column{Name: valueText(r[1]), Type: valueText(r[2]), NotNull: notNull})
	}
	keys, err := catalogQuery(ctx, db, c.keys)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	lastFK := map[int]string{}
	for _, r := range keys.Rows {
		i, ok := index[valueText(r[0])]
		if !ok {
			continue
		}
		t := &s.Tables[i]
		name, kind, col := valueText(r[1]), valueText(r[2]), valueText(r[3])
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
			t.ForeignKeys = append(t.ForeignKeys, ForeignKey{RefTable: valueText(r[4])})
			lastFK[i] = name
		}
		fk := &t.ForeignKeys[len(t.ForeignKeys)-1]
		fk.Columns = append(fk.Columns, col)
		fk.RefColumns = append(fk.RefColumns, valueText(r[5]))
	}
	return s, nil
}
