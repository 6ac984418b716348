package evaluate_test

import (
	"regexp"
	"strconv"
	"strings"
)

// The mixed prediction set: one prediction per Spider dev task, made from its gold SQL by one of
// mixedKinds in turn (the next kind that applies when one does not). It is the input of the
// official-verdict table (testdata/official_verdicts.json; see testdata/official/README.md).

// mixedKind turns a gold query into a prediction; ok is false when it does not apply.
type mixedKind struct {
	name string
	make func(gold string) (string, bool)
}

var mixedKinds = []mixedKind{
	{"gold", func(g string) (string, bool) { return g, true }},
	{"swap_columns", func(g string) (string, bool) { return permuteSelect(g, swapFirstTwo) }},
	{"distinct_toggle", toggleDistinct},
	{"count_distinct", swapCountDistinct},
	{"order_change", changeOrder},
	{"duplicate_rows", wrap("SELECT T.* FROM (%s) AS T, (SELECT 1 UNION ALL SELECT 2)")},
	{"cast_real", func(g string) (string, bool) { return mapFirstItem(g, "CAST(%s AS REAL)") }},
	{"syntax_error", func(g string) (string, bool) {
		return strings.Replace(g, "SELECT", "SELEC", 1), strings.Contains(g, "SELECT")
	}},
	{"empty", wrap("SELECT * FROM (%s) WHERE 1 = 0")},
	{"subquery", wrap("SELECT * FROM (%s)")},
	{"second_statement", wrap("%s; SELECT 1")},
	{"value_alias", wrap("SELECT value.* FROM (%s) AS value")},
	{"spaced_operator", spaceOperators},
	{"cur_year", wrap("SELECT * FROM (%s) WHERE YEAR(CURDATE()) = 2020")},
	{"distinct_subquery", wrap("SELECT * FROM (SELECT DISTINCT * FROM (%s))")},
	{"reorder_rows", wrap("SELECT * FROM (%s) ORDER BY 1 DESC")},
	{"reverse_columns", func(g string) (string, bool) { return permuteSelect(g, reverseItems) }},
	{"trailing_comment", wrap("%s; -- distinct")},
	{"distinct_literal", wrap("SELECT * FROM (%s) WHERE 'distinct' <> 'x'")},
	{"extra_column", wrap("SELECT T.*, 1 FROM (%s) AS T")},
	{"limit_change", changeLimit},
	{"upper_text", func(g string) (string, bool) { return mapFirstItem(g, "UPPER(%s)") }},
	{"round", func(g string) (string, bool) { return mapFirstItem(g, "ROUND(%s, 0)") }},
	{"float_columns", floatColumns},
}

// mixedPredictions makes one prediction per gold query: each takes, of the kinds that apply to
// it (change it), the one used least so far (the earliest in mixedKinds on a tie), so that the
// rarely applicable kinds are used wherever they apply.
func mixedPredictions(golds []string) (kinds, preds []string) {
	used := make([]int, len(mixedKinds))
	for _, g := range golds {
		best, sql := 0, g
		for k, mk := range mixedKinds {
			s, ok := mk.make(g)
			if k > 0 && (!ok || s == g) {
				continue
			}
			if k == 0 || used[k] < used[best] {
				best, sql = k, s
			}
		}
		used[best]++
		kinds, preds = append(kinds, mixedKinds[best].name), append(preds, sql)
	}
	return kinds, preds
}

func wrap(format string) func(string) (string, bool) {
	return func(g string) (string, bool) {
		return strings.ReplaceAll(format, "%s", strings.TrimSuffix(strings.TrimSpace(g), ";")), true
	}
}

// topLevel returns the offsets of kw (case-insensitive; a whole word when it is one) in q
// outside parentheses and quotes.
func topLevel(q, kw string) []int {
	var out []int
	depth := 0
	lower := strings.ToLower(q)
	kw = strings.ToLower(kw)
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '\'' || c == '"' || c == '`':
			if j := strings.IndexByte(q[i+1:], c); j >= 0 {
				i += j + 1
			}
		case c == '(':
			depth++
		case c == ')':
			depth--
		case depth == 0 && strings.HasPrefix(lower[i:], kw) && (!isIdent(kw[0]) ||
			(i == 0 || !isIdent(q[i-1])) && (i+len(kw) == len(q) || !isIdent(q[i+len(kw)]))):
			out = append(out, i)
		}
	}
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// compound reports whether q's outermost query is a UNION, INTERSECT or EXCEPT.
func compound(q string) bool {
	return len(topLevel(q, "union"))+len(topLevel(q, "intersect"))+len(topLevel(q, "except")) > 0
}

