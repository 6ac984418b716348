package judge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// Style is a rule set for judging execution accuracy (EX).
type Style string

// Judging styles.
const (
	// StyleBIRD is BIRD's evaluation.py: set(pred rows) == set(gold rows); row order and
	// duplicates ignored, column order kept; the prediction runs first, then the gold, under one
	// time limit; any error scores 0.
	StyleBIRD Style = "bird"
	// StyleSpider is test-suite-sql-eval's evaluation.py --etype exec (the published Spider
	// execution accuracy): the SQL rewrites of Judge.Prepare (DISTINCT removed unless
	// KeepDistinct), rows ordered when the rewritten gold contains "order by" anywhere, else
	// multisets, and the prediction's columns in any order (result_eq).
	StyleSpider Style = "spider"
	// StyleSpiderStrict is Spider's comparison with nothing forgiven: the SQL as written,
	// column order and DISTINCT count, rows ordered only when the gold's outermost query has an
	// ORDER BY, else multisets.
	StyleSpiderStrict Style = "spider-strict"
)

// Styles are the styles ParseStyle accepts.
var Styles = []Style{StyleBIRD, StyleSpider, StyleSpiderStrict}

// ParseStyle returns the style named s.
func ParseStyle(s string) (Style, error) {
	for _, st := range Styles {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("style %q: want bird, spider or spider-strict", s)
}

// DefaultTimeout is the time limit for one prediction and its gold SQL together: BIRD's
// meta_time_out (30 s) for BIRD; test-suite-sql-eval's TIMEOUT (60 s) for the Spider styles.
// (That one never stops a query: its asyncio.wait_for wraps a call that blocks the event loop,
// so the result comes back however long it took. A query running past 60 s here scores 0.)
func (s Style) DefaultTimeout() time.Duration {
	if s == StyleBIRD {
		return 30 * time.Second
	}
	return 60 * time.Second
}

// OutcomeGoldError is a Verdict's outcome when the gold SQL did not run.
const OutcomeGoldError = "gold_error"

// Judge judges predictions against gold SQL in one Style. On SQLite values compare as Python's
// sqlite3 returns them (the official evaluators' view); on PostgreSQL and MySQL, where no
// official evaluator runs, by Match's cross-engine value rule. The zero Judge is BIRD's.
type Judge struct {
	Style Style
	// KeepDistinct keeps DISTINCT in StyleSpider (test-suite-sql-eval's --keep_distinct).
	KeepDistinct bool
	// Reference, when not nil, opens the database Run executes the gold SQL on again when it
	// fails on the prediction's (an error or a refusal, not a timeout): the task's SQLite file
	// for a prediction on a server copy (datasets.Task.GoldReference). The gold runs there as
	// that engine runs it, with the time it had on the prediction's database, the rows compare
	// by the prediction's engine's rule, and Verdict.GoldOn says so. Where the reference does
	// not open, fails, errs or runs out of time too, the first failure is the verdict's; where
	// it has no execution slot or its open no file descriptor (sandbox.ErrBusy), Run fails with
	// that error.
	Reference func(context.Context) (sandbox.DB, error)
}

// Verdict is how one prediction was judged.
type Verdict struct {
	Correct bool
	// Outcome is "ok" (both ran; Correct says whether they matched), the prediction's "error",
	// "timeout" or "refused", or OutcomeGoldError. BIRD reports the prediction's failure first
	// (it runs first); Spider the gold's (its evaluator stops on a gold that fails). A gold that
	// runs out of time is the gold's failure, OutcomeGoldError, when it had at least half the
	// budget (it ran first, the prediction's result was reused, or the prediction was quick);
	// else it ran past the time the prediction left it, the pair's "timeout", as BIRD's
	// evaluation.py reports it. A prediction whose run stopped on a row deciding it wrong is
	// "ok" (see Run).
	Outcome string
	Error   string
	// GoldError is why the gold SQL failed ("" when it ran, was not reached, or ran past the
	// time the prediction left it): the verdict is then unjudged.
	GoldError string
	// GoldOn is the Reference's dialect when the gold's result came from it ("" when from the
	// prediction's database or when there is no result).
	GoldOn datasets.Dialect
	// PredSQL and GoldSQL are the statements executed, after the style's rewrites.
	PredSQL, GoldSQL string
	// Ordered says rows were compared in order.
	Ordered bool
}

// Prepare returns the gold and predicted SQL as the style's official evaluator executes them,
// and whether rows compare in order. ok is false when the prediction holds no statement.
func (j Judge) Prepare(gold, pred string) (goldSQL, predSQL string, ordered, ok bool) {
	switch j.Style {
	case StyleSpider:
		p := spiderPostprocess(spiderPredText(pred))
		ok = p != ""
		if !j.KeepDistinct {
			p, ok = spiderRemoveDistinct(p)
		}
		g := j.spiderGold(gold)
		return spiderCurYear(g), spiderCurYear(p), spiderOrdered(g), ok
	case StyleSpiderStrict:
		return gold, pred, HasOrderBy(gold), strings.TrimSpace(pred) != ""
	}
	return gold, pred, false, true
}

// prepareGold is Prepare's gold SQL: the gold as the style's official evaluator executes it.
func (j Judge) prepareGold(gold string) string {
	if j.Style != StyleSpider {
		return gold
	}
	return spiderCurYear(j.spiderGold(gold))
}

// spiderGold is StyleSpider's rewrite of gold before the current year is put in (its ordering
// is read there).
func (j Judge) spiderGold(gold string) string {
	g := spiderPostprocess(pyStrip(gold))
	if !j.KeepDistinct {
		g, _ = spiderRemoveDistinct(g)
	}
	return g
}

// GoldStatement returns the statement Run executes first for gold on a database of dialect d:
// on PostgreSQL and MySQL the gold as Prepare rewrites it, on SQLite the one statement Python's
// sqlite3 runs of that (ok is false when it holds none: nothing runs). Run executes no other
// statement for the gold, so this one identifies its executions exactly (a cache of gold
// results keeps those and nothing a prediction could add to).
func (j Judge) GoldStatement(d datasets.Dialect, gold string) (stmt string, ok bool) {
	if j.Style == "" {
		j.Style = StyleBIRD
	}
	g := j.prepareGold(gold)
	if d != datasets.SQLite {
		return g, true
	}
	stmt, empty, _ := pyStatement(g)
	return stmt, !empty
}

// Run executes the gold and the predicted SQL on db (the gold on Reference too when it fails on
// db) and judges them. budget bounds the statements on db together, on their running time (a
// wait for an execution slot does not count: pairClock; zero: the style's DefaultTimeout); the
// gold on Reference has the time it had on db. predRes, when not nil, is
// pred's result from an earlier execution, reused when the style runs pred unchanged and the
// result is complete (all rows kept) or a failure; where it kept only pred's first rows, the
// gold runs first and pred runs again only if those rows and its row count cannot already tell
// the two apart (prefixDiffers). The error is unknown or db itself failed (see DB.Exec); a
// Reference that fails leaves the gold's failure on db in the verdict, but one whose slots are
// held (sandbox.ErrBusy) is Run's error, as on db. On a Patient db (sandbox.Patient) a busy pair
// is tried again whole, each try with the whole budget.
//
// Of a pred it runs, Run holds only what the verdict needs, as the rows stream (see keeper):
// BIRD keeps one row per distinct key, so a result of many duplicates costs its distinct rows
// (and the size limit counts their cells only: such a result is judged, where holding every
// row passed the limit and failed); where the gold's result is known first (the Spider styles,
// which run the gold first, and a reused prefix) pred's stream stops at the row that tells the
// two apart: past the gold's row count (Spider), at the first row the gold lacks (BIRD). Correct
// is what the full comparison gives. Where pred's run stopped, or the reused prefix told the two
// apart, the Outcome is "ok" although a full run could have failed on a row past those read (an
// error, the time limit, the size limit, or text that is not UTF-8 in BIRD's reading on SQLite,
// which counts in the rows read): wrong either way.
func (j Judge) Run(ctx context.Context, db sandbox.DB, gold, pred string, predRes *sandbox.Result, budget time.Duration) (Verdict, error) {
	// A Patient db (sandbox.Patient) would try a busy statement again within the pair's budget,
	// spending the time of the statement after it (a correct prediction judged a timeout): the
	// pair is tried again whole instead, each time with the whole budget.
	if inner, patience := sandbox.Impatient(db); patience > 0 {
		var v Verdict
		err := sandbox.RetryBusy(ctx, patience, func() error {
			var err error
			v, err = j.run(ctx, inner, gold, pred, predRes, budget)
			return err
		})
		return v, err
	}
	return j.run(ctx, db, gold, pred, predRes, budget)
}

// run is Run on a db that is not Patient.
func (j Judge) run(ctx context.Context, db sandbox.DB, gold, pred string, predRes *sandbox.Result, budget time.Duration) (Verdict, error) {
	if j.Style == "" {
		j.Style = StyleBIRD
	}
	if _, err := ParseStyle(string(j.Style)); err != nil {
		return Verdict{}, fmt.Errorf("judge: %w", err)
	}
	if budget <= 0 {
		budget = j.Style.DefaultTimeout()
	}
	g, p, ordered, ok := j.Prepare(gold, pred)
	v := Verdict{PredSQL: p, GoldSQL: g, Ordered: ordered}
	var prefix *sandbox.Result // pred's result holding its first rows only
	if predRes != nil && (p != pred || predRes.OK() && (predRes.Truncated || len(predRes.Rows) < predRes.Total)) {
		if p == pred && predRes.OK() && j.sameExecution(db.Dialect(), p) {
			prefix = predRes
		}
		predRes = nil
	}
	pair := newPairClock(budget)
	run := func(db sandbox.DB, q string, reuse *sandbox.Result, clock *pairClock, k *keeper) (*sandbox.Result, error) {
		left := clock.left()
		if left <= 0 {
			return &sandbox.Result{Outcome: sandbox.OutcomeTimeout, Error: fmt.Sprintf("the time limit of %s for the prediction and its gold together was used up", budget)}, nil
		}
		return j.exec(ctx, db, q, reuse, left, clock.waiting, k)
	}
	var allowed time.Duration // the gold's time on db
	runGold := func() (*sandbox.Result, error) {
		allowed = pair.left()
		res, err := run(db, g, nil, pair, nil)
		if err != nil || res.OK() || res.Outcome == sandbox.OutcomeTimeout || j.Reference == nil {
			return res, err
		}
		rdb, err := j.Reference(ctx)
		switch {
		case errors.Is(err, sandbox.ErrBusy):
			return nil, err // no file descriptor to open it (SQLite's Open): not a verdict either
		case err != nil:
			return res, ctx.Err() // the gold's failure on db is the one to report
		}
		rdb, _ = sandbox.Impatient(rdb) // a busy reference is Run's to try again whole
		ref, err := run(rdb, g, nil, newPairClock(allowed), nil)
		switch {
		case errors.Is(err, sandbox.ErrBusy):
			return nil, err // the reference's slots are held: its failure, not a verdict
		case err != nil:
			return res, ctx.Err()
		case ref.OK():
			v.GoldOn = rdb.Dialect()
			return ref, nil
		}
		return res, nil
	}
	var gres, pres *sandbox.Result
	var err error
	var k *keeper    // what was kept of pred's run
	differs := false // told apart by prefix alone
	switch {
	case prefix != nil:
		if gres, err = runGold(); err != nil {
			break
		}
		if bad := undecodable(prefix.Rows); bad != nil && j.Style == StyleBIRD && db.Dialect() == datasets.SQLite {
			pres = bad // the full run fails on the kept rows too
		} else if !gres.OK() || j.prefixDiffers(db.Dialect(), gres.Rows, prefix) {
			pres, differs = prefix, gres.OK() // it ran, in the earlier execution
		} else {
			k = j.keeper(db.Dialect(), gres)
			pres, err = run(db, p, nil, pair, k)
		}
	case j.Style == StyleBIRD:
		k = j.keeper(db.Dialect(), nil)
		if pres, err = run(db, p, predRes, pair, k); err == nil {
			gres, err = runGold()
		}
	default:
		if gres, err = runGold(); err == nil && ok {
			k = j.keeper(db.Dialect(), gres)
			pres, err = run(db, p, predRes, pair, k)
		}
	}
	if err != nil {
		return v, err
	}
	differs = differs || k != nil && k.stopped // stopped on a row that tells them apart
	if !gres.OK() && (gres.Outcome != sandbox.OutcomeTimeout || allowed >= budget/2) {
		v.GoldError = fmt.Sprintf("%s: %s", gres.Outcome, gres.Error)
	}
	goldFailed := func() {
		if v.GoldError == "" {
			v.Outcome, v.Error = string(sandbox.OutcomeTimeout), "the gold SQL ran past the time the prediction left it: "+gres.Error
		} else {
			v.Outcome, v.Error = OutcomeGoldError, v.GoldError
		}
	}
	switch {
	case j.Style != StyleBIRD && !gres.OK():
		goldFailed()
	case !ok:
		v.Outcome, v.Error = string(sandbox.OutcomeError), "the prediction holds no SQL statement"
	case !pres.OK():
		v.Outcome, v.Error = string(pres.Outcome), pres.Error
	case !gres.OK():
		goldFailed()
	default:
		v.Outcome = string(sandbox.OutcomeOK)
		v.Correct = !differs && j.equal(db.Dialect(), gres.Rows, pres.Rows, ordered)
	}
	return v, nil
}

// undecodable is the error BIRD's evaluator meets on rows from SQLite holding text that is not
// UTF-8 (Python's sqlite3 fails the query on it), or nil.
func undecodable(rows [][]any) *sandbox.Result {
	if s, bad := invalidText(rows); bad {
		return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: fmt.Sprintf("could not decode to UTF-8 the text %q (Python's sqlite3 fails the query on it)", s)}
	}
	return nil
}

