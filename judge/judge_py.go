package judge

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// valueModel is how a judge sees values: key(a) == key(b) exactly when the values are equal,
// and sortKey is the text test-suite-sql-eval's unorder_row sorts a row's values by.
type valueModel interface {
	key(v any) string
	sortKey(v any) string
}

// pyModel is Python's view of what its sqlite3 module returns (both official evaluators run on
// it): int == float of the same value (1 == 1.0), floats exact, str != bytes, None == None.
type pyModel struct{}

// engineModel is the cross-engine view of Match (see valueKey).
type engineModel struct{}

func (pyModel) key(v any) string         { return pyValueKey(v) }
func (pyModel) sortKey(v any) string     { return pyStr(v) + pyTypeName(v) }
func (engineModel) key(v any) string     { return valueKey(v) }
func (engineModel) sortKey(v any) string { return valueKey(v) }

// rowKey is a canonical text of a row under m: equal keys mean equal rows. Each value is
// length-prefixed so no text can forge a separator.
func rowKey(m valueModel, row []any) string {
	var b strings.Builder
	for _, v := range row {
		k := m.key(v)
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

// setEqual is BIRD's set(pred) == set(gold) over rows.
func setEqual(m valueModel, gold, pred [][]any) bool {
	g, p := keySet(m, gold), keySet(m, pred)
	if len(g) != len(p) {
		return false
	}
	for k := range g {
		if _, ok := p[k]; !ok {
			return false
		}
	}
	return true
}

// rowKeys are the rowKeys of rows under m.
func rowKeys(m valueModel, rows [][]any) []string {
	keys := make([]string, len(rows))
	for i, r := range rows {
		keys[i] = rowKey(m, r)
	}
	return keys
}

func keySet(m valueModel, rows [][]any) map[string]struct{} {
	s := make(map[string]struct{}, len(rows))
	for _, r := range rows {
		s[rowKey(m, r)] = struct{}{}
	}
	return s
}

// listEqual compares row lists in order, or as multisets (duplicates counted), column order kept.
func listEqual(m valueModel, gold, pred [][]any, ordered bool) bool {
	if len(gold) != len(pred) {
		return false
	}
	if ordered {
		for i := range gold {
			if rowKey(m, gold[i]) != rowKey(m, pred[i]) {
				return false
			}
		}
		return true
	}
	g := make([]string, len(gold))
	p := make([]string, len(pred))
	for i := range gold {
		g[i], p[i] = rowKey(m, gold[i]), rowKey(m, pred[i])
	}
	return sameMultiset(g, p)
}

func sameMultiset(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	count := make(map[string]int, len(a))
	for _, k := range a {
		count[k]++
	}
	for _, k := range b {
		if count[k] == 0 {
			return false
		}
		count[k]--
	}
	return true
}

// spiderResultEq is test-suite-sql-eval's result_eq(gold, pred, order_matters):
//   - two empty results are equal (whatever their columns), else the row counts and the first
//     rows' column counts must agree;
//   - quick_rej: each row's values sorted by str(value)+str(type(value)) must give the same
//     list of rows (ordered) or the same set of rows (unordered). The sort runs on text, so an
//     int and an equal float can sort to different places: gold (1, 1.5) vs pred (1.0, 1.5) sort
//     to (1.5, 1) and (1.0, 1.5) and are rejected although 1 == 1.0;
//   - then some permutation of the prediction's columns must make the rows equal: as lists when
//     ordered, as multisets (duplicates counted) otherwise.
//
// The official code enumerates column permutations (all of them up to 3 columns; above that it
// drops those mapping a column of 20 randomly drawn prediction rows onto a gold column lacking
// one of their values). That pruning only removes permutations that cannot match, so the verdict
// is whether any permutation matches; this search decides the same question with sound pruning
// of its own (equal column multisets, equal multisets of the rows projected onto the columns
// placed so far, interchangeable identical columns tried once) instead of a random draw.
func spiderResultEq(m valueModel, gold, pred [][]any, ordered bool) bool {
	if len(gold) == 0 && len(pred) == 0 {
		return true
	}
	if len(gold) != len(pred) {
		return false
	}
	n := len(gold[0])
	if len(pred[0]) != n {
		return false
	}
	gu, pu := unorderedRows(m, gold), unorderedRows(m, pred)
	if ordered {
		for i := range gu {
			if gu[i] != pu[i] {
				return false
			}
		}
	} else if !sameSet(gu, pu) {
		return false
	}
	return permutationMatches(m, gold, pred, ordered)
}

// unorderedRows keys each row with its values sorted as unorder_row sorts them.
func unorderedRows(m valueModel, rows [][]any) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		vals := append([]any(nil), r...)
		keys := make([]string, len(vals))
		for j, v := range vals {
			keys[j] = m.sortKey(v)
		}
		idx := make([]int, len(vals))
		for j := range idx {
			idx[j] = j
		}
		sort.SliceStable(idx, func(a, b int) bool { return keys[idx[a]] < keys[idx[b]] })
		sorted := make([]any, len(vals))
		for j, k := range idx {
			sorted[j] = vals[k]
		}
		out[i] = rowKey(m, sorted)
	}
	return out
}

