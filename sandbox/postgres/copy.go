package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/chainedsql/chainedsql/sandbox"
)

// OpenLoad opens a copy into schema target of the DSN's database, holding an advisory lock on
// target's name (Loader).
func (Dialect) OpenLoad(ctx context.Context, dsn, target string) (sandbox.LoadTarget, error) {
	pool, err := openPostgresPool(dsn)
	if err != nil {
		return nil, err
	}
	sess, err := sandbox.OpenLoadSession(ctx, pool, target, func(conn *sql.Conn, lock string) error {
		_, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(hashtext($1))", lock)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &pgLoad{sess}, nil
}

// pgLoad is a copy into PostgreSQL: a schema, its marker the schema's comment, rows by COPY.
type pgLoad struct{ *sandbox.LoadSession }

func (l *pgLoad) ident(name string) string { return Dialect{}.QuoteIdent(name) }

func (l *pgLoad) Completed(ctx context.Context, target, marker string) (bool, error) {
	var got sql.NullString
	err := l.Conn().QueryRowContext(ctx, "SELECT obj_description(oid, 'pg_namespace') FROM pg_catalog.pg_namespace WHERE nspname = $1", target).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil && got.Valid && got.String == marker, err
}

func (l *pgLoad) DropTemp(ctx context.Context, temp string) error {
	return l.Exec(ctx, "DROP SCHEMA IF EXISTS "+temp+" CASCADE")
}

func (l *pgLoad) CreateTemp(ctx context.Context, temp string) error {
	return l.Exec(ctx, "CREATE SCHEMA "+temp)
}

// Name folds ASCII upper case to lower case, as PostgreSQL folds unquoted names, so that SQL
// written for SQLite, where names match case-insensitively, finds them unquoted in any case.
// SQLite names are unique case-insensitively, so folding never collides.
func (*pgLoad) Name(name string) string {
	b := []byte(name)
	for i, x := range b {
		if x >= 'A' && x <= 'Z' {
			b[i] = x + 'a' - 'A'
		}
	}
	return string(b)
}

func (*pgLoad) ColumnType(c sandbox.CopyColumn) string {
	return [...]string{"bigint", "double precision", "numeric", "text", "bytea", "date", "timestamp"}[c.Kind]
}

// Value removes NUL bytes from text (PostgreSQL text cannot hold them) and parses dates and
// date-times.
func (*pgLoad) Value(c sandbox.CopyColumn, v any) (any, string, error) {
	switch c.Kind {
	case sandbox.CopyText:
		if s, ok := v.(string); ok && strings.IndexByte(s, 0) >= 0 {
			return strings.ReplaceAll(s, "\x00", ""), "NUL bytes removed from %d values (PostgreSQL text cannot hold them)", nil
		}
	case sandbox.CopyDate, sandbox.CopyDateTime:
		s, _ := v.(string)
		t, err := time.Parse(time.DateTime, s)
		if err != nil {
			if t, err = time.Parse(time.DateOnly, s); err != nil {
				return nil, "", fmt.Errorf("date %q: %w", s, err)
			}
		}
		return t, "", nil
	}
	return v, "", nil
}

// CopyRows copies the rows with COPY FROM STDIN through pgx.
func (l *pgLoad) CopyRows(ctx context.Context, temp, table string, cols []string, src *sandbox.CopySource) (int64, error) {
	var copied int64
	err := l.Conn().Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("driver connection %T is not pgx's", dc)
		}
		n, err := pc.Conn().CopyFrom(ctx, pgx.Identifier{temp, table}, cols, src)
		copied = n
		return err
	})
	if err != nil {
		return copied, fmt.Errorf("COPY (row %d): %w", src.Rows(), err)
	}
	return copied, nil
}

// Publish drops target, renames temp to it and comments it with marker, in one transaction.
func (l *pgLoad) Publish(ctx context.Context, temp, target string, _ []string, marker string) error {
	lit := "'" + strings.ReplaceAll(marker, "'", "''") + "'"
	return l.Exec(ctx, fmt.Sprintf("BEGIN; DROP SCHEMA IF EXISTS %s CASCADE; ALTER SCHEMA %s RENAME TO %s; COMMENT ON SCHEMA %s IS %s; COMMIT",
		l.ident(target), temp, l.ident(target), l.ident(target), lit))
}