// sameExecution reports whether res, pred's result from an earlier execution, holds the rows
// exec would run pred for, as the style sees them: on SQLite pred's one statement as it is.
func (j Judge) sameExecution(d datasets.Dialect, pred string) bool {
	if d != datasets.SQLite {
		return true
	}
	stmt, empty, _ := pyStatement(pred)
	return !empty && stmt == strings.TrimSuffix(strings.TrimSpace(pred), ";")
}

// prefixDiffers reports whether the gold's rows and prefix, a result of pred that kept only its
// first rows (and counted them all), already differ under the style, as the full result would:
// the Spider styles compare as many rows as the gold has, so another total differs; BIRD
// compares row sets, so a kept row the gold lacks differs.
func (j Judge) prefixDiffers(d datasets.Dialect, gold [][]any, prefix *sandbox.Result) bool {
	if j.Style != StyleBIRD {
		return prefix.Total != len(gold)
	}
	m, _ := modelOf(d)
	g := keySet(m, gold)
	for _, r := range prefix.Rows {
		if _, ok := g[rowKey(m, r)]; !ok {
			return true
		}
	}
	return false
}

// modelOf returns the value model rows on a database of dialect d compare by, and whether it is
// Python's: on SQLite, the one engine the official evaluators read (through Python's sqlite3),
// pyModel; elsewhere engineModel.
func modelOf(d datasets.Dialect) (valueModel, bool) {
	if d == datasets.SQLite {
		return pyModel{}, true
	}
	return engineModel{}, false
}

