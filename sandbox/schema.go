package sandbox

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Column is one column of a table.
type Column struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	PrimaryKey bool   `json:"primary_key,omitempty"`
	NotNull    bool   `json:"not_null,omitempty"`
	// Samples are a few distinct non-null values, rendered as text.
	Samples []string `json:"samples,omitempty"`
}

// ForeignKey links columns of one table to another's.
type ForeignKey struct {
	Columns    []string `json:"columns"`
	RefTable   string   `json:"ref_table"`
	RefColumns []string `json:"ref_columns"`
}

// Table is one table of a schema.
type Table struct {
	Name        string       `json:"name"`
	Columns     []Column     `json:"columns"`
	PrimaryKey  []string     `json:"primary_key,omitempty"`
	ForeignKeys []ForeignKey `json:"foreign_keys,omitempty"`
}

// Schema is the structure of one database.
type Schema struct {
	DBID   string  `json:"db_id"`
	Tables []Table `json:"tables"`
}

const (
	// sampleChars caps the length of one sample value (in runes); longer ones end in "…".
	sampleChars = 40
	// sampleScanRows bounds the rows read per column when looking for sample values, so sparse
	// columns of big tables cost no full scan.
	sampleScanRows = 10000
	// catalogTimeout bounds each catalog or sample query.
	catalogTimeout = 30 * time.Second
)

// Introspect reads the schema of db: tables in byte order of their names, columns in declared
// order with their declared types, primary and foreign keys, and up to samples distinct non-null
// values per column (taken from the first rows of the table; text collapsed to one line and cut
// to 40 characters; binary values and columns whose values the engine cannot compare get none).
// It reads the engine's catalog through db.Exec (SQLite: sqlite_master and the pragma table-valued
// functions; PostgreSQL: pg_catalog for the current schema; MySQL: information_schema for the
// current database), so any DB of the three dialects works. Schema.DBID is left to the caller.
func Introspect(ctx context.Context, db DB, samples int) (*Schema, error) {
	var (
		s   *Schema
		err error
	)
	d, ok := Lookup(db.Dialect())
	if !ok {
		return nil, fmt.Errorf("datasets: introspect: unknown dialect %q", db.Dialect())
	}
	s, err = d.Introspect(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("datasets: introspect %s database: %w", db.Dialect(), err)
	}
	sort.SliceStable(s.Tables, func(i, j int) bool { return s.Tables[i].Name < s.Tables[j].Name })
	if samples <= 0 {
		return s, nil
	}
	for ti := range s.Tables {
		t := &s.Tables[ti]
		for ci := range t.Columns {
			vals, err := sampleValues(ctx, db, t.Name, t.Columns[ci].Name, samples)
			if err != nil {
				return nil, fmt.Errorf("datasets: introspect %s database: samples of %s.%s: %w", db.Dialect(), t.Name, t.Columns[ci].Name, err)
			}
			t.Columns[ci].Samples = vals
		}
	}
	return s, nil
}

// CatalogQuery runs one catalog statement; refusals, engine errors and timeouts become errors.
func CatalogQuery(ctx context.Context, db DB, sql string) (*Result, error) {
	res, err := db.Exec(ctx, sql, ExecOptions{Timeout: catalogTimeout})
	if err != nil {
		return nil, err
	}
	if !res.OK() {
		return nil, fmt.Errorf("%s: %s", res.Outcome, res.Error)
	}
	return res, nil
}

// sampleValues returns up to n distinct non-null values of one column among its table's first
// sampleScanRows rows, in the engine's order (deterministic for unchanged data).
func sampleValues(ctx context.Context, db DB, table, column string, n int) ([]string, error) {
	d := db.Dialect()
	c := QuoteIdent(d, column)
	q := fmt.Sprintf("SELECT DISTINCT %s FROM (SELECT %s FROM %s LIMIT %d) AS sample_rows WHERE %s IS NOT NULL LIMIT %d",
		c, c, QuoteIdent(d, table), sampleScanRows, c, n)
	res, err := db.Exec(ctx, q, ExecOptions{Timeout: catalogTimeout})
	if err != nil {
		return nil, err
	}
	switch res.Outcome {
	case OutcomeOK:
	case OutcomeError:
		return nil, nil // e.g. PostgreSQL json columns have no equality for DISTINCT
	default:
		return nil, fmt.Errorf("%s: %s", res.Outcome, res.Error)
	}
	out := make([]string, 0, len(res.Rows))
	for _, r := range res.Rows {
		if b, ok := r[0].([]byte); ok && !utf8.Valid(b) {
			continue
		}
		out = append(out, cutSample(ValueText(r[0])))
	}
	return out, nil
}

// cutSample collapses whitespace runs to one space and cuts s to sampleChars runes.
func cutSample(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= sampleChars {
		return s
	}
	return string([]rune(s)[:sampleChars]) + "…"
}

// ValueText renders a normalised value (see Result) as plain text.
func ValueText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case Decimal:
		return string(x)
	case []byte:
		return string(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		if a := math.Abs(x); x == 0 || a >= 1e-4 && a < 1e15 {
			return strconv.FormatFloat(x, 'f', -1, 64)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case time.Time:
		if x.Hour() == 0 && x.Minute() == 0 && x.Second() == 0 && x.Nanosecond() == 0 {
			return x.Format(time.DateOnly)
		}
		return x.Format(time.DateTime)
	}
	return fmt.Sprint(v)
}

// ValueInt reads a catalog integer (int64, float64, bool, Decimal or decimal text).
func ValueInt(v any) (int64, error) {
	switch x := v.(type) {
	case Decimal:
		return ValueInt(x.Number())
	case int64:
		return x, nil
	case float64:
		return int64(x), nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	case []byte:
		return strconv.ParseInt(string(x), 10, 64)
	}
	return 0, fmt.Errorf("catalog value %v (%T) is not an integer", v, v)
}
