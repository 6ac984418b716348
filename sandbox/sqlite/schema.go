package sqlite

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/chainedsql/chainedsql/sandbox"
)

// introspectSQLite reads tables from sqlite_master and columns and keys from the pragma_table_info
// and pragma_foreign_key_list table-valued functions: plain SELECTs, so the read-only screen of
// SQLite's Exec lets them through without any special path.
func introspectSQLite(ctx context.Context, db sandbox.DB) (*sandbox.Schema, error) {
	res, err := sandbox.CatalogQuery(ctx, db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	s := &sandbox.Schema{}
	for _, row := range res.Rows {
		t, err := sqliteTable(ctx, db, sandbox.ValueText(row[0]))
		if err != nil {
			return nil, err
		}
		s.Tables = append(s.Tables, t)
	}
	// A foreign key written without columns references the other table's primary key.
	pkOf := map[string][]string{}
	for _, t := range s.Tables {
		pkOf[strings.ToLower(t.Name)] = t.PrimaryKey
	}
	for ti := range s.Tables {
		for fi := range s.Tables[ti].ForeignKeys {
			fk := &s.Tables[ti].ForeignKeys[fi]
			pk := pkOf[strings.ToLower(fk.RefTable)]
			for ci, rc := range fk.RefColumns {
				if rc == "" && ci < len(pk) {
					fk.RefColumns[ci] = pk[ci]
				}
			}
		}
	}
	return s, nil
}

// sqliteTable reads the columns, primary key and foreign keys of one table.
func sqliteTable(ctx context.Context, db sandbox.DB, name string) (sandbox.Table, error) {
	t := sandbox.Table{Name: name}
	lit := "'" + strings.ReplaceAll(name, "'", "''") + "'"
	cols, err := sandbox.CatalogQuery(ctx, db, `SELECT name, type, "notnull", pk FROM pragma_table_info(`+lit+`) ORDER BY cid`)
	if err != nil {
		return t, fmt.Errorf("columns of %s: %w", name, err)
	}
	type pkCol struct {
		pos  int64
		name string
	}
	var pks []pkCol
	for _, c := range cols.Rows {
		notNull, err := sandbox.ValueInt(c[2])
		if err != nil {
			return t, fmt.Errorf("columns of %s: %w", name, err)
		}
		pos, err := sandbox.ValueInt(c[3])
		if err != nil {
			return t, fmt.Errorf("columns of %s: %w", name, err)
		}
		col := sandbox.Column{Name: sandbox.ValueText(c[0]), Type: sandbox.ValueText(c[1]), NotNull: notNull != 0, PrimaryKey: pos > 0}
		if pos > 0 {
			pks = append(pks, pkCol{pos, col.Name})
		}
		t.Columns = append(t.Columns, col)
	}
	sort.Slice(pks, func(i, j int) bool { return pks[i].pos < pks[j].pos })
	for _, p := range pks {
		t.PrimaryKey = append(t.PrimaryKey, p.name)
	}
	fks, err := sandbox.CatalogQuery(ctx, db, `SELECT id, "table", "from", "to" FROM pragma_foreign_key_list(`+lit+`) ORDER BY id, seq`)
	if err != nil {
		return t, fmt.Errorf("foreign keys of %s: %w", name, err)
	}
	// pragma_foreign_key_list numbers constraints from the last declared one; declared order is
	// the reverse of id order.
	var groups []sandbox.ForeignKey
	last := int64(-1)
	for _, f := range fks.Rows {
		id, err := sandbox.ValueInt(f[0])
		if err != nil {
			return t, fmt.Errorf("foreign keys of %s: %w", name, err)
		}
		if id != last || len(groups) == 0 {
			groups = append(groups, sandbox.ForeignKey{RefTable: sandbox.ValueText(f[1])})
			last = id
		}
		fk := &groups[len(groups)-1]
		fk.Columns = append(fk.Columns, sandbox.ValueText(f[2]))
		fk.RefColumns = append(fk.RefColumns, sandbox.ValueText(f[3])) // empty: the referenced primary key
	}
	for i := len(groups) - 1; i >= 0; i-- {
		t.ForeignKeys = append(t.ForeignKeys, groups[i])
	}
	return t, nil
}
