package sandbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/datasets"
)

// copyFormat versions the copy: a completed copy made by another format is redone. Bump it
// whenever the mapping of types, names or keys changes.
const copyFormat = "chainedsql-copy/2"

// CopyStats reports one CopySQLite call.
type CopyStats struct {
	Target string `json:"target"`
	// Skipped is true when a completed copy of the same source file was already there.
	Skipped     bool  `json:"skipped,omitempty"`
	Tables      int   `json:"tables"`
	Rows        int64 `json:"rows"`
	PrimaryKeys int   `json:"primary_keys"`
	ForeignKeys int   `json:"foreign_keys"`
	// Notes name the keys that were not kept and the values that had to change, with why.
	Notes []string `json:"notes,omitempty"`
	// Marker is the copy format and the SHA-256 of the source file, kept with the copy.
	Marker   string        `json:"marker"`
	Duration time.Duration `json:"duration_ns"`
}

// targetName is what CopySQLite accepts as a schema/database name.
var targetName = regexp.MustCompile(`^[A-Za-z0-9_]{1,48}$`)

// reservedTarget reports whether name is a schema or database CopySQLite must never replace
// (its publish step drops the target first): the servers' own, the toolkit's metadata (which
// the reader must never be granted) and the copies' temporary names.
func reservedTarget(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case ReaderMeta, "mysql", "information_schema", "performance_schema", "sys", "public":
		return true
	}
	return strings.HasPrefix(n, "pg_") || strings.HasPrefix(n, "cs_tmp_")
}

