package fakedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/chainedsql/chainedsql/sandbox"
)

// OpenLoad makes FakeDB a copy target of sandbox.CopySQLite (sandbox.Loader): each namespace is
// a file of the DSN's directory, attached to a session on the directory's marker file
// (.fakedb.sqlite), and Publish moves the finished file to <target>.sqlite, where Open reads
// it. FakeDB serves one process: it takes no copy lock across processes.
func (Dialect) OpenLoad(ctx context.Context, dsn, _ string) (sandbox.LoadTarget, error) {
	pool, err := sql.Open("sqlite3", filepath.Join(dsn, ".fakedb.sqlite"))
	if err != nil {
		return nil, err
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &load{dir: dsn, pool: pool, conn: conn}, nil
}

// load is one copy into FakeDB.
type load struct {
	dir  string
	pool *sql.DB
	conn *sql.Conn
}

func (l *load) Conn() *sql.Conn { return l.conn }
func (l *load) Close()          { l.conn.Close(); l.pool.Close() }

func (l *load) file(name string) string { return filepath.Join(l.dir, name+".sqlite") }

func (l *load) Completed(ctx context.Context, target, marker string) (bool, error) {
	if _, err := l.conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS copies (target TEXT PRIMARY KEY, marker TEXT)"); err != nil {
		return false, err
	}
	var got string
	err := l.conn.QueryRowContext(ctx, "SELECT marker FROM copies WHERE target = ?", target).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if _, serr := os.Stat(l.file(target)); err == nil && serr != nil {
		return false, nil
	}
	return got == marker, err
}

func (l *load) CreateTemp(ctx context.Context, temp string) error {
	_, err := l.conn.ExecContext(ctx, "ATTACH DATABASE ? AS "+sandbox.QuoteWith(temp, false, `"`), l.file(temp))
	return err
}

func (l *load) DropTemp(ctx context.Context, temp string) error {
	l.conn.ExecContext(ctx, "DETACH DATABASE "+sandbox.QuoteWith(temp, false, `"`)) // not attached: nothing to detach
	if err := os.Remove(l.file(temp)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func (*load) Name(name string) string { return name }

func (*load) ColumnType(c sandbox.CopyColumn) string {
	switch c.Kind {
	case sandbox.CopyInt:
		return "INTEGER"
	case sandbox.CopyFloat:
		return "REAL"
	case sandbox.CopyDecimal:
		return "NUMERIC"
	case sandbox.CopyBlob:
		return "BLOB"
	}
	return "TEXT"
}

// Value replaces tabs in text, so that a copy reports a change it made (a note with its count).
func (*load) Value(_ sandbox.CopyColumn, v any) (any, string, error) {
	if s, ok := v.(string); ok && strings.Contains(s, "\t") {
		return strings.ReplaceAll(s, "\t", " "), "tabs replaced in %d values (FakeDB)", nil
	}
	return v, "", nil
}

func (l *load) CopyRows(ctx context.Context, temp, table string, cols []string, src *sandbox.CopySource) (int64, error) {
	q := fmt.Sprintf("INSERT INTO %s.%s VALUES (%s)", sandbox.QuoteWith(temp, false, `"`), sandbox.QuoteWith(table, false, `"`),
		strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", "))
	var n int64
	for src.Next() {
		vals, err := src.Values()
		if err != nil {
			return n, err
		}
		if _, err := l.conn.ExecContext(ctx, q, vals...); err != nil {
			return n, err
		}
		n++
	}
	return n, src.Err()
}

func (l *load) Publish(ctx context.Context, temp, target string, _ []string, marker string) error {
	if _, err := l.conn.ExecContext(ctx, "DETACH DATABASE "+sandbox.QuoteWith(temp, false, `"`)); err != nil {
		return err
	}
	if err := os.Rename(l.file(temp), l.file(target)); err != nil {
		return err
	}
	_, err := l.conn.ExecContext(ctx, "INSERT OR REPLACE INTO copies VALUES (?, ?)", target, marker)
	return err
}
