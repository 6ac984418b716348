package evaluate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/stats"
)

// ScoreConfig is one scoring of a predictions file.
type ScoreConfig struct {
	Tasks       []datasets.Task
	Predictions map[int]Prediction
	// Style is the judging style; "" takes judge.StyleSpider when every task comes from
	// Spider, else judge.StyleBIRD.
	Style judge.Style
	// KeepDistinct keeps DISTINCT in the Spider style (the official --keep_distinct).
	KeepDistinct bool
	// Timeout bounds the prediction and the gold SQL of one task together (default: the style's
	// DefaultTimeout); a timeout scores 0.
	Timeout time.Duration
	// Dialect is the engine the predictions and gold SQL run on (default sqlite). On a server,
	// a task with SQLite gold only whose gold fails there is judged against that gold's answer
	// on its SQLite file (datasets.Task.GoldReference), which Opener must then open.
	Dialect datasets.Dialect
	// Opener gives the databases (a *sandbox.Connector: read-only, time-bounded execution).
	Opener episode.Opener
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
	// Executed is the prediction as the style executed it, when its rewrites changed it.
	Executed string `json:"executed_sql,omitempty"`
	Correct  bool   `json:"correct"`
	// Ordered says rows were compared in order.
	Ordered bool `json:"ordered,omitempty"`
	// Outcome is "ok" (both ran; Correct says whether they matched), the prediction's
	// "error"/"timeout"/"refused", "missing" (no prediction), "malformed", "db_mismatch"
	// (the prediction names another database) or "gold_error".
	Outcome string `json:"outcome"`
	// Error is why the prediction failed or was not judged, cut to textcap.Error.
	Error string `json:"error,omitempty"`
	// GoldError is why the gold SQL did not run, when it did not (the item is then unjudged,
	// whatever Outcome reports first: BIRD's style reports a failed prediction before the gold),
	// cut to textcap.Error.
	GoldError string `json:"gold_error,omitempty"`
	// GoldDialect is the engine whose result of the gold SQL the prediction was judged against
	// when it is not the report's dialect: sqlite, the task's SQLite file, where its SQLite
	// gold failed on the server (judge.Verdict.GoldOn; "" otherwise).
	GoldDialect datasets.Dialect `json:"gold_dialect,omitempty"`
}

// ScoreReport is the outcome of Score.
type ScoreReport struct {
	// Dialect is the engine the predictions ran on.
	Dialect      datasets.Dialect `json:"dialect"`
	Style        judge.Style      `json:"style"`
	KeepDistinct bool             `json:"keep_distinct,omitempty"`
	Items        []ScoreItem      `json:"items"`
	// EX is the accuracy overall and per difficulty (only its EX fields are meaningful).
	EX stats.EvalSummary `json:"ex"`
	// Outcomes counts the items by outcome.
	Outcomes map[string]int `json:"outcomes"`
}

// Check fills in cfg's defaults and checks it before any database is opened: the style and its
// options, that every prediction names a task, and that every task has gold SQL for the
// dialect (a benchmark file of another dialect is one error, not a report of gold errors).
// Score calls it; a caller may call it first to fail before connecting.
func (cfg *ScoreConfig) Check() error {
	if len(cfg.Tasks) == 0 {
		return errors.New("score: no tasks")
	}
	if cfg.Dialect == "" {
		cfg.Dialect = datasets.SQLite
	}
	if cfg.Jobs <= 0 {
		cfg.Jobs = 8
	}
	if cfg.Style == "" {
		cfg.Style = judge.StyleBIRD
		if allSpider(cfg.Tasks) {
			cfg.Style = judge.StyleSpider
		}
	}
	if _, err := judge.ParseStyle(string(cfg.Style)); err != nil {
		return fmt.Errorf("score: %w", err)
	}
	if cfg.KeepDistinct && cfg.Style != judge.StyleSpider {
		return fmt.Errorf("score: keep-distinct applies to the %s style only, not %s", judge.StyleSpider, cfg.Style)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = cfg.Style.DefaultTimeout()
	}
	known := make(map[int]bool, len(cfg.Tasks))
	for _, t := range cfg.Tasks {
		known[t.Index] = true
	}
	for _, i := range sortedIndexes(cfg.Predictions) {
		if !known[i] {
			return fmt.Errorf("score: prediction %d names no task (the tasks have indexes %d..%d)", i, cfg.Tasks[0].Index, cfg.Tasks[len(cfg.Tasks)-1].Index)
		}
	}
	return checkGold(cfg.Tasks, cfg.Dialect)
}