// CopySQLite copies the SQLite database at sqlitePath into dialect d on the server of dsn:
// PostgreSQL schema target in the DSN's database, or MySQL database target on the DSN's server.
// Tables and all rows are copied with types mapped from each column's declared type and the
// values it really holds (integers: bigint/BIGINT; reals: double precision/DOUBLE; NUMERIC/
// DECIMAL with fractions: numeric/DOUBLE; text: text/LONGTEXT, VARCHAR for MySQL key columns;
// blobs: bytea/LONGBLOB; a column mixing text into numbers becomes text; DATE/DATETIME/
// TIMESTAMP columns holding only valid dates or date-times: date/DATE or timestamp/DATETIME,
// else text). Primary
// keys are added after the data, then foreign keys whose referents are the referenced table's
// primary key; keys the data or types do not allow are left out with a note. The copy is built
// under a temporary name and moved into place at the end with a marker holding the SHA-256 of
// the source: a completed copy of the same file is skipped, a partial one is dropped and redone.
// PostgreSQL table and column names are folded to lower case, so SQL written for SQLite finds
// them unquoted; MySQL keeps them. MySQL databases use the utf8mb4_bin collation, so text
// compares as it does in SQLite.
func CopySQLite(ctx context.Context, sqlitePath string, d datasets.Dialect, dsn, target string) (CopyStats, error) {
	start := time.Now()
	st := CopyStats{Target: target}
	loader, err := loaderOf(d)
	if err != nil {
		return st, fmt.Errorf("copy %s: %w", sqlitePath, err)
	}
	if !targetName.MatchString(target) {
		return st, fmt.Errorf("copy %s: target name %q: want 1-48 letters, digits or '_'", sqlitePath, target)
	}
	if reservedTarget(target) {
		return st, fmt.Errorf("copy %s: target name %q is reserved (a server's own schema or database, or the toolkit's): rename the database", sqlitePath, target)
	}
	sum, err := fileSHA256(sqlitePath)
	if err != nil {
		return st, fmt.Errorf("copy %s: %w", sqlitePath, err)
	}
	st.Marker = copyFormat + " sha256:" + sum
	c, err := openCopier(ctx, loader, d, dsn, target)
	if err != nil {
		return st, fmt.Errorf("copy %s into %s %s: %w", sqlitePath, d, target, err)
	}
	defer c.close()
	wrap := func(err error) error {
		return fmt.Errorf("copy %s into %s %s: %w", sqlitePath, d, target, err)
	}
	done, err := c.completed(ctx, st.Marker)
	if err != nil {
		return st, wrap(err)
	}
	if done {
		st.Skipped = true
		st.Duration = time.Since(start)
		return st, nil
	}
	source, err := optionalPart[Source](datasets.SQLite)
	if err != nil {
		return st, wrap(err)
	}
	src, raw, err := source.OpenSource(sqlitePath)
	if err != nil {
		return st, wrap(err)
	}
	defer src.Close()
	schema, err := Introspect(ctx, src, 0)
	if err != nil {
		return st, wrap(err)
	}
	plans := make([]tablePlan, len(schema.Tables))
	for i, t := range schema.Tables {
		if plans[i], err = planTable(ctx, raw, c.to, t); err != nil {
			return st, wrap(err)
		}
	}
	if err := c.createTemp(ctx); err != nil {
		return st, wrap(err)
	}
	published := false
	defer func() {
		if !published { // best effort; the next copy drops it anyway
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
			defer cancel()
			c.dropTemp(dctx)
		}
	}()
	for i := range plans {
		n, notes, err := c.copyTable(ctx, raw, &plans[i])
		if err != nil {
			return st, wrap(fmt.Errorf("table %s: %w", plans[i].table.Name, err))
		}
		st.Rows += n
		st.Notes = append(st.Notes, notes...)
	}
	st.Tables = len(plans)
	pk, fk, notes := c.addKeys(ctx, plans)
	st.PrimaryKeys, st.ForeignKeys = pk, fk
	st.Notes = append(st.Notes, notes...)
	if err := ctx.Err(); err != nil {
		return st, wrap(err)
	}
	if err := c.publish(ctx, plans, st.Marker); err != nil {
		return st, wrap(err)
	}
	published = true
	st.Duration = time.Since(start)
	return st, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// CopyKind is how a copied column's values travel and which server type holds them (chosen by
// CopySQLite from the SQLite column's declared type and the values it holds).
type CopyKind int

// The kinds of copied columns, with the Go type CopySQLite reads their values as.
const (
	CopyInt      CopyKind = iota // int64
	CopyFloat                    // float64 (an integer value read as one)
	CopyDecimal                  // int64 or float64 (NUMERIC/DECIMAL with fractions)
	CopyText                     // string, valid UTF-8
	CopyBlob                     // []byte
	CopyDate                     // string, all valid YYYY-MM-DD dates
	CopyDateTime                 // string, all valid YYYY-MM-DD[ HH:MM:SS] date-times
)

// CopyColumn is one column of a table CopySQLite copies, as its LoadTarget sees it.
type CopyColumn struct {
	// Name is the column's name in SQLite.
	Name string
	// Kind is how its values travel.
	Kind CopyKind
	// MaxLen is its longest value as text (characters) or blob (bytes).
	MaxLen int64
	// Key is set when the column is in its table's primary key or a foreign key.
	Key bool
}

// colPlan is one column of a table to copy.
type colPlan struct {
	CopyColumn
	typ string // server type
}

// tablePlan is one table to copy.
type tablePlan struct {
	table Table
	cols  []colPlan
	rows  int64 // rows in the source
	// keyOK is set once the primary key has been added on the server.
	keyOK bool
}

// sqliteAffinity is SQLite's column affinity of a declared type (its documented rules).
func sqliteAffinity(decl string) string {
	u := strings.ToUpper(decl)
	switch {
	case strings.Contains(u, "INT"):
		return "integer"
	case strings.Contains(u, "CHAR"), strings.Contains(u, "CLOB"), strings.Contains(u, "TEXT"):
		return "text"
	case strings.Contains(u, "BLOB"), u == "":
		return "blob"
	case strings.Contains(u, "REAL"), strings.Contains(u, "FLOA"), strings.Contains(u, "DOUB"):
		return "real"
	}
	return "numeric"
}

// chooseKind picks a column's kind from its declared type and the storage classes its values
// really have (SQLite lets any column hold any value).
func chooseKind(decl string, ints, reals, texts, blobs int64) CopyKind {
	u := strings.ToUpper(decl)
	aff := sqliteAffinity(decl)
	decimal := aff == "numeric" && (strings.Contains(u, "DEC") || strings.Contains(u, "NUM"))
	switch {
	case blobs > 0:
		return CopyBlob
	case texts > 0, aff == "text":
		return CopyText
	case reals > 0 && decimal:
		return CopyDecimal
	case reals > 0:
		return CopyFloat
	case ints > 0:
		return CopyInt
	}
	// No values: go by the declared type.
	switch {
	case aff == "integer":
		return CopyInt
	case aff == "real":
		return CopyFloat
	case decimal:
		return CopyDecimal
	case aff == "blob" && strings.Contains(u, "BLOB"):
		return CopyBlob
	case aff == "numeric" && !strings.Contains(u, "DATE") && !strings.Contains(u, "TIME"):
		return CopyInt
	}
	return CopyText
}

// dateKind types a text column declared as a date or time (DATE, DATETIME, TIMESTAMP) whose
// values (texts of them) are all valid dates (dates of them) or dates and date-times
// (datetimes): gold SQL written for the servers uses their date functions on such columns.
// Anything else stays text.
func dateKind(decl string, texts, dates, datetimes int64) CopyKind {
	u := strings.ToUpper(decl)
	if texts == 0 || sqliteAffinity(decl) == "text" || !strings.Contains(u, "DATE") && !strings.Contains(u, "TIME") {
		return CopyText
	}
	switch {
	case dates == texts:
		return CopyDate
	case dates+datetimes == texts:
		return CopyDateTime
	}
	return CopyText
}

// planTable reads a table's row count and each column's storage classes and longest value.
func planTable(ctx context.Context, src *sql.DB, to LoadTarget, t Table) (tablePlan, error) {
	p := tablePlan{table: t}
	if len(t.Columns) == 0 {
		return p, fmt.Errorf("table %s has no columns", t.Name)
	}
	var exprs []string
	for _, c := range t.Columns {
		q := QuoteIdent(datasets.SQLite, c.Name)
		for _, class := range []string{"integer", "real", "text", "blob"} {
			exprs = append(exprs, fmt.Sprintf("coalesce(sum(typeof(%s) = '%s'), 0)", q, class))
		}
		exprs = append(exprs, fmt.Sprintf("coalesce(max(length(CASE WHEN typeof(%s) = 'blob' THEN %s ELSE CAST(%s AS TEXT) END)), 0)", q, q, q))
		// Valid dates and date-times as SQLite's own date functions read them, years 1000 on
		// (MySQL's DATE range; PostgreSQL has no year 0).
		for _, f := range []string{"date", "datetime"} {
			exprs = append(exprs, fmt.Sprintf("coalesce(sum(typeof(%s) = 'text' AND %s(%s) IS %s AND %s >= '1000'), 0)", q, f, q, q, q))
		}
	}
	query := "SELECT count(*), " + strings.Join(exprs, ", ") + " FROM " + QuoteIdent(datasets.SQLite, t.Name)
	const per = 7 // statistics per column
	vals := make([]int64, 1+per*len(t.Columns))
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := src.QueryRowContext(ctx, query).Scan(ptrs...); err != nil {
		return p, fmt.Errorf("table %s: read column statistics: %w", t.Name, err)
	}
	p.rows = vals[0]
	keys := keyColumns(t)
	for i, c := range t.Columns {
		v := vals[1+per*i:]
		cp := colPlan{CopyColumn: CopyColumn{Name: c.Name, Kind: chooseKind(c.Type, v[0], v[1], v[2], v[3]), MaxLen: v[4], Key: keys[strings.ToLower(c.Name)]}}
		if cp.Kind == CopyText {
			cp.Kind = dateKind(c.Type, v[2], v[5], v[6])
		}
		cp.typ = to.ColumnType(cp.CopyColumn)
		p.cols = append(p.cols, cp)
	}
	return p, nil
}

// keyColumns are the lower-cased names of t's columns in its primary key or a foreign key.
func keyColumns(t Table) map[string]bool {
	k := map[string]bool{}
	for _, c := range t.PrimaryKey {
		k[strings.ToLower(c)] = true
	}
	for _, fk := range t.ForeignKeys {
		for _, c := range fk.Columns {
			k[strings.ToLower(c)] = true
		}
	}
	return k
}

// selectExpr reads a column so the driver hands over the kind's Go type (casts keep
// go-sqlite3 from turning DATE or BOOLEAN columns into time.Time or bool).
func selectExpr(c colPlan) string {
	q := QuoteIdent(datasets.SQLite, c.Name)
	switch c.Kind {
	case CopyInt:
		return "CAST(" + q + " AS INTEGER)"
	case CopyFloat:
		return "CAST(" + q + " AS REAL)"
	case CopyDecimal:
		return "CAST(" + q + " AS NUMERIC)"
	case CopyText, CopyDate, CopyDateTime:
		return "CAST(" + q + " AS TEXT)"
	}
	return q
}

// copier is the server side of one copy: its LoadTarget, and the target's names.
type copier struct {
	d      datasets.Dialect
	to     LoadTarget
	target string
	temp   string
}

// tempName is the temporary schema/database a copy of target is built in.
func tempName(target string) string {
	h := sha256.Sum256([]byte(target))
	return "cs_tmp_" + hex.EncodeToString(h[:8])
}

func openCopier(ctx context.Context, l Loader, d datasets.Dialect, dsn, target string) (*copier, error) {
	to, err := l.OpenLoad(ctx, dsn, target)
	if err != nil {
		return nil, err
	}
	return &copier{d: d, to: to, target: target, temp: tempName(target)}, nil
}

func (c *copier) close() { c.to.Close() }

func (c *copier) ident(name string) string { return QuoteIdent(c.d, name) }

func (c *copier) exec(ctx context.Context, q string, args ...any) error {
	if _, err := c.to.Conn().ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("%s: %w", FirstLine(q), err)
	}
	return nil
}

