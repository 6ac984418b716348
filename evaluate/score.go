package evaluate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/stats"
)

// Scoring styles of Score.
const (
	// StyleBIRD is BIRD's official EX: set(pred rows) == set(gold rows), column order kept.
	StyleBIRD = "bird"
	// StyleSpider is Spider's execution match: the row lists must be equal when the gold SQL has
	// an ORDER BY, equal as multisets (duplicates counted) otherwise; column order kept.
	StyleSpider = "spider"
)

// DefaultScoreTimeout is BIRD's meta_time_out: the limit for one prediction and its gold together.
const DefaultScoreTimeout = 30 * time.Second

// ScoreConfig is one scoring of a predictions file.
type ScoreConfig struct {
	Tasks       []datasets.Task
	Predictions map[int]Prediction
	// Style is StyleBIRD or StyleSpider; "" takes StyleSpider when every task comes from Spider.
	Style string
	// Timeout bounds the prediction and the gold SQL of one task together (default 30 s, as
	// BIRD's evaluation.py); a timeout scores 0.
	Timeout time.Duration
	Dialect datasets.Dialect
	Opener  distill.Opener
	// Jobs is the number of tasks scored at once (default 8).
	Jobs int
}

// ScoreItem is how one task scored.
type ScoreItem struct {
	Index      int    `json:"index"`
	ID         string `json:"id"`
	DBID       string `json:"db_id"`
	Difficulty string `json:"difficulty,omitempty"`
	SQL        string `json:"sql"`
	Correct    bool   `json:"correct"`
	// Outcome is "ok" (both ran; Correct says whether they matched), the prediction's
	// "error"/"timeout"/"refused", "missing" (no prediction), "malformed", "db_mismatch"
	// (the prediction names another database) or "gold_error".
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// ScoreReport is the outcome of Score.
type ScoreReport struct {
	Style string      `json:"style"`
	Items []ScoreItem `json:"items"`
	// EX is the accuracy overall and per difficulty (only its EX fields are meaningful).
	EX stats.EvalSummary `json:"ex"`
	// Outcomes counts the items by outcome.
	Outcomes map[string]int `json:"outcomes"`
}

// Score executes every task's prediction and gold SQL and compares their results the way the
// official evaluation does (see StyleBIRD, StyleSpider). Values compare as Python's sqlite3
// values do: an integer equals a float of the same value, floats compare exactly, text and
// blobs never equal each other, NULL equals NULL. Tasks without a prediction score 0.
func Score(ctx context.Context, cfg ScoreConfig) (*ScoreReport, error) {
	if len(cfg.Tasks) == 0 {
		return nil, errors.New("score: no tasks")
	}
	if cfg.Opener == nil {
		return nil, errors.New("score: no database opener")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultScoreTimeout
	}
	if cfg.Dialect == "" {
		cfg.Dialect = datasets.SQLite
	}
	if cfg.Jobs <= 0 {
		cfg.Jobs = 8
	}
	switch cfg.Style {
	case "":
		cfg.Style = StyleBIRD
		if allSpider(cfg.Tasks) {
			cfg.Style = StyleSpider
		}
	case StyleBIRD, StyleSpider:
	default:
		return nil, fmt.Errorf("score: style %q: want %s or %s", cfg.Style, StyleBIRD, StyleSpider)
	}
	known := make(map[int]bool, len(cfg.Tasks))
	for _, t := range cfg.Tasks {
		known[t.Index] = true
	}
	for _, i := range sortedIndexes(cfg.Predictions) {
		if !known[i] {
			return nil, fmt.Errorf("score: prediction %d names no task (the tasks have indexes %d..%d)", i, cfg.Tasks[0].Index, cfg.Tasks[len(cfg.Tasks)-1].Index)
		}
	}

	items := make([]ScoreItem, len(cfg.Tasks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.Jobs)
	for i, t := range cfg.Tasks {
		g.Go(func() error {
			it, err := scoreOne(gctx, &cfg, t)
			items[i] = it
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	rep := &ScoreReport{Style: cfg.Style, Items: items, Outcomes: map[string]int{}}
	er := make([]stats.EvalResult, len(items))
	for i, it := range items {
		er[i] = stats.EvalResult{Difficulty: it.Difficulty, Correct: it.Correct}
		rep.Outcomes[it.Outcome]++
	}
	rep.EX = stats.SummarizeEval(er)
	return rep, nil
}

func scoreOne(ctx context.Context, cfg *ScoreConfig, t datasets.Task) (ScoreItem, error) {
	it := ScoreItem{Index: t.Index, ID: t.ID, DBID: t.DBID, Difficulty: t.Difficulty}
	p, ok := cfg.Predictions[t.Index]
	switch {
	case !ok:
		it.Outcome = "missing"
		return it, nil
	case p.Malformed != "":
		it.Outcome, it.Error, it.SQL = "malformed", p.Malformed, p.SQL
		return it, nil
	}
	it.SQL = p.SQL
	if p.DBID != t.DBID {
		it.Outcome, it.Error = "db_mismatch", fmt.Sprintf("prediction names database %q, the task's is %q", p.DBID, t.DBID)
		return it, nil
	}
	gold, ok := t.GoldFor(cfg.Dialect)
	if !ok {
		it.Outcome, it.Error = "gold_error", fmt.Sprintf("task has no gold SQL for %s", cfg.Dialect)
		return it, nil
	}
	db, err := cfg.Opener.Open(ctx, cfg.Dialect, t)
	if err != nil {
		return it, fmt.Errorf("score task %s: opening %s: %w", t.ID, t.DBID, err)
	}
	// One budget for both statements, as BIRD's func_timeout around execute_sql.
	deadline := time.Now().Add(cfg.Timeout)
	pred, err := db.Exec(ctx, p.SQL, datasets.ExecOptions{Timeout: cfg.Timeout})
	if err != nil {
		return it, fmt.Errorf("score task %s: executing the prediction on %s: %w", t.ID, t.DBID, err)
	}
	if !pred.OK() {
		it.Outcome, it.Error = string(pred.Outcome), pred.Error
		return it, nil
	}
	left := time.Until(deadline)
	if left <= 0 {
		it.Outcome, it.Error = string(datasets.OutcomeTimeout), fmt.Sprintf("the prediction used the whole %s", cfg.Timeout)
		return it, nil
	}
	gres, err := db.Exec(ctx, gold, datasets.ExecOptions{Timeout: left})
	if err != nil {
		return it, fmt.Errorf("score task %s: executing the gold SQL on %s: %w", t.ID, t.DBID, err)
	}
	if !gres.OK() {
		if gres.Outcome == datasets.OutcomeTimeout {
			it.Outcome, it.Error = string(datasets.OutcomeTimeout), "the gold SQL ran past the time left: "+gres.Error
		} else {
			it.Outcome, it.Error = "gold_error", fmt.Sprintf("%s: %s", gres.Outcome, gres.Error)
		}
		return it, nil
	}
	ordered := cfg.Style == StyleSpider && datasets.HasOrderBy(gold)
	if !ordered {
		if pred, err = rawValues(ctx, db, p.SQL, pred, deadline); err == nil {
			gres, err = rawValues(ctx, db, gold, gres, deadline)
		}
		if err != nil {
			return it, fmt.Errorf("score task %s on %s: %w", t.ID, t.DBID, err)
		}
	}
	it.Outcome = string(datasets.OutcomeOK)
	if cfg.Style == StyleSpider {
		it.Correct = SpiderMatch(gres.Rows, pred.Rows, ordered)
	} else {
		it.Correct = BIRDMatch(gres.Rows, pred.Rows)
	}
	return it, nil
}

// rawValues undoes go-sqlite3's conversion of DATE, DATETIME and TIMESTAMP columns into
// time.Time (lossy: text it cannot parse becomes the zero time, integers become Unix times),
// so values compare as the stored ones, like Python's sqlite3. When res holds a time.Time, the
// query runs again as "WITH q(c1..cn) AS (query) SELECT +c1, ..., +cn FROM q": unary plus is a
// no-op on every SQLite value but leaves the column without a declared type, so the driver
// returns the stored text or integer. The rewrite can lose the query's row order, so it is used
// only where order does not count; when it does not run, res is kept (and pyValueKey formats
// the times as SQLite text).
func rawValues(ctx context.Context, db datasets.DB, query string, res *datasets.Result, deadline time.Time) (*datasets.Result, error) {
	if db.Dialect() != datasets.SQLite || !hasTime(res.Rows) || len(res.Columns) == 0 {
		return res, nil
	}
	left := time.Until(deadline)
	if left <= 0 {
		return res, nil
	}
	cols := make([]string, len(res.Columns))
	plus := make([]string, len(res.Columns))
	for i := range cols {
		cols[i] = fmt.Sprintf("c%d", i+1)
		plus[i] = "+" + cols[i]
	}
	body := strings.TrimSuffix(strings.TrimSpace(query), ";")
	wrapped := fmt.Sprintf("WITH chainedsql_raw(%s) AS (%s\n) SELECT %s FROM chainedsql_raw", strings.Join(cols, ", "), body, strings.Join(plus, ", "))
	raw, err := db.Exec(ctx, wrapped, datasets.ExecOptions{Timeout: left})
	if err != nil {
		return nil, err
	}
	if !raw.OK() || raw.Total != res.Total {
		return res, nil
	}
	raw.Columns = res.Columns
	return raw, nil
}

func hasTime(rows [][]any) bool {
	for _, r := range rows {
		for _, v := range r {
			if _, ok := v.(time.Time); ok {
				return true
			}
		}
	}
	return false
}

// BIRDMatch is BIRD's official comparison: set(pred) == set(gold) over rows as Python tuples.
func BIRDMatch(gold, pred [][]any) bool {
	g, p := pySet(gold), pySet(pred)
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

// SpiderMatch is Spider's execution comparison with column order kept: equal row lists when
// ordered, else equal multisets of rows.
func SpiderMatch(gold, pred [][]any, ordered bool) bool {
	if len(gold) != len(pred) {
		return false
	}
	if ordered {
		for i := range gold {
			if pyRowKey(gold[i]) != pyRowKey(pred[i]) {
				return false
			}
		}
		return true
	}
	count := map[string]int{}
	for _, r := range gold {
		count[pyRowKey(r)]++
	}
	for _, r := range pred {
		k := pyRowKey(r)
		if count[k] == 0 {
			return false
		}
		count[k]--
	}
	return true
}

func pySet(rows [][]any) map[string]struct{} {
	s := make(map[string]struct{}, len(rows))
	for _, r := range rows {
		s[pyRowKey(r)] = struct{}{}
	}
	return s
}

// pyRowKey is a canonical text of a row such that two rows have equal keys exactly when the
// Python tuples sqlite3 would return compare equal. Each value is length-prefixed so no text
// can forge a separator.
func pyRowKey(row []any) string {
	var b strings.Builder
	for _, v := range row {
		k := pyValueKey(v)
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

// pyValueKey keys one value under Python's equality: int == float of the same value (1 == 1.0),
// bool == int, floats exact, str != bytes, None == None.
//
// A time.Time (go-sqlite3's reading of a DATE, DATETIME or TIMESTAMP column that rawValues could
// not undo) is keyed as SQLite text: "2006-01-02" for a midnight value, "2006-01-02
// 15:04:05[.fff]" otherwise, the layouts BIRD's databases hold.
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

// WriteText prints the report as BIRD's evaluation does: counts and accuracy per difficulty and
// in total, then the outcomes.
func (r *ScoreReport) WriteText(w io.Writer) error {
	var names, counts, accs []string
	for _, b := range r.EX.ByDifficulty {
		name := b.Difficulty
		if name == "" {
			name = "other"
		}
		names = append(names, name)
		counts = append(counts, strconv.Itoa(b.N))
		accs = append(accs, fmt.Sprintf("%.2f", 100*b.EX))
	}
	names = append(names, "total")
	counts = append(counts, strconv.Itoa(r.EX.N))
	accs = append(accs, fmt.Sprintf("%.2f", 100*r.EX.EX))
	row := func(label string, cells []string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "%-10s", label)
		for _, c := range cells {
			fmt.Fprintf(&b, "%-14s", c)
		}
		return strings.TrimRight(b.String(), " ")
	}
	outs := make([]string, 0, len(r.Outcomes))
	for k := range r.Outcomes {
		outs = append(outs, k)
	}
	sort.Strings(outs)
	parts := make([]string, len(outs))
	for i, k := range outs {
		parts[i] = fmt.Sprintf("%s %d", k, r.Outcomes[k])
	}
	_, err := fmt.Fprintf(w, "%s (%s style)\n%s\n%s\n%s\noutcomes: %s\n", r.EX.FormatEX(), r.Style,
		row("", names), row("count", counts), row("accuracy", accs), strings.Join(parts, ", "))
	return err
}
