package datasets

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Match reports whether pred answers the same as gold: BIRD EX (set equality of rows, column
// order kept) when ordered is false; ordered comparison of row lists when true. Values that are
// the same across engines compare equal: integers and floats equal as numbers, floats after
// rounding to 10 significant digits, []byte equal to the same text, bools as 0/1, times in
// RFC 3339. Both results must have run.
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
		return "s" + string(x)
	case string:
		return "s" + x
	case time.Time:
		return "s" + x.Format(time.RFC3339Nano)
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
