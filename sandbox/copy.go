package sandbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/chainedsql/chainedsql/datasets"
)

// copyFormat versions the copy: a completed copy made by another format is redone. Bump it
// whenever the mapping of types, names or keys changes.
const copyFormat = "chainedsql-copy/2"

// mysqlMetaDB holds, on MySQL servers, the table of completed copies (MySQL has no database
// comments to keep the marker in).
const mysqlMetaDB = "chainedsql_meta"

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
	case readerMeta, "mysql", "information_schema", "performance_schema", "sys", "public":
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
	if d != datasets.Postgres && d != datasets.MySQL {
		return st, fmt.Errorf("copy %s: dialect %q: want postgres or mysql", sqlitePath, d)
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
	c, err := openCopier(ctx, d, dsn, target)
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
	src, err := OpenSQLite(sqlitePath)
	if err != nil {
		return st, wrap(err)
	}
	defer src.Close()
	schema, err := Introspect(ctx, src, 0)
	if err != nil {
		return st, wrap(err)
	}
	raw := src.(*sqliteDB).db
	plans := make([]tablePlan, len(schema.Tables))
	for i, t := range schema.Tables {
		if plans[i], err = planTable(ctx, raw, d, t); err != nil {
			return st, wrap(err)
		}
	}
	if err := c.createTemp(ctx); err != nil {
		return st, wrap(err)
	}
	published := false
	defer func() {
		if !published { // best effort; the next copy drops it anyway
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
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

// colKind is how a column's values travel and which server type holds them.
type colKind int

const (
	kindInt colKind = iota
	kindFloat
	kindDecimal
	kindText
	kindBlob
	kindDate     // text that is all valid YYYY-MM-DD dates
	kindDateTime // text that is all valid YYYY-MM-DD[ HH:MM:SS] date-times
)

// colPlan is one column of a table to copy.
type colPlan struct {
	name   string
	kind   colKind
	typ    string // server type
	maxLen int64  // longest value as text (characters) or blob (bytes)
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
func chooseKind(decl string, ints, reals, texts, blobs int64) colKind {
	u := strings.ToUpper(decl)
	aff := sqliteAffinity(decl)
	decimal := aff == "numeric" && (strings.Contains(u, "DEC") || strings.Contains(u, "NUM"))
	switch {
	case blobs > 0:
		return kindBlob
	case texts > 0, aff == "text":
		return kindText
	case reals > 0 && decimal:
		return kindDecimal
	case reals > 0:
		return kindFloat
	case ints > 0:
		return kindInt
	}
	// No values: go by the declared type.
	switch {
	case aff == "integer":
		return kindInt
	case aff == "real":
		return kindFloat
	case decimal:
		return kindDecimal
	case aff == "blob" && strings.Contains(u, "BLOB"):
		return kindBlob
	case aff == "numeric" && !strings.Contains(u, "DATE") && !strings.Contains(u, "TIME"):
		return kindInt
	}
	return kindText
}

// dateKind types a text column declared as a date or time (DATE, DATETIME, TIMESTAMP) whose
// values (texts of them) are all valid dates (dates of them) or dates and date-times
// (datetimes): gold SQL written for the servers uses their date functions on such columns.
// Anything else stays text.
func dateKind(decl string, texts, dates, datetimes int64) colKind {
	u := strings.ToUpper(decl)
	if texts == 0 || sqliteAffinity(decl) == "text" || !strings.Contains(u, "DATE") && !strings.Contains(u, "TIME") {
		return kindText
	}
	switch {
	case dates == texts:
		return kindDate
	case dates+datetimes == texts:
		return kindDateTime
	}
	return kindText
}

// planTable reads a table's row count and each column's storage classes and longest value.
func planTable(ctx context.Context, src *sql.DB, d datasets.Dialect, t Table) (tablePlan, error) {
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
		cp := colPlan{name: c.Name, kind: chooseKind(c.Type, v[0], v[1], v[2], v[3]), maxLen: v[4]}
		if cp.kind == kindText {
			cp.kind = dateKind(c.Type, v[2], v[5], v[6])
		}
		cp.typ = serverType(d, cp, keys[strings.ToLower(c.Name)])
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

// mysqlKeyChars is the longest VARCHAR (utf8mb4) MySQL can index in one key part.
const mysqlKeyChars = 768

// serverType maps a column plan onto a server type; in MySQL, key columns of text or blobs
// need a bounded type to be indexable.
func serverType(d datasets.Dialect, c colPlan, key bool) string {
	if d == datasets.Postgres {
		return [...]string{"bigint", "double precision", "numeric", "text", "bytea", "date", "timestamp"}[c.kind]
	}
	switch {
	case c.kind == kindText && key && c.maxLen <= mysqlKeyChars:
		return fmt.Sprintf("VARCHAR(%d)", max(c.maxLen, 64))
	case c.kind == kindBlob && key && c.maxLen <= 3072:
		return fmt.Sprintf("VARBINARY(%d)", max(c.maxLen, 64))
	}
	return [...]string{"BIGINT", "DOUBLE", "DOUBLE", "LONGTEXT", "LONGBLOB", "DATE", "DATETIME"}[c.kind]
}

// selectExpr reads a column so the driver hands over the kind's Go type (casts keep
// go-sqlite3 from turning DATE or BOOLEAN columns into time.Time or bool).
func selectExpr(c colPlan) string {
	q := QuoteIdent(datasets.SQLite, c.name)
	switch c.kind {
	case kindInt:
		return "CAST(" + q + " AS INTEGER)"
	case kindFloat:
		return "CAST(" + q + " AS REAL)"
	case kindDecimal:
		return "CAST(" + q + " AS NUMERIC)"
	case kindText, kindDate, kindDateTime:
		return "CAST(" + q + " AS TEXT)"
	}
	return q
}

// copier is the server side of one copy.
type copier struct {
	d      datasets.Dialect
	target string
	temp   string
	pool   *sql.DB
	conn   *sql.Conn // holds the copy lock
}

// tempName is the temporary schema/database a copy of target is built in.
func tempName(target string) string {
	h := sha256.Sum256([]byte(target))
	return "cs_tmp_" + hex.EncodeToString(h[:8])
}

func openCopier(ctx context.Context, d datasets.Dialect, dsn, target string) (*copier, error) {
	c := &copier{d: d, target: target, temp: tempName(target)}
	if d == datasets.Postgres {
		pool, err := openPostgresPool(dsn)
		if err != nil {
			return nil, err
		}
		c.pool = pool
	} else {
		cfg, err := mysqlConfig(dsn, "")
		if err != nil {
			return nil, err
		}
		cfg.InterpolateParams = true
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, fmt.Errorf("mysql: %w", err)
		}
		c.pool = sql.OpenDB(conn)
	}
	c.pool.SetMaxOpenConns(4)
	conn, err := c.pool.Conn(ctx)
	if err != nil {
		c.pool.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	c.conn = conn
	lock := "chainedsql-copy:" + target
	if d == datasets.Postgres {
		_, err = conn.ExecContext(ctx, "SELECT pg_advisory_lock(hashtext($1))", lock)
	} else {
		var got sql.NullInt64
		err = conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 3600)", lock).Scan(&got)
		if err == nil && got.Int64 != 1 {
			err = fmt.Errorf("GET_LOCK %s: not granted", lock)
		}
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("take the copy lock of %s: %w", target, err)
	}
	return c, nil
}

func (c *copier) close() {
	if c.conn != nil {
		c.conn.Close() // closing the session releases the lock
	}
	c.pool.Close()
}

func (c *copier) ident(name string) string { return QuoteIdent(c.d, name) }

func (c *copier) exec(ctx context.Context, q string, args ...any) error {
	if _, err := c.conn.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("%s: %w", firstLine(q), err)
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// completed reports whether target holds a finished copy with marker.
func (c *copier) completed(ctx context.Context, marker string) (bool, error) {
	var got sql.NullString
	var err error
	if c.d == datasets.Postgres {
		err = c.conn.QueryRowContext(ctx, "SELECT obj_description(oid, 'pg_namespace') FROM pg_catalog.pg_namespace WHERE nspname = $1", c.target).Scan(&got)
	} else {
		if err := c.exec(ctx, "CREATE DATABASE IF NOT EXISTS "+mysqlMetaDB); err != nil {
			return false, err
		}
		if err := c.exec(ctx, "CREATE TABLE IF NOT EXISTS "+mysqlMetaDB+".copies (target VARCHAR(64) PRIMARY KEY, marker VARCHAR(200) NOT NULL, copied_at DATETIME NOT NULL)"); err != nil {
			return false, err
		}
		// Forget markers of databases dropped since (tests, hand clean-ups).
		if err := c.exec(ctx, "DELETE FROM "+mysqlMetaDB+".copies WHERE target NOT IN (SELECT SCHEMA_NAME FROM information_schema.SCHEMATA)"); err != nil {
			return false, err
		}
		err = c.conn.QueryRowContext(ctx, "SELECT m.marker FROM "+mysqlMetaDB+".copies m JOIN information_schema.SCHEMATA s ON s.SCHEMA_NAME = m.target WHERE m.target = ?", c.target).Scan(&got)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the copy marker: %w", err)
	}
	return got.Valid && got.String == marker, nil
}

// dropTemp drops the temporary schema/database, if there is one.
func (c *copier) dropTemp(ctx context.Context) error {
	if c.d == datasets.Postgres {
		return c.exec(ctx, "DROP SCHEMA IF EXISTS "+c.temp+" CASCADE")
	}
	return c.exec(ctx, "DROP DATABASE IF EXISTS "+c.temp)
}

// createTemp drops what an interrupted copy left and creates the empty temporary place.
func (c *copier) createTemp(ctx context.Context) error {
	if err := c.dropTemp(ctx); err != nil {
		return err
	}
	if c.d == datasets.Postgres {
		return c.exec(ctx, "CREATE SCHEMA "+c.temp)
	}
	return c.exec(ctx, "CREATE DATABASE "+c.temp+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
}

// serverName is a table's or column's name on the server: in PostgreSQL folded to lower case
// (ASCII only, as PostgreSQL folds unquoted names), so that SQL written for SQLite, where names
// match case-insensitively, finds them unquoted in any case. SQLite names are unique
// case-insensitively, so folding never collides. MySQL keeps the names as they are: its table
// names are case-sensitive unless the server runs with lower_case_table_names=1, and folding
// them there made fewer Spider dev gold queries run (49% against 71% kept).
func (c *copier) serverName(name string) string {
	if c.d != datasets.Postgres {
		return name
	}
	b := []byte(name)
	for i, x := range b {
		if x >= 'A' && x <= 'Z' {
			b[i] = x + 'a' - 'A'
		}
	}
	return string(b)
}

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
		defs[i] = c.obj(col.name) + " " + col.typ
		if p.table.Columns[i].NotNull {
			defs[i] += " NOT NULL"
		}
		sel[i] = selectExpr(col)
		names[i] = c.serverName(col.name)
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
	cv := &converter{d: c.d, cols: p.cols}
	var n int64
	if c.d == datasets.Postgres {
		n, err = c.copyPostgres(ctx, p, names, rows, cv)
	} else {
		n, err = c.copyMySQL(ctx, p, names, rows, cv)
	}
	if err != nil {
		return n, nil, err
	}
	var got int64
	if err := c.conn.QueryRowContext(ctx, "SELECT count(*) FROM "+c.qualified(p.table.Name)).Scan(&got); err != nil {
		return n, nil, fmt.Errorf("count copied rows: %w", err)
	}
	if got != p.rows || n != p.rows {
		return n, nil, fmt.Errorf("copied %d rows (server holds %d), the source has %d", n, got, p.rows)
	}
	return n, cv.notes(p.table.Name), nil
}

// converter turns SQLite values into the server's, counting the changes it had to make.
type converter struct {
	d       datasets.Dialect
	cols    []colPlan
	invalid []int64 // per column: text with invalid UTF-8, repaired
	nul     []int64 // per column: text with NUL bytes, which PostgreSQL text cannot hold
}

func (cv *converter) row(vals []any) error {
	if cv.invalid == nil {
		cv.invalid = make([]int64, len(cv.cols))
		cv.nul = make([]int64, len(cv.cols))
	}
	for i, v := range vals {
		if v == nil {
			continue
		}
		switch cv.cols[i].kind {
		case kindFloat, kindDecimal:
			if x, ok := v.(int64); ok && cv.cols[i].kind == kindFloat {
				vals[i] = float64(x)
			}
			if x, ok := v.(float64); ok && math.IsInf(x, 0) && cv.d == datasets.MySQL {
				return fmt.Errorf("column %s: value %v: MySQL DOUBLE has no infinity", cv.cols[i].name, x)
			}
		case kindText:
			s, ok := v.(string)
			if !ok {
				s = fmt.Sprint(v)
			}
			if !utf8.ValidString(s) {
				s = strings.ToValidUTF8(s, "\uFFFD")
				cv.invalid[i]++
			}
			if cv.d == datasets.Postgres && strings.IndexByte(s, 0) >= 0 {
				s = strings.ReplaceAll(s, "\x00", "")
				cv.nul[i]++
			}
			vals[i] = s
		case kindBlob:
			if s, ok := v.(string); ok {
				vals[i] = []byte(s)
			}
		case kindDate, kindDateTime:
			if cv.d != datasets.Postgres {
				continue // MySQL reads the text itself
			}
			s, _ := v.(string)
			t, err := time.Parse(time.DateTime, s)
			if err != nil {
				if t, err = time.Parse(time.DateOnly, s); err != nil {
					return fmt.Errorf("column %s: date %q: %w", cv.cols[i].name, s, err)
				}
			}
			vals[i] = t
		}
	}
	return nil
}

func (cv *converter) notes(table string) []string {
	var out []string
	for i, c := range cv.cols {
		if i < len(cv.invalid) && cv.invalid[i] > 0 {
			out = append(out, fmt.Sprintf("%s.%s: %d values with invalid UTF-8 repaired (U+FFFD)", table, c.name, cv.invalid[i]))
		}
		if i < len(cv.nul) && cv.nul[i] > 0 {
			out = append(out, fmt.Sprintf("%s.%s: NUL bytes removed from %d values (PostgreSQL text cannot hold them)", table, c.name, cv.nul[i]))
		}
	}
	return out
}

// rowSource feeds SQLite rows to pgx's COPY.
type rowSource struct {
	rows *sql.Rows
	cv   *converter
	vals []any
	n    int64
	err  error
}

func (s *rowSource) Next() bool {
	if s.err != nil || !s.rows.Next() {
		return false
	}
	s.vals = make([]any, len(s.cv.cols))
	ptrs := make([]any, len(s.vals))
	for i := range s.vals {
		ptrs[i] = &s.vals[i]
	}
	if s.err = s.rows.Scan(ptrs...); s.err == nil {
		s.err = s.cv.row(s.vals)
	}
	s.n++
	return s.err == nil
}

func (s *rowSource) Values() ([]any, error) { return s.vals, s.err }

func (s *rowSource) Err() error {
	if s.err != nil {
		return s.err
	}
	return s.rows.Err()
}

func (c *copier) copyPostgres(ctx context.Context, p *tablePlan, names []string, rows *sql.Rows, cv *converter) (int64, error) {
	src := &rowSource{rows: rows, cv: cv}
	var copied int64
	err := c.conn.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("driver connection %T is not pgx's", dc)
		}
		n, err := pc.Conn().CopyFrom(ctx, pgx.Identifier{c.temp, c.serverName(p.table.Name)}, names, src)
		copied = n
		return err
	})
	if err != nil {
		return copied, fmt.Errorf("COPY (row %d): %w", src.n, err)
	}
	return copied, nil
}

// mysqlBatchBytes bounds one multi-row INSERT, well under max_allowed_packet.
const mysqlBatchBytes = 2 << 20

func (c *copier) copyMySQL(ctx context.Context, p *tablePlan, names []string, rows *sql.Rows, cv *converter) (int64, error) {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = c.ident(n)
	}
	head := "INSERT INTO " + c.qualified(p.table.Name) + " (" + strings.Join(quoted, ", ") + ") VALUES "
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(names)), ", ") + ")"
	var (
		args  []any
		count int
		size  int
		n     int64
	)
	flush := func() error {
		if count == 0 {
			return nil
		}
		q := head + strings.TrimSuffix(strings.Repeat(tuple+", ", count), ", ")
		if _, err := c.conn.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("INSERT rows %d-%d: %w", n-int64(count)+1, n, err)
		}
		args, count, size = args[:0], 0, 0
		return nil
	}
	for rows.Next() {
		vals := make([]any, len(names))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return n, fmt.Errorf("read row %d: %w", n+1, err)
		}
		if err := cv.row(vals); err != nil {
			return n, err
		}
		for _, v := range vals {
			switch x := v.(type) {
			case string:
				size += len(x) + 4
			case []byte:
				size += 2*len(x) + 4
			default:
				size += 24
			}
		}
		args = append(args, vals...)
		count++
		n++
		if size >= mysqlBatchBytes || count >= 1000 || len(args) >= 60000 {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("read rows: %w", err)
	}
	return n, flush()
}

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
			if strings.EqualFold(c.name, n) {
				out[i], found = c.name, true
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
		if c.name == name {
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
		if a.kind != b.kind || (a.kind == kindText || a.kind == kindBlob) && strings.Contains(a.typ+b.typ, "LONG") {
			return false
		}
	}
	return true
}