// checkGold returns an error when no task has gold SQL for d, naming the dialects the first
// has gold for. Where only some lack it, those are scored unjudged, as eval judges them.
func checkGold(tasks []datasets.Task, d datasets.Dialect) error {
	var first *datasets.Task
	n := 0
	for i := range tasks {
		if _, ok := tasks[i].GoldFor(d); !ok {
			if first == nil {
				first = &tasks[i]
			}
			n++
		}
	}
	if n < len(tasks) {
		return nil
	}
	var has []string
	for x, sql := range first.Gold {
		if sql != "" {
			has = append(has, string(x))
		}
	}
	sort.Strings(has)
	if len(has) == 0 {
		return fmt.Errorf("score: %d of %d tasks have no gold SQL (task %s has none)", n, len(tasks), first.ID)
	}
	msg := fmt.Sprintf("score: %d of %d tasks have no gold SQL for %s (task %s has gold for %s only): score on %s, or load tasks with %s gold",
		n, len(tasks), d, first.ID, strings.Join(has, ", "), strings.Join(has, " or "), d)
	if f := datasets.MiniDevFile(d); f != "" && first.Source == "minidev" {
		msg += " (BIRD mini-dev: its " + f + " in the same folder)"
	}
	return errors.New(msg)
}

// Score executes every task's prediction and gold SQL on cfg.Dialect and judges them with
// judge.Judge in the configured style (the way BIRD's evaluation.py, or test-suite-sql-eval's
// exec evaluation for Spider, does), after cfg.Check. Tasks without a prediction score 0.
func Score(ctx context.Context, cfg ScoreConfig) (*ScoreReport, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.Opener == nil {
		return nil, errors.New("score: no database opener")
	}
	cfg.Opener = episode.Patient(cfg.Opener) // a prediction's runaways cost the others time, not their verdicts

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
	rep := &ScoreReport{Dialect: cfg.Dialect, Style: cfg.Style, KeepDistinct: cfg.KeepDistinct, Items: items, Outcomes: map[string]int{}}
	er := make([]stats.EvalResult, len(items))
	for i, it := range items {
		er[i] = stats.EvalResultOf(it.Difficulty, rundir.NewOutcome(false, false, it.Correct, 0, 0, 0, 0, it.GoldError))
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
		it.Outcome, it.Error = judge.OutcomeGoldError, fmt.Sprintf("task has no gold SQL for %s", cfg.Dialect)
		it.GoldError = it.Error
		return it, nil
	}
	db, err := cfg.Opener.Open(ctx, cfg.Dialect, t)
	if err != nil {
		return it, fmt.Errorf("score task %s: opening %s: %w", t.ID, t.DBID, err)
	}
	judge := judge.Judge{Style: cfg.Style, KeepDistinct: cfg.KeepDistinct}
	if ref, ok := t.GoldReference(cfg.Dialect); ok {
		judge.Reference = func(ctx context.Context) (sandbox.DB, error) { return cfg.Opener.Open(ctx, ref, t) }
	}
	v, err := judge.Run(ctx, db, gold, p.SQL, nil, cfg.Timeout)
	if err != nil {
		return it, fmt.Errorf("score task %s on %s: %w", t.ID, t.DBID, err)
	}
	// Cut as a run dir keeps them: an engine's error may echo a built value whole.
	it.Correct, it.Ordered, it.Outcome, it.GoldDialect = v.Correct, v.Ordered, v.Outcome, v.GoldOn
	it.Error, it.GoldError = textcap.Cut(v.Error, textcap.Error), textcap.Cut(v.GoldError, textcap.Error)
	if v.PredSQL != p.SQL {
		it.Executed = v.PredSQL
	}
	return it, nil
}

// WriteJSON writes the report, every task's outcome included, as indented JSON to path; the
// file is replaced whole (written aside and renamed), so an interrupted write leaves the old one.
func (r *ScoreReport) WriteJSON(path string) error { return writeJSONAtomic(path, r) }

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
	style := string(r.Style)
	if r.KeepDistinct {
		style += ", keep-distinct"
	}
	dialect := r.Dialect
	if dialect == "" {
		dialect = datasets.SQLite
	}
	_, err := fmt.Fprintf(w, "%s (%s style, on %s)\n%s\n%s\n%s\noutcomes: %s\n", r.EX.FormatEX(), style, dialect,
		row("", names), row("count", counts), row("accuracy", accs), strings.Join(parts, ", "))
	if ref := r.referenced(); err == nil && ref > 0 {
		_, err = fmt.Fprintf(w, "gold on the SQLite reference: %d of %d, their SQLite gold failed on %s and ran on the task's SQLite file (gold_dialect in the JSON report)\n", ref, r.EX.N, dialect)
	}
	if err == nil && r.EX.Unjudged > 0 {
		_, err = fmt.Fprintf(w, "unjudged: %d of %d, their gold SQL failed (scored as wrong; gold_error in the JSON report)\n", r.EX.Unjudged, r.EX.N)
	}
	return err
}

// referenced counts the items judged against the gold's result on another engine than the
// report's (ScoreItem.GoldDialect).
func (r *ScoreReport) referenced() int {
	n := 0
	for _, it := range r.Items {
		if it.GoldDialect != "" && it.GoldDialect != r.Dialect {
			n++
		}
	}
	return n
}