// FirstLine is the start of statement s, for an error naming it.
func FirstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// completed reports whether target holds a finished copy with marker.
func (c *copier) completed(ctx context.Context, marker string) (bool, error) {
	done, err := c.to.Completed(ctx, c.target, marker)
	if err != nil {
		return false, fmt.Errorf("read the copy marker: %w", err)
	}
	return done, nil
}

// dropTemp drops the temporary schema/database, if there is one.
func (c *copier) dropTemp(ctx context.Context) error { return c.to.DropTemp(ctx, c.temp) }

// createTemp drops what an interrupted copy left and creates the empty temporary place.
func (c *copier) createTemp(ctx context.Context) error {
	if err := c.dropTemp(ctx); err != nil {
		return err
	}
	return c.to.CreateTemp(ctx, c.temp)
}

// serverName is a table's or column's name on the server (LoadTarget.Name).
func (c *copier) serverName(name string) string { return c.to.Name(name) }

// obj quotes a table's or column's server name.
func (c *copier) obj(name string) string { return c.ident(c.serverName(name)) }

func (c *copier) objList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = c.obj(n)
	}
	return strings.Join(q, ", ")
}

func (c *copier) qualified(table string) string { return c.ident(c.temp) + "." + c.obj(table) }

// copyTable creates one table and copies its rows, checking the count on the server.
func (c *copier) copyTable(ctx context.Context, src *sql.DB, p *tablePlan) (int64, []string, error) {
	defs := make([]string, len(p.cols))
	sel := make([]string, len(p.cols))
	names := make([]string, len(p.cols))
	for i, col := range p.cols {
		defs[i] = c.obj(col.Name) + " " + col.typ
		if p.table.Columns[i].NotNull {
			defs[i] += " NOT NULL"
		}
		sel[i] = selectExpr(col)
		names[i] = c.serverName(col.Name)
	}
	create := "CREATE TABLE " + c.qualified(p.table.Name) + " (" + strings.Join(defs, ", ") + ")"
	if err := c.exec(ctx, create); err != nil {
		return 0, nil, err
	}
	rows, err := src.QueryContext(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+QuoteIdent(datasets.SQLite, p.table.Name))
	if err != nil {
		return 0, nil, fmt.Errorf("read rows: %w", err)
	}
	defer rows.Close()
	cv := &converter{to: c.to, cols: p.cols}
	from := &CopySource{rows: rows, cv: cv}
	n, err := c.to.CopyRows(ctx, c.temp, c.serverName(p.table.Name), names, from)
	if err == nil {
		err = from.Err()
	}
	if err != nil {
		return n, nil, err
	}
	var got int64
	if err := c.to.Conn().QueryRowContext(ctx, "SELECT count(*) FROM "+c.qualified(p.table.Name)).Scan(&got); err != nil {
		return n, nil, fmt.Errorf("count copied rows: %w", err)
	}
	if got != p.rows || n != p.rows {
		return n, nil, fmt.Errorf("copied %d rows (server holds %d), the source has %d", n, got, p.rows)
	}
	return n, cv.notes(p.table.Name), nil
}

