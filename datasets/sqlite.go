package datasets

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// sqliteMaxValue caps any one string or blob a statement may build or read (SQLite's
// SQLITE_LIMIT_LENGTH, 1e9 by default), so SELECT randomblob(1e9) fails instead of moving a
// gigabyte into the process.
const sqliteMaxValue = 64 << 20

// sqliteReadDriver is go-sqlite3 with sqliteMaxValue set on every connection.
const sqliteReadDriver = "sqlite3-chainedsql-read"

func init() {
	sql.Register(sqliteReadDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		c.SetLimit(sqlite3.SQLITE_LIMIT_LENGTH, sqliteMaxValue)
		return nil
	}})
}

// sqliteDB is a SQLite file opened read-only and immutable.
type sqliteDB struct {
	db      *sql.DB
	version string
}

// OpenSQLite opens the SQLite file at path read-only (mode=ro&immutable=1). Statements are
// stopped at their deadline through the driver's interrupt on context cancellation.
func OpenSQLite(path string) (DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open sqlite database %s: %w", path, err)
	}
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?mode=ro&immutable=1&_query_only=1"
	db, err := sql.Open(sqliteReadDriver, dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite database %s: %w", path, err)
	}
	var v string
	if err := db.QueryRow("SELECT sqlite_version()").Scan(&v); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite database %s: %w", path, err)
	}
	return &sqliteDB{db: db, version: "SQLite " + v}, nil
}

func (s *sqliteDB) Dialect() Dialect { return SQLite }
func (s *sqliteDB) Version() string  { return s.version }
func (s *sqliteDB) Close() error     { return s.db.Close() }

func (s *sqliteDB) Exec(ctx context.Context, query string, opts ExecOptions) (*Result, error) {
	start := time.Now()
	stmt, timeout, refused := startExec(query, opts)
	if refused != nil {
		return refused, nil
	}
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := collect(qctx, s.db, stmt, opts.MaxRows, nil)
	res.Duration = time.Since(start)
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("sqlite exec: %w", ctx.Err())
	}
	var se sqlite3.Error
	if qctx.Err() != nil || (errors.As(err, &se) && se.Code == sqlite3.ErrInterrupt) {
		return timedOut(timeout, res.Duration), nil
	}
	return &Result{Outcome: OutcomeError, Error: err.Error(), Duration: res.Duration}, nil
}

// startExec screens query and resolves the timeout (zero means 30 s); a non-nil Result is
// the refusal to return.
func startExec(query string, opts ExecOptions) (string, time.Duration, *Result) {
	start := time.Now()
	stmt, reason := screen(query)
	if reason != "" {
		return "", 0, &Result{Outcome: OutcomeRefused, Error: reason, Duration: time.Since(start)}
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return stmt, timeout, nil
}

// timedOut is the Result of a statement stopped at its deadline.
func timedOut(timeout, took time.Duration) *Result {
	return &Result{Outcome: OutcomeTimeout, Error: fmt.Sprintf("statement stopped after %s", timeout), Duration: took}
}

// queryer is what collect runs a query on: *sql.DB, *sql.Conn or *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// columnNormaliser returns, for the result columns, one function per column mapping a driver
// value onto a normalised value (see Result).
type columnNormaliser func(cols []*sql.ColumnType) []func(any) any

// collect runs query and gathers columns, capped rows and the exact total. norm maps driver
// values per column; nil means normalise.
func collect(ctx context.Context, db queryer, query string, maxRows int, norm columnNormaliser) (*Result, error) {
	res := &Result{}
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return res, err
	}
	res.Columns = cols
	conv := make([]func(any) any, len(cols))
	for i := range conv {
		conv[i] = normalise
	}
	if norm != nil {
		types, err := rows.ColumnTypes()
		if err != nil {
			return res, err
		}
		conv = norm(types)
	}
	for rows.Next() {
		res.Total++
		if maxRows > 0 && len(res.Rows) >= maxRows {
			res.Truncated = true
			continue
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return res, err
		}
		for i, v := range vals {
			vals[i] = conv[i](v)
		}
		res.Rows = append(res.Rows, vals)
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	res.Outcome = OutcomeOK
	return res, nil
}

// normalise maps driver values onto nil, int64, float64, string, []byte, bool or time.Time.
func normalise(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case float32:
		return float64(x)
	case []byte:
		return append([]byte(nil), x...)
	}
	return v
}

// readPrefixes are the first keywords of statements that only read.
var readPrefixes = []string{"select", "with", "values", "explain"}