// equal compares two results' rows under the style. A NaN in either makes them differ (hasNaN).
func (j Judge) equal(d datasets.Dialect, gold, pred [][]any, ordered bool) bool {
	if hasNaN(gold) || hasNaN(pred) {
		return false
	}
	m, _ := modelOf(d)
	switch j.Style {
	case StyleSpider:
		return spiderResultEq(m, gold, pred, ordered)
	case StyleSpiderStrict:
		return listEqual(m, gold, pred, ordered)
	}
	return setEqual(m, gold, pred)
}

// exec runs q and returns its rows as the style's evaluator would see them: on SQLite, as
// Python's sqlite3 executes a string (leading empty statements skipped, nothing but comments
// after the statement, no statement at all giving no rows), with text decoded as the evaluator
// decodes it. reuse, when not nil, is q's result already.
// waiting, when not nil, is told while q waits for an execution slot (sandbox.ExecOptions).
// k, when not nil, is what is kept of the rows as they stream (see keeper); where it stopped,
// the rows are those read before the stop, and on SQLite BIRD's decoding error where they or the
// row it stopped on hold text that is not UTF-8.
func (j Judge) exec(ctx context.Context, db sandbox.DB, q string, reuse *sandbox.Result, timeout time.Duration, waiting func(bool), k *keeper) (*sandbox.Result, error) {
	opts := k.options(sandbox.ExecOptions{Timeout: timeout, Waiting: waiting})
	if db.Dialect() != datasets.SQLite {
		if reuse != nil {
			return reuse, nil
		}
		return db.Exec(ctx, q, opts)
	}
	stmt, empty, several := pyStatement(q)
	if empty {
		return &sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
	}
	if several {
		// Python fails it before it runs; SQLite itself passes over SELECT 1;;, and though the
		// SQLite screen refuses it too (ScreenRules.Empty, EmptyNowhere), the judge does not
		// rely on the screen's rules: it is failed here.
		return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: pyOneStatement}, nil
	}
	res := reuse
	if res == nil || stmt != strings.TrimSuffix(strings.TrimSpace(q), ";") {
		var err error
		if res, err = db.Exec(ctx, stmt, opts); err != nil {
			return nil, err
		}
	}
	if !res.OK() {
		return res, nil
	}
	if k != nil && k.stopped {
		if j.Style == StyleBIRD {
			if bad := undecodable(res.Rows); bad != nil {
				return bad, nil
			}
			if k.bad != nil {
				return k.bad, nil
			}
		}
		return res, nil
	}
	if j.Style == StyleBIRD {
		if bad := undecodable(res.Rows); bad != nil {
			return bad, nil
		}
	} else if rows, changed := decodeIgnore(res.Rows); changed {
		cp := *res
		cp.Rows = rows
		res = &cp
	}
	return res, nil
}

