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
	"github.com/chainedsql/chainedsql/judge"
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
	Dialect datasets.Dialect
	Opener  episode.Opener
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
	Error   string `json:"error,omitempty"`
	// GoldError is why the gold SQL did not run, when it did not (the item is then unjudged,
	// whatever Outcome reports first: BIRD's style reports a failed prediction before the gold).
	GoldError string `json:"gold_error,omitempty"`
}

// ScoreReport is the outcome of Score.
type ScoreReport struct {
	Style        judge.Style `json:"style"`
	KeepDistinct bool        `json:"keep_distinct,omitempty"`
	Items        []ScoreItem `json:"items"`
	// EX is the accuracy overall and per difficulty (only its EX fields are meaningful).
	EX stats.EvalSummary `json:"ex"`
	// Outcomes counts the items by outcome.
	Outcomes map[string]int `json:"outcomes"`
}

// Score executes every task's prediction and gold SQL and judges them with judge.Judge in
// the configured style (the way BIRD's evaluation.py, or test-suite-sql-eval's exec evaluation
// for Spider, does). Tasks without a prediction score 0.
func Score(ctx context.Context, cfg ScoreConfig) (*ScoreReport, error) {
	if len(cfg.Tasks) == 0 {
		return nil, errors.New("score: no tasks")
	}
	if cfg.Opener == nil {
		return nil, errors.New("score: no database opener")
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
		return nil, fmt.Errorf("score: %w", err)
	}
	if cfg.KeepDistinct && cfg.Style != judge.StyleSpider {
		return nil, fmt.Errorf("score: keep-distinct applies to the %s style only, not %s", judge.StyleSpider, cfg.Style)
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
	rep := &ScoreReport{Style: cfg.Style, KeepDistinct: cfg.KeepDistinct, Items: items, Outcomes: map[string]int{}}
	er := make([]stats.EvalResult, len(items))
	for i, it := range items {
		er[i] = stats.EvalResult{Difficulty: it.Difficulty, Correct: it.Correct, Unjudged: it.GoldError != ""}
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
	it.Correct, it.Ordered, it.Outcome, it.Error, it.GoldError = v.Correct, v.Ordered, v.Outcome, v.Error, v.GoldError
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
	_, err := fmt.Fprintf(w, "%s (%s style)\n%s\n%s\n%s\noutcomes: %s\n", r.EX.FormatEX(), style,
		row("", names), row("count", counts), row("accuracy", accs), strings.Join(parts, ", "))
	if err == nil && r.EX.Unjudged > 0 {
		_, err = fmt.Fprintf(w, "unjudged: %d of %d, their gold SQL failed (scored as wrong; gold_error in the JSON report)\n", r.EX.Unjudged, r.EX.N)
	}
	return err
}
