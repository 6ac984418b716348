package sandbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"math"
	"strconv"
	"strings"
	"time"
)

// What the server engines share: their deadlines past the statement's, dropping a connection,
// and reading values and catalog rows.

// ServerGrace is how long past its deadline a server statement may take to report that the
// server stopped it, before the client gives up on the connection.
const ServerGrace = 2 * time.Second

// CleanupTimeout bounds the ROLLBACK (or KILL QUERY) that ends one execution.
const CleanupTimeout = 5 * time.Second

// Discard makes database/sql drop conn instead of returning it to the pool.
func Discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}

// Decimal is an exact number as its engine wrote it, where int64 would not hold it as the
// engine's client prints it: a MySQL DECIMAL or PostgreSQL numeric with a fraction or past int64
// ("12.50", "99999999999999999999999999999999999.123456789", "NaN"), a MySQL BIGINT UNSIGNED
// past int64. An observation shows this text; the judge compares its Number (an integer past
// int64 and a number past float64's range by their digits).
type Decimal string

// Number is d as a Go number, the value Match compares: int64 when d is integral (its fraction
// all zeros) and fits, else the nearest float64 (NaN included), else (past float64's range)
// d's text as a string.
func (d Decimal) Number() any {
	s := string(d)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if whole, frac, ok := strings.Cut(s, "."); ok && strings.Trim(frac, "0") == "" {
			if i, err := strconv.ParseInt(whole, 10, 64); err == nil {
				return i
			}
		}
		return f
	}
	if strings.EqualFold(s, "NaN") {
		return math.NaN()
	}
	return s
}

// NumericValue reads an engine's decimal text (string or []byte) as int64 when it is an
// integer's digits that fit, else as a Decimal holding the text; other values pass through
// Normalise.
func NumericValue(v any) any {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case []byte:
		s = string(x)
	default:
		return Normalise(v)
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i
	}
	return Decimal(s)
}

// Float32Value widens f through its shortest decimal text, so 0.1 stays 0.1.
func Float32Value(f float32) float64 {
	d, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return d
}

// QueryStrings runs q and returns its first column as strings.
func QueryStrings(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