func sameSet(a, b []string) bool {
	sa := make(map[string]bool, len(a))
	for _, k := range a {
		sa[k] = true
	}
	sb := make(map[string]bool, len(b))
	for _, k := range b {
		if !sa[k] {
			return false
		}
		sb[k] = true
	}
	return len(sa) == len(sb)
}

// permutationMatches reports whether a permutation of pred's columns makes its rows equal to
// gold's (in order, or as multisets). Gold column i is given pred column perm[i], column by
// column, keeping only assignments under which the rows projected onto the columns placed so
// far are still equal (in order, or as multisets): every full match passes each such check.
func permutationMatches(m valueModel, gold, pred [][]any, ordered bool) bool {
	n, rows := len(gold[0]), len(gold)
	kg, kp := cellKeys(m, gold, n), cellKeys(m, pred, n)
	column := func(k [][]string, c int) []string {
		col := make([]string, rows)
		for r := range col {
			col[r] = k[r][c]
		}
		return col
	}
	gcols, pcols := make([][]string, n), make([][]string, n)
	for c := 0; c < n; c++ {
		gcols[c], pcols[c] = column(kg, c), column(kp, c)
	}
	// class[j] is the first pred column identical to column j: swapping identical columns
	// changes nothing, so one of them is tried at each step.
	class := make([]int, n)
	for j := range class {
		class[j] = j
		for i := 0; i < j; i++ {
			if slices.Equal(pcols[i], pcols[j]) {
				class[j] = class[i]
				break
			}
		}
	}
	fits := make([][]bool, n) // fits[i][j]: pred column j can stand for gold column i
	for i := range fits {
		fits[i] = make([]bool, n)
		for j := range fits[i] {
			if ordered {
				fits[i][j] = slices.Equal(gcols[i], pcols[j])
			} else {
				fits[i][j] = sameMultiset(gcols[i], pcols[j])
			}
		}
	}
	used := make([]bool, n)
	gp, pp := make([]string, rows), make([]string, rows) // rows projected on the columns placed
	var place func(i int) bool
	place = func(i int) bool {
		if i == n {
			return true
		}
		tried := map[int]bool{}
		for j := 0; j < n; j++ {
			if used[j] || !fits[i][j] || tried[class[j]] {
				continue
			}
			tried[class[j]] = true
			savedG, savedP := append([]string(nil), gp...), append([]string(nil), pp...)
			for r := 0; r < rows; r++ {
				gp[r] += strconv.Itoa(len(kg[r][i])) + ":" + kg[r][i]
				pp[r] += strconv.Itoa(len(kp[r][j])) + ":" + kp[r][j]
			}
			ok := ordered || sameMultiset(gp, pp) // ordered: equal columns keep the rows equal
			if ok {
				used[j] = true
				if place(i + 1) {
					return true
				}
				used[j] = false
			}
			copy(gp, savedG)
			copy(pp, savedP)
		}
		return false
	}
	return place(0)
}

func cellKeys(m valueModel, rows [][]any, n int) [][]string {
	out := make([][]string, len(rows))
	for r, row := range rows {
		out[r] = make([]string, n)
		for c := 0; c < n && c < len(row); c++ {
			out[r][c] = m.key(row[c])
		}
	}
	return out
}

// pyValueKey keys one value under Python's equality: int == float of the same value (1 == 1.0),
// bool == int, floats exact, str != bytes, None == None.
//
// A time.Time (go-sqlite3's reading of a DATE, DATETIME or TIMESTAMP column, which the SQLite
// engine replaces by the stored value) is keyed as SQLite text: "2006-01-02" for a midnight
// value, "2006-01-02 15:04:05[.fff]" otherwise, the layouts the benchmarks' databases hold.
func pyValueKey(v any) string {
	switch x := v.(type) {
	case nil:
		return "N"
	case int64:
		return "i" + strconv.FormatInt(x, 10)
	case bool:
		if x {
			return "i1"
		}
		return "i0"
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return "i" + strconv.FormatInt(int64(x), 10)
		}
		return "f" + strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return "s" + x
	case []byte:
		return "b" + string(x)
	case time.Time:
		return "s" + sqliteTimeText(x)
	}
	return fmt.Sprintf("?%T:%v", v, v)
}

