package datasets

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Match reports whether pred answers the same as gold: BIRD EX (set equality of rows, column
// order kept) when ordered is false; ordered comparison of row lists when true. Values that are
// the same across engines compare equal: integers and floats equal as numbers, floats after
// rounding to 10 significant digits, []byte equal to the same text, bools as 0/1, and times
// equal to text holding the same date or date-time (see dateKey). Both results must have run.
func Match(gold, pred *Result, ordered bool) bool {
	if !gold.OK() || !pred.OK() {
		return false
	}
	if ordered {
		if len(gold.Rows) != len(pred.Rows) {
			return false
		}
		for i := range gold.Rows {
			if RowKey(gold.Rows[i]) != RowKey(pred.Rows[i]) {
				return false
			}
		}
		return true
	}
	g, p := rowSet(gold.Rows), rowSet(pred.Rows)
	if len(g) != len(p) {
		return false
	}
	for k := range g {
		if !p[k] {
			return false
		}
	}
	return true
}

func rowSet(rows [][]any) map[string]bool {
	s := make(map[string]bool, len(rows))
	for _, r := range rows {
		s[RowKey(r)] = true
	}
	return s
}

// RowKey is a canonical text of a row: equal keys mean equal rows under Match's value rules.
func RowKey(row []any) string {
	var b strings.Builder
	for i, v := range row {
		if i > 0 {
			b.WriteByte(0x1f)
		}
		b.WriteString(valueKey(v))
	}
	return b.String()
}

func valueKey(v any) string {
	switch x := v.(type) {
	case nil:
		return "\x00null"
	case int64:
		return "n" + strconv.FormatInt(x, 10)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return "n" + strconv.FormatInt(int64(x), 10)
		}
		return "n" + strconv.FormatFloat(x, 'g', 10, 64)
	case bool:
		if x {
			return "n1"
		}
		return "n0"
	case []byte:
		return "s" + dateKey(string(x))
	case string:
		return "s" + dateKey(x)
	case time.Time:
		return "s" + timeText(x)
	}
	return "s" + fmt.Sprint(v)
}

// HasOrderBy reports whether the outermost query of sql has an ORDER BY clause (ORDER BY inside
// parentheses, strings and comments does not count).
func HasOrderBy(sql string) bool {
	depth := 0
	var top bytes.Buffer
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for j < len(sql) && sql[j] != c {
				j++
			}
			i = j
			top.WriteByte(' ')
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
			top.WriteByte(' ')
		case c == '(':
			depth++
		case c == ')':
			depth--
		case depth == 0:
			top.WriteByte(c)
		}
	}
	f := strings.Fields(strings.ToLower(top.String()))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "order" && f[i+1] == "by" {
			return true
		}
	}
	return false
}

// dateText matches text holding a date or a date-time without a zone other than UTC, the forms
// SQLite stores dates in and the servers print them in.
var dateText = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?(Z|[+-]00:?00)?$`)

// dateKey returns s in timeText's form when it holds a valid date or date-time, so that
// "2009-01-01 00:00:00", "2009-01-01T00:00:00Z", "2009-01-01" and a time.Time of that midnight
// (SQLite's driver turns DATE/DATETIME column text into time.Time, the servers return their
// date types as time.Time, and date functions and text-kept dates give text) all compare equal.
// Other text is returned as it is.
func dateKey(s string) string {
	if len(s) < 10 || len(s) > 40 || !dateText.MatchString(s) {
		return s
	}
	body := strings.TrimSuffix(s, "Z")
	if i := strings.LastIndexAny(body, "+-"); i > 10 {
		body = body[:i]
	}
	body = strings.Replace(body, "T", " ", 1)
	for _, layout := range []string{time.DateOnly, "2006-01-02 15:04", time.DateTime, "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, body); err == nil {
			return timeText(t)
		}
	}
	return s
}

// timeText renders t's wall clock (its zone ignored) as "2006-01-02" at midnight, else as
// "2006-01-02 15:04:05" with any fraction of a second.
func timeText(t time.Time) string {
	if t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 && t.Nanosecond() == 0 {
		return t.Format(time.DateOnly)
	}
	return t.Format("2006-01-02 15:04:05.999999999")
}