// pyStatement returns the statement Python's sqlite3 runs for q: empty statements (";") and
// comments before it skipped, and whitespace and comments after its ";" dropped (Python accepts
// them, and so does the executor's screen, which reads them by SQLite's rules, the same as
// skipSpaceComments, and sends the statement alone; dropping them here keeps GoldStatement the
// statement run). empty means q holds no statement: Python runs nothing and returns no rows.
// several means something else follows the first statement's ";", an empty statement (";") too:
// Python raises "You can only execute one statement at a time" without running any, and stmt is
// q. SplitFirst reads a ; or a quote otherwise than
// SQLite only inside a parameter's (…) suffix ($a(;)), where Python's sqlite3 fails the statement
// (its parameter is unbound) and so does the executor.
func pyStatement(q string) (stmt string, empty, several bool) {
	i := 0
	for {
		i = skipSpaceComments(q, i)
		if i < len(q) && q[i] == ';' {
			i++
			continue
		}
		break
	}
	if i >= len(q) {
		return "", true, false
	}
	body, rest := sandbox.SplitFirst(q[i:])
	if skipSpaceComments(rest, 0) == len(rest) {
		return body, false, false
	}
	return q, false, true
}

// pyOneStatement is the error Python's sqlite3 raises for a text holding more than one statement
// (pyStatement).
const pyOneStatement = "You can only execute one statement at a time. (Python's sqlite3, which the official evaluators run, reads anything but whitespace and comments after the statement's ;, an empty statement too, as a second statement)"