// pyStr is Python's str() of the value sqlite3 would return.
func pyStr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case int64:
		return strconv.FormatInt(x, 10)
	case bool:
		if x {
			return "1"
		}
		return "0"
	case float64:
		return pyFloatRepr(x)
	case string:
		return x
	case []byte:
		return pyBytesRepr(x)
	case time.Time:
		return sqliteTimeText(x)
	}
	return fmt.Sprint(v)
}

func pyTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "<class 'NoneType'>"
	case int64, bool:
		return "<class 'int'>"
	case float64:
		return "<class 'float'>"
	case []byte:
		return "<class 'bytes'>"
	}
	return "<class 'str'>"
}

// pyFloatRepr is Python's repr of a float: the shortest digits that read back exactly, in
// positional notation for decimal exponents -4..15 (always with a fraction: "1.0") and in
// scientific notation with a signed, at least two-digit exponent otherwise ("1e+16", "1.5e-07").
func pyFloatRepr(x float64) string {
	switch {
	case math.IsNaN(x):
		return "nan"
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	}
	sign := ""
	if math.Signbit(x) {
		sign, x = "-", -x
	}
	e := strconv.FormatFloat(x, 'e', -1, 64) // d[.ddd]e±XX
	mant, expText, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expText)
	if exp >= -4 && exp < 16 {
		if exp < 0 {
			return sign + "0." + strings.Repeat("0", -exp-1) + digits
		}
		if len(digits) <= exp+1 {
			return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
		}
		return sign + digits[:exp+1] + "." + digits[exp+1:]
	}
	m := digits[:1]
	if len(digits) > 1 {
		m += "." + digits[1:]
	}
	es := "+"
	if exp < 0 {
		es, exp = "-", -exp
	}
	return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
}

// pyBytesRepr is Python's repr of bytes: b'...' (b"..." when the bytes hold ' and no "), with
// \\, the quote, \t, \n, \r escaped and other bytes outside printable ASCII as \xhh.
func pyBytesRepr(b []byte) string {
	q := byte('\'')
	if strings.IndexByte(string(b), '\'') >= 0 && strings.IndexByte(string(b), '"') < 0 {
		q = '"'
	}
	var s strings.Builder
	s.WriteByte('b')
	s.WriteByte(q)
	for _, c := range b {
		switch {
		case c == '\\' || c == q:
			s.WriteByte('\\')
			s.WriteByte(c)
		case c == '\t':
			s.WriteString(`\t`)
		case c == '\n':
			s.WriteString(`\n`)
		case c == '\r':
			s.WriteString(`\r`)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&s, `\x%02x`, c)
		default:
			s.WriteByte(c)
		}
	}
	s.WriteByte(q)
	return s.String()
}

// sqliteTimeText renders a time as SQLite stores dates: "2006-01-02" at midnight, else
// "2006-01-02 15:04:05[.fff]".
func sqliteTimeText(t time.Time) string {
	t = t.UTC()
	if t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 && t.Nanosecond() == 0 {
		return t.Format("2006-01-02")
	}
	if t.Nanosecond() != 0 {
		return t.Format("2006-01-02 15:04:05.999999999")
	}
	return t.Format("2006-01-02 15:04:05")
}

// decodeIgnore is test-suite-sql-eval's text_factory, bytes.decode(errors="ignore"): text loses
// the bytes that are not valid UTF-8. rows is not changed: when some text must change, the
// result is a copy (changed reports it).
func decodeIgnore(rows [][]any) (out [][]any, changed bool) {
	out = rows
	for r, row := range rows {
		copied := false
		for i, v := range row {
			s, ok := v.(string)
			if !ok || utf8.ValidString(s) {
				continue
			}
			if !changed {
				out, changed = append([][]any(nil), rows...), true
			}
			if !copied {
				out[r], copied = append([]any(nil), row...), true
			}
			out[r][i] = strings.ToValidUTF8(s, "")
		}
	}
	return out, changed
}

// invalidText returns the first text value that is not valid UTF-8 (BIRD's sqlite3 connection
// decodes text strictly and fails the query on it), or "" when there is none.
func invalidText(rows [][]any) (string, bool) {
	for _, r := range rows {
		for _, v := range r {
			if s, ok := v.(string); ok && !utf8.ValidString(s) {
				return s, true
			}
		}
	}
	return "", false
}