// converter turns SQLite values into the server's, counting the changes it had to make: its
// own (invalid UTF-8 repaired) and the target's (LoadTarget.Value).
type converter struct {
	to      LoadTarget
	cols    []colPlan
	invalid []int64 // per column: text with invalid UTF-8, repaired
	fixed   []map[string]int64
	order   [][]string // per column: the target's changes in the order first made
}

func (cv *converter) row(vals []any) error {
	if cv.invalid == nil {
		cv.invalid = make([]int64, len(cv.cols))
		cv.fixed = make([]map[string]int64, len(cv.cols))
		cv.order = make([][]string, len(cv.cols))
	}
	for i, v := range vals {
		if v == nil {
			continue
		}
		col := cv.cols[i].CopyColumn
		switch col.Kind {
		case CopyFloat:
			if x, ok := v.(int64); ok {
				v = float64(x)
			}
		case CopyText:
			s, ok := v.(string)
			if !ok {
				s = fmt.Sprint(v)
			}
			if !utf8.ValidString(s) {
				s = strings.ToValidUTF8(s, "\uFFFD")
				cv.invalid[i]++
			}
			v = s
		case CopyBlob:
			if s, ok := v.(string); ok {
				v = []byte(s)
			}
		}
		out, fix, err := cv.to.Value(col, v)
		if err != nil {
			return fmt.Errorf("column %s: %w", col.Name, err)
		}
		if fix != "" {
			if cv.fixed[i] == nil {
				cv.fixed[i] = map[string]int64{}
			}
			if cv.fixed[i][fix] == 0 {
				cv.order[i] = append(cv.order[i], fix)
			}
			cv.fixed[i][fix]++
		}
		vals[i] = out
	}
	return nil
}