// screen checks that query is exactly one read statement (a trailing semicolon is allowed) and
// returns it trimmed, or a reason to refuse it. Hand-written because no library splits SQL of
// three dialects; it respects quotes and comments.
func screen(query string) (string, string) {
	q := strings.TrimSpace(query)
	body, rest := splitFirst(q)
	if strings.TrimSpace(rest) != "" {
		return "", "refused: only one statement per query is allowed"
	}
	body = strings.TrimSpace(body)
	if body == "" {
		return "", "refused: empty statement"
	}
	lower := strings.ToLower(stripLeadingComments(body))
	ok := false
	for _, p := range readPrefixes {
		if strings.HasPrefix(lower, p) && (len(lower) == len(p) || !isWord(lower[len(p)])) {
			ok = true
		}
	}
	if !ok {
		return "", "refused: only read-only queries (SELECT, WITH, VALUES) are allowed"
	}
	if reason := deniedText(body); reason != "" {
		return "", reason
	}
	return body, ""
}

// deniedWords are functions that reach outside the database (server files, extensions, other
// sessions, settings, dynamic SQL) in one of the engines, MySQL's file-writing INTO targets, and
// catalogs holding credentials or other sessions' statements (the mysql schema is refused in
// deniedText).
// Read-only transactions do not stop them, so they are refused wherever they appear.
var deniedWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`
		load_extension load_file outfile dumpfile writefile readfile fts3_tokenizer
		pg_read_file pg_read_binary_file pg_ls_dir pg_stat_file pg_file_write lo_import lo_export
		lo_from_bytea lo_put lo_get pg_terminate_backend pg_cancel_backend pg_reload_conf
		pg_rotate_logfile pg_promote set_config dblink dblink_exec dblink_connect
		query_to_xml query_to_xmlschema query_to_xml_and_xmlschema cursor_to_xml
		pg_advisory_lock pg_advisory_xact_lock get_lock sys_exec sys_eval
		pg_authid pg_shadow pg_user_mappings pg_hba_file_rules pg_ident_file_mappings
		pg_file_settings pg_stat_activity performance_schema processlist`) {
		deniedWords[w] = true
	}
}

// deniedText refuses query text that calls a denied function or hides code from screening.
// It scans the raw text, strings and comments included: a false refusal costs one turn,
// a missed one could read a server file, so no dialect's quoting rules are trusted here.
func deniedText(q string) string {
	lower := strings.ToLower(q)
	for _, hidden := range []string{"/*!", "/*m!", `u&"`, "u&'", "mysql.", "`mysql`."} {
		if strings.Contains(lower, hidden) {
			return fmt.Sprintf("refused: %q (executable comments, escaped identifiers, the mysql schema) is not allowed", hidden)
		}
	}
	words := strings.FieldsFunc(lower, func(r rune) bool {
		return !(r == '_' || r == '$' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
	for _, w := range words {
		if deniedWords[w] {
			return fmt.Sprintf("refused: %s is not allowed (it reaches outside the database)", w)
		}
	}
	return ""
}

func isWord(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9'
}

func stripLeadingComments(s string) string {
	for {
		s = strings.TrimSpace(s)
		switch {
		case strings.HasPrefix(s, "--"):
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = s[i+1:]
			} else {
				return ""
			}
		case strings.HasPrefix(s, "/*"):
			if i := strings.Index(s, "*/"); i >= 0 {
				s = s[i+2:]
			} else {
				return ""
			}
		default:
			return s
		}
	}
}

// splitFirst splits q at the first semicolon outside quotes and comments.
func splitFirst(q string) (string, string) {
	for i := 0; i < len(q); i++ {
		switch c := q[i]; c {
		case '\'', '"', '`':
			j := i + 1
			for j < len(q) && q[j] != c {
				j++
			}
			i = j
		case '[':
			if j := strings.IndexByte(q[i:], ']'); j >= 0 {
				i += j
			}
		case '-':
			if i+1 < len(q) && q[i+1] == '-' {
				j := strings.IndexByte(q[i:], '\n')
				if j < 0 {
					return q, ""
				}
				i += j
			}
		case '/':
			if i+1 < len(q) && q[i+1] == '*' {
				j := strings.Index(q[i+2:], "*/")
				if j < 0 {
					return q, ""
				}
				i += j + 3
			}
		case ';':
			return q[:i], q[i+1:]
		}
	}
	return q, ""
}
