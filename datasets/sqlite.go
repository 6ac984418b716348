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
	db, err := sql.Open("sqlite3", dsn)
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
	stmt, reason := screen(query)
	if reason != "" {
		return &Result{Outcome: OutcomeRefused, Error: reason, Duration: time.Since(start)}, nil
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := collect(qctx, s.db, stmt, opts.MaxRows)
	res.Duration = time.Since(start)
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("sqlite exec: %w", ctx.Err())
	}
	var se sqlite3.Error
	if qctx.Err() != nil || (errors.As(err, &se) && se.Code == sqlite3.ErrInterrupt) {
		return &Result{Outcome: OutcomeTimeout, Error: fmt.Sprintf("statement stopped after %s", timeout), Duration: res.Duration}, nil
	}
	return &Result{Outcome: OutcomeError, Error: err.Error(), Duration: res.Duration}, nil
}

// collect runs query and gathers columns, capped rows and the exact total.
func collect(ctx context.Context, db *sql.DB, query string, maxRows int) (*Result, error) {
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
			vals[i] = normalise(v)
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
	return body, ""
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