// skipSpaceComments returns the index after the whitespace and SQL comments at q[i:]; an
// unterminated /* comment runs to the end, as SQLite reads it.
func skipSpaceComments(q string, i int) int {
	for i < len(q) {
		switch {
		case q[i] == ' ' || q[i] == '\t' || q[i] == '\n' || q[i] == '\r' || q[i] == '\f':
			i++
		case strings.HasPrefix(q[i:], "--"):
			j := strings.IndexByte(q[i:], '\n')
			if j < 0 {
				return len(q)
			}
			i += j + 1
		case strings.HasPrefix(q[i:], "/*"):
			j := strings.Index(q[i+2:], "*/")
			if j < 0 {
				return len(q)
			}
			i += j + 4
		default:
			return i
		}
	}
	return i
}

// Match reports whether pred answers the same as gold across engines: set equality of rows
// (column order kept) when ordered is false; ordered comparison of row lists when true. It is
// the value rule Judge uses on PostgreSQL and MySQL, where no official evaluator runs. Values
// that are the same across engines compare equal: integers and floats equal as numbers, floats after
// rounding to 10 significant digits (a sandbox.Decimal as its Number, but exactly when it is an
// integer past int64 or past float64's range: decimalKey), []byte equal to the same text, bools as 0/1, and times
// equal to text holding the same date or date-time (see dateKey). A NaN equals nothing, as in
// Python (hasNaN). Both results must have run.
func Match(gold, pred *sandbox.Result, ordered bool) bool {
	if !gold.OK() || !pred.OK() || hasNaN(gold.Rows) || hasNaN(pred.Rows) {
		return false
	}
	if ordered {
		return listEqual(engineModel{}, gold.Rows, pred.Rows, true)
	}
	return setEqual(engineModel{}, gold.Rows, pred.Rows)
}