func (cv *converter) notes(table string) []string {
	var out []string
	for i, c := range cv.cols {
		if i < len(cv.invalid) && cv.invalid[i] > 0 {
			out = append(out, fmt.Sprintf("%s.%s: %d values with invalid UTF-8 repaired (U+FFFD)", table, c.Name, cv.invalid[i]))
		}
		if i < len(cv.order) {
			for _, fix := range cv.order[i] {
				out = append(out, fmt.Sprintf("%s.%s: "+fix, table, c.Name, cv.fixed[i][fix]))
			}
		}
	}
	return out
}

// CopySource is one table's rows as CopySQLite reads them from SQLite, each converted for the
// server (LoadTarget.Value). It is a pgx.CopyFromSource: Next advances to the next row (false
// at the end or on an error), Values returns its values and Err the error that ended it. The
// values slice is the row's own; Rows counts the rows read.
type CopySource struct {
	rows *sql.Rows
	cv   *converter
	vals []any
	n    int64
	err  error
}

// Next reads the next row; false at the end or on an error (Err).
func (s *CopySource) Next() bool {
	if s.err != nil || !s.rows.Next() {
		return false
	}
	s.vals = make([]any, len(s.cv.cols))
	ptrs := make([]any, len(s.vals))
	for i := range s.vals {
		ptrs[i] = &s.vals[i]
	}
	if s.err = s.rows.Scan(ptrs...); s.err != nil {
		s.err = fmt.Errorf("read row %d: %w", s.n+1, s.err)
	} else {
		s.err = s.cv.row(s.vals)
	}
	s.n++
	return s.err == nil
}

// Values returns the current row's values, converted for the server.
func (s *CopySource) Values() ([]any, error) { return s.vals, s.err }

// Err returns the error that ended the rows, if any.
func (s *CopySource) Err() error {
	if s.err != nil {
		return s.err
	}
	if err := s.rows.Err(); err != nil {
		return fmt.Errorf("read rows: %w", err)
	}
	return nil
}

// Rows is how many rows Next has read.
func (s *CopySource) Rows() int64 { return s.n }