// selectList returns the offsets of the outermost SELECT list (after any DISTINCT) and its items.
func selectList(q string) (start, end int, items []string, ok bool) {
	sel, from := topLevel(q, "select"), topLevel(q, "from")
	if len(sel) == 0 || len(from) == 0 || from[0] < sel[0] || compound(q) {
		return 0, 0, nil, false
	}
	start, end = sel[0]+len("select"), from[0]
	if d := topLevel(q[start:end], "distinct"); len(d) > 0 && strings.TrimSpace(q[start:start+d[0]]) == "" {
		start += d[0] + len("distinct")
	}
	list := q[start:end]
	last := 0
	for _, c := range append(topLevel(list, ","), len(list)) {
		items = append(items, strings.TrimSpace(list[last:c]))
		last = c + 1
	}
	return start, end, items, true
}

func permuteSelect(g string, perm func([]string) []string) (string, bool) {
	start, end, items, ok := selectList(g)
	if !ok || len(items) < 2 {
		return "", false
	}
	return g[:start] + " " + strings.Join(perm(items), ", ") + " " + g[end:], true
}

func swapFirstTwo(items []string) []string {
	out := append([]string(nil), items...)
	out[0], out[1] = out[1], out[0]
	return out
}

func reverseItems(items []string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return out
}

// mapFirstItem wraps the first SELECT item (not *, not aliased) in format.
func mapFirstItem(g, format string) (string, bool) {
	start, end, items, ok := selectList(g)
	if !ok || items[0] == "*" || strings.HasSuffix(items[0], ".*") || len(topLevel(items[0], "as")) > 0 {
		return "", false
	}
	items[0] = strings.ReplaceAll(format, "%s", items[0])
	return g[:start] + " " + strings.Join(items, ", ") + " " + g[end:], true
}

func toggleDistinct(g string) (string, bool) {
	sel := topLevel(g, "select")
	if len(sel) == 0 {
		return "", false
	}
	after := g[sel[0]+len("select"):]
	if d := topLevel(after, "distinct"); len(d) > 0 && strings.TrimSpace(after[:d[0]]) == "" {
		return g[:sel[0]] + "SELECT" + after[d[0]+len("distinct"):], true
	}
	return g[:sel[0]] + "SELECT DISTINCT" + after, true
}

var (
	countDistinct = regexp.MustCompile(`(?i)count\s*\(\s*distinct\s+`)
	countColumn   = regexp.MustCompile(`(?i)count\s*\(\s*([A-Za-z_][\w.]*)\s*\)`)
)

func swapCountDistinct(g string) (string, bool) {
	if countDistinct.MatchString(g) {
		return countDistinct.ReplaceAllString(g, "count("), true
	}
	if countColumn.MatchString(g) {
		return countColumn.ReplaceAllString(g, "count(DISTINCT $1)"), true
	}
	return "", false
}

var direction = regexp.MustCompile(`(?i)\b(asc|desc)\b`)

func changeOrder(g string) (string, bool) {
	if ob := topLevel(g, "order"); len(ob) > 0 {
		head, tail := g[:ob[0]], g[ob[0]:]
		if direction.MatchString(tail) {
			return head + direction.ReplaceAllStringFunc(tail, func(d string) string {
				if strings.EqualFold(d, "asc") {
					return "DESC"
				}
				return "ASC"
			}), true
		}
		if lim := topLevel(tail, "limit"); len(lim) > 0 {
			return head + strings.TrimRight(tail[:lim[0]], " ") + " DESC " + tail[lim[0]:], true
		}
		return strings.TrimSuffix(strings.TrimSpace(g), ";") + " DESC", true
	}
	if len(topLevel(g, "limit")) > 0 {
		return "", false
	}
	return strings.TrimSuffix(strings.TrimSpace(g), ";") + " ORDER BY 1 DESC", true
}

var limitN = regexp.MustCompile(`(?i)\blimit\s+(\d+)`)

func changeLimit(g string) (string, bool) {
	if lim := topLevel(g, "limit"); len(lim) > 0 {
		m := limitN.FindStringSubmatchIndex(g[lim[0]:])
		if m == nil {
			return "", false
		}
		n, _ := strconv.Atoi(g[lim[0]+m[2] : lim[0]+m[3]])
		return g[:lim[0]+m[2]] + strconv.Itoa(n+1) + g[lim[0]+m[3]:], true
	}
	return strings.TrimSuffix(strings.TrimSpace(g), ";") + " LIMIT 1", true
}

func spaceOperators(g string) (string, bool) {
	s := strings.NewReplacer(">=", "> =", "<=", "< =", "!=", "! =").Replace(g)
	return s, s != g
}

// floatColumns makes every SELECT item of a query with two or more a float ("(x) * 1.0").
func floatColumns(g string) (string, bool) {
	start, end, items, ok := selectList(g)
	if !ok || len(items) < 2 {
		return "", false
	}
	for i, it := range items {
		if strings.Contains(it, "*") && !strings.Contains(it, "(*)") || len(topLevel(it, "as")) > 0 {
			return "", false
		}
		items[i] = "(" + it + ") * 1.0"
	}
	return g[:start] + " " + strings.Join(items, ", ") + " " + g[end:], true
}