// publish moves the finished copy to target and records its marker.
func (c *copier) publish(ctx context.Context, plans []tablePlan, marker string) error {
	lit := "'" + strings.ReplaceAll(marker, "'", "''") + "'"
	if c.d == datasets.Postgres {
		return c.exec(ctx, fmt.Sprintf("BEGIN; DROP SCHEMA IF EXISTS %s CASCADE; ALTER SCHEMA %s RENAME TO %s; COMMENT ON SCHEMA %s IS %s; COMMIT",
			c.ident(c.target), c.temp, c.ident(c.target), c.ident(c.target), lit))
	}
	steps := []string{
		"DELETE FROM " + mysqlMetaDB + ".copies WHERE target = '" + c.target + "'",
		"DROP DATABASE IF EXISTS " + c.ident(c.target),
		"CREATE DATABASE " + c.ident(c.target) + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
	}
	if len(plans) > 0 {
		renames := make([]string, len(plans))
		for i, p := range plans {
			renames[i] = c.qualified(p.table.Name) + " TO " + c.ident(c.target) + "." + c.obj(p.table.Name)
		}
		steps = append(steps, "RENAME TABLE "+strings.Join(renames, ", "))
	}
	steps = append(steps, "DROP DATABASE "+c.temp,
		"INSERT INTO "+mysqlMetaDB+".copies (target, marker, copied_at) VALUES ('"+c.target+"', "+lit+", UTC_TIMESTAMP())")
	for _, s := range steps {
		if err := c.exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}