// hasNaN reports whether rows hold a NaN (a float64, or a sandbox.Decimal "NaN": psycopg's
// float('nan') and Decimal('NaN')). Python's NaN equals nothing, itself from another execution
// included, so a row holding one is in no other result's set or list: BIRD's set(pred) ==
// set(gold) and test-suite-sql-eval's result_eq (quick_rej, multiset_eq) are false whenever
// either result holds one (two empty results hold none). SQLite returns NULL for a NaN.
func hasNaN(rows [][]any) bool {
	for _, r := range rows {
		for _, v := range r {
			if d, ok := v.(sandbox.Decimal); ok {
				v = d.Number()
			}
			if f, ok := v.(float64); ok && math.IsNaN(f) {
				return true
			}
		}
	}
	return false
}

// RowKey is a canonical text of a row: equal keys mean equal rows under Match's value rules,
// except that Match finds no row holding a NaN equal to any (hasNaN); RowKey keys NaN as one
// value, so such rows group together (student eval's --vote).
// Values are length-prefixed, so no text can forge a column boundary.
func RowKey(row []any) string { return rowKey(engineModel{}, row) }

func valueKey(v any) string {
	switch x := v.(type) {
	case nil:
		return "\x00null"
	case int64:
		return "n" + strconv.FormatInt(x, 10)
	case sandbox.Decimal:
		return decimalKey(x)
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

// decimalKey is valueKey of an exact number: as its Number (int64, or a float64 rounded as any
// float is), except that an integer past int64 is keyed by its digits, as int64 is, and a number
// past float64's range by its digits too (canonical: no leading zeros, no trailing zeros in the
// fraction). Python's Decimal and int, which psycopg and pymysql give, compare exactly: keyed as
// the float64 nearest them, CAST(-1 AS UNSIGNED) and CAST(-2 AS UNSIGNED) were one answer; keyed
// as its text, a numeric past float64 equalled that text and not itself written with ".00".
func decimalKey(d sandbox.Decimal) string {
	n := d.Number()
	if c, ok := canonDecimal(string(d)); ok {
		if _, isFloat := n.(float64); !isFloat || !strings.Contains(c, ".") {
			return "n" + c
		}
	}
	return valueKey(n)
}

// canonDecimal returns the digits of s, a decimal number ([-+]digits[.digits]), without leading
// zeros, trailing zeros in the fraction, a fraction of zeros or the sign of zero; ok is false
// when s is not such a number (NaN, Infinity).
func canonDecimal(s string) (c string, ok bool) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(s, "+-")
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || strings.Trim(whole, "0123456789") != "" || strings.Trim(frac, "0123456789") != "" {
		return "", false
	}
	whole, frac = strings.TrimLeft(whole, "0"), strings.TrimRight(frac, "0")
	if whole == "" {
		whole = "0"
	}
	c = whole
	if frac != "" {
		c += "." + frac
	}
	if neg && c != "0" {
		c = "-" + c
	}
	return c, true
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

// pairClock is the time a prediction and its gold have together on one database, counted on
// their statements' running time: a wait for an execution slot (told through
// sandbox.ExecOptions.Waiting) moves the deadline on by as long, as the engines start a
// statement's own deadline once it has its slot. Before, the pair's budget ran on the clock, so
// a gold that waited for a slot under load was judged a timeout charged to the prediction.
// Safe for concurrent use.
type pairClock struct {
	deadline time.Time
	waits    sandbox.WaitClock
}

// newPairClock starts a clock of budget now.
func newPairClock(budget time.Duration) *pairClock {
	return &pairClock{deadline: time.Now().Add(budget)}
}

// left is the time left: to the deadline, the waits told (one under way included) not counted.
func (c *pairClock) left() time.Duration {
	waited, _ := c.waits.Waited()
	return time.Until(c.deadline.Add(waited))
}

// waiting is an execution's sandbox.ExecOptions.Waiting.
func (c *pairClock) waiting(w bool) { c.waits.Tell(w) }