// addKeys adds primary keys, then foreign keys whose referenced columns are the referenced
// table's primary key, noting each key it cannot keep.
func (c *copier) addKeys(ctx context.Context, plans []tablePlan) (pks, fks int, notes []string) {
	byName := map[string]*tablePlan{}
	for i := range plans {
		byName[strings.ToLower(plans[i].table.Name)] = &plans[i]
	}
	for i := range plans {
		p := &plans[i]
		if len(p.table.PrimaryKey) == 0 {
			continue
		}
		cols, ok := p.resolve(p.table.PrimaryKey)
		if !ok {
			notes = append(notes, fmt.Sprintf("%s: primary key (%s) names unknown columns; left out", p.table.Name, strings.Join(p.table.PrimaryKey, ", ")))
			continue
		}
		q := "ALTER TABLE " + c.qualified(p.table.Name) + " ADD PRIMARY KEY (" + c.objList(cols) + ")"
		if err := c.exec(ctx, q); err != nil {
			notes = append(notes, fmt.Sprintf("%s: primary key (%s) left out: %v", p.table.Name, strings.Join(cols, ", "), err))
			continue
		}
		p.keyOK = true
		pks++
	}
	for i := range plans {
		p := &plans[i]
		for fi, fk := range p.table.ForeignKeys {
			desc := fmt.Sprintf("%s (%s) → %s (%s)", p.table.Name, strings.Join(fk.Columns, ", "), fk.RefTable, strings.Join(fk.RefColumns, ", "))
			ref := byName[strings.ToLower(fk.RefTable)]
			if ref == nil {
				notes = append(notes, "foreign key "+desc+": the referenced table does not exist; left out")
				continue
			}
			refCols := fk.RefColumns
			if strings.Join(refCols, "") == "" {
				refCols = ref.table.PrimaryKey
			}
			cols, ok1 := p.resolve(fk.Columns)
			rcols, ok2 := ref.resolve(refCols)
			if !ok1 || !ok2 || len(cols) != len(rcols) {
				notes = append(notes, "foreign key "+desc+": unknown or unmatched columns; left out")
				continue
			}
			cols, rcols, ok := alignToKey(cols, rcols, ref)
			if !ok {
				notes = append(notes, "foreign key "+desc+": the referenced columns are not the referenced table's primary key (not known unique); left out")
				continue
			}
			if !sameKinds(p, cols, ref, rcols) {
				notes = append(notes, "foreign key "+desc+": column types differ after mapping; left out")
				continue
			}
			name := fmt.Sprintf("fk_%s_%d", c.serverName(p.table.Name), fi+1)
			if len(name) > 60 {
				name = name[:60]
			}
			q := "ALTER TABLE " + c.qualified(p.table.Name) + " ADD CONSTRAINT " + c.ident(name) + " FOREIGN KEY (" + c.objList(cols) +
				") REFERENCES " + c.qualified(ref.table.Name) + " (" + c.objList(rcols) + ")"
			if err := c.exec(ctx, q); err != nil {
				notes = append(notes, fmt.Sprintf("foreign key %s: left out: %v", desc, err))
				continue
			}
			fks++
		}
	}
	return pks, fks, notes
}

// resolve maps names (SQLite: case-insensitive) onto the table's column names.
func (p *tablePlan) resolve(names []string) ([]string, bool) {
	out := make([]string, len(names))
	for i, n := range names {
		found := false
		for _, c := range p.cols {
			if strings.EqualFold(c.Name, n) {
				out[i], found = c.Name, true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return out, true
}

func (p *tablePlan) col(name string) colPlan {
	for _, c := range p.cols {
		if c.Name == name {
			return c
		}
	}
	return colPlan{}
}

// alignToKey orders the pairs (cols[i] → rcols[i]) as ref's primary key, when rcols are exactly
// that key and it was added on the server.
func alignToKey(cols, rcols []string, ref *tablePlan) ([]string, []string, bool) {
	pk, ok := ref.resolve(ref.table.PrimaryKey)
	if !ok || !ref.keyOK || len(pk) != len(rcols) {
		return nil, nil, false
	}
	oc, orc := make([]string, len(pk)), make([]string, len(pk))
	for i, k := range pk {
		j := -1
		for x, r := range rcols {
			if r == k {
				j = x
			}
		}
		if j < 0 {
			return nil, nil, false
		}
		oc[i], orc[i] = cols[j], k
	}
	return oc, orc, true
}

func sameKinds(p *tablePlan, cols []string, ref *tablePlan, rcols []string) bool {
	for i := range cols {
		a, b := p.col(cols[i]), ref.col(rcols[i])
		if a.Kind != b.Kind || (a.Kind == CopyText || a.Kind == CopyBlob) && strings.Contains(a.typ+b.typ, "LONG") {
			return false
		}
	}
	return true
}

// publish moves the finished copy to target and records its marker.
func (c *copier) publish(ctx context.Context, plans []tablePlan, marker string) error {
	tables := make([]string, len(plans))
	for i, p := range plans {
		tables[i] = c.serverName(p.table.Name)
	}
	return c.to.Publish(ctx, c.temp, c.target, tables, marker)
}

// Source is the optional part of a file Dialect that CopySQLite copies from (SQLite's): the
// database file at path opened read-only, as a DB (Introspect reads its schema) and as the
// database/sql handle under it, on which the copier reads the rows with statements of its own
// (the toolkit's, not a policy's: unscreened). Closing the DB closes both.
type Source interface {
	OpenSource(path string) (DB, *sql.DB, error)
}

// Loader is the optional part of a server Dialect that CopySQLite copies into (distill load).
type Loader interface {
	// OpenLoad connects to the server of dsn as the DSN's own user and takes the copy lock of
	// target: a lock on the server, held by the LoadTarget's session until Close, that
	// serialises the copies of one target across processes.
	OpenLoad(ctx context.Context, dsn, target string) (LoadTarget, error)
}

// LoadTarget is the server side of one copy, from OpenLoad to Close. CopySQLite drives it:
// Completed; then CreateTemp (after DropTemp), a CREATE TABLE per table in the temporary
// namespace, CopyRows per table, the keys (ALTER TABLE ... ADD PRIMARY KEY / FOREIGN KEY, in
// the engine's quoting), and Publish; DropTemp again when a copy fails before Publish. temp and
// target are names CopySQLite checked (letters, digits and _; temp starts with cs_tmp_), and
// every statement CopySQLite writes itself runs on Conn.
type LoadTarget interface {
	// Conn is the session holding the copy lock; CopySQLite's own statements run on it.
	Conn() *sql.Conn
	// Completed reports whether target holds a finished copy carrying marker (Publish's).
	Completed(ctx context.Context, target, marker string) (bool, error)
	// CreateTemp creates the empty namespace temp (a schema or database); DropTemp drops it,
	// with what it holds, when it is there.
	CreateTemp(ctx context.Context, temp string) error
	DropTemp(ctx context.Context, temp string) error
	// Name is a SQLite table's or column's name on the server. Names unique in SQLite (which
	// compares them case-insensitively) must stay unique.
	Name(name string) string
	// ColumnType is the server type that holds c's values (and indexes them when c.Key).
	ColumnType(c CopyColumn) string
	// Value converts a non-nil value of column c, of its kind's Go type (CopyKind), for the
	// server. A value it had to change reports fix, a note with one %d for the count of such
	// values ("NUL bytes removed from %d values (...)"); a value it cannot hold is an error.
	Value(c CopyColumn, v any) (out any, fix string, err error)
	// CopyRows inserts every row of src into table (its server name) of temp, whose columns
	// are cols (server names, in src's order), and returns how many it inserted; an error of
	// src (Err) ends it with that error.
	CopyRows(ctx context.Context, temp, table string, cols []string, src *CopySource) (int64, error)
	// Publish replaces target with temp, whose tables are tables (server names), and records
	// marker for Completed, atomically where the engine can.
	Publish(ctx context.Context, temp, target string, tables []string, marker string) error
	// Close ends the session, releasing the copy lock.
	Close()
}

// LoadSession is what a LoadTarget of a database/sql driver shares: a pool of the DSN's own
// user and the session holding the copy lock (Conn), closed together.
type LoadSession struct {
	pool *sql.DB
	conn *sql.Conn
}

// OpenLoadSession takes a session of pool and the copy lock of target on it (lock); on an error
// it closes pool.
func OpenLoadSession(ctx context.Context, pool *sql.DB, target string, lock func(conn *sql.Conn, name string) error) (*LoadSession, error) {
	pool.SetMaxOpenConns(4)
	conn, err := pool.Conn(ctx)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := lock(conn, "chainedsql-copy:"+target); err != nil {
		conn.Close()
		pool.Close()
		return nil, fmt.Errorf("take the copy lock of %s: %w", target, err)
	}
	return &LoadSession{pool: pool, conn: conn}, nil
}

// Conn is the session holding the copy lock.
func (l *LoadSession) Conn() *sql.Conn { return l.conn }

// Close ends the session, which releases the lock, and the pool.
func (l *LoadSession) Close() {
	l.conn.Close()
	l.pool.Close()
}

// Exec runs q on the session, naming q in its error.
func (l *LoadSession) Exec(ctx context.Context, q string) error {
	if _, err := l.conn.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("%s: %w", FirstLine(q), err)
	}
	return nil
}

// loaderOf returns dialect d's Loader, or an error naming the dialects that have one.
func loaderOf(d datasets.Dialect) (Loader, error) { return optionalPart[Loader](d) }
