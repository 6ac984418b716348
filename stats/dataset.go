// Package stats summarises curated datasets (per teacher, dialect and difficulty: rows, token
// counts, trainable tokens, turns, convergence, exec-ok, format violations, correctness) and
// evaluation runs (EvalSummary), and renders them as terminal tables, JSON, Markdown and PNG
// plots.
package stats

import (
	"context"
	"fmt"
	"sort"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/rundir"
)

// DatasetStats describes one dataset directory.
type DatasetStats struct {
	Dir string `json:"dir"`
	// Epochs multiplies trainable tokens in TrainableTimesEpochs (1 unless set by SetEpochs).
	Epochs       int     `json:"epochs"`
	Overall      Group   `json:"overall"`
	Teachers     []Group `json:"teachers"`
	Dialects     []Group `json:"dialects"`
	Difficulties []Group `json:"difficulties"`
	// ThinkMode is the --think mode the dataset was built with (from stats.json, else the rows).
	ThinkMode string `json:"think_mode"`
	// Truncated is the --truncated policy the dataset was built with (from stats.json; "" when
	// it does not say).
	Truncated string `json:"truncated"`
	// MaxTurns is the largest turn count of any row (the width of the turn histograms).
	MaxTurns int           `json:"max_turns"`
	Excluded ExcludedStats `json:"excluded"`

	// Per-teacher row values for plots, in row order.
	tokensByTeacher map[string][]int
	turnsByTeacher  map[string][]int
}

// Group is the summary of the rows sharing one teacher, dialect or difficulty (or all rows).
type Group struct {
	Name string `json:"name"`
	Rows int    `json:"rows"`
	// Share is Rows over all rows.
	Share                float64           `json:"share"`
	Tokens               curate.TokenStats `json:"tokens"`
	TrainableTokens      int64             `json:"trainable_tokens"`
	TrainableTimesEpochs int64             `json:"trainable_tokens_x_epochs"`
	// TurnsHistogram[k] counts rows with k turns (index 0 unused by real episodes).
	TurnsHistogram []int   `json:"turns_histogram"`
	AvgTurns       float64 `json:"avg_turns"`
	// Converged, ExecOK, Correct, Unjudged, RowsWithViolation, FormatViolations,
	// MalformedTurns and RowsTruncated count the rows' outcomes (curate.Row.Outcome, summed by rundir.Tally):
	// converged is the same SQL twice in a row and that SQL ran, in datasets of every format
	// version; unjudged rows (gold_error set: the gold SQL gave no result) are never correct,
	// and datasets before chainedsql-sft/v5 have none.
	Converged int `json:"converged"`
	ExecOK    int `json:"exec_ok"`
	Correct   int `json:"correct"`
	Unjudged  int `json:"unjudged"`
	// RowsWithViolation counts rows with any format violation; FormatViolations sums them.
	RowsWithViolation int `json:"rows_with_violation"`
	FormatViolations  int `json:"format_violations"`
	// MalformedTurns sums the rows' malformed_turns: turns failing the format reward's rule
	// (every format violation and truncated turn, and looser replies; 0 in datasets built
	// before the column).
	MalformedTurns int `json:"malformed_turns"`
	// Think counts assistant turns by the source of their think block (field, inline, none),
	// inline blocks left out, and truncated turns; RowsTruncated counts rows with any.
	Think         curate.ThinkCounts `json:"think"`
	RowsTruncated int                `json:"rows_truncated"`
	// ReasoningTokens sums the teacher's reasoning tokens; RowsReasoningEstimated counts rows
	// where some were counted with the student tokenizer (the provider reported none).
	ReasoningTokens        int64 `json:"teacher_reasoning_tokens"`
	RowsReasoningEstimated int   `json:"rows_reasoning_tokens_estimated"`

	tokens []int32
	out    rundir.Tally
}

// ExcludedStats summarises the rows Build left out (from stats.json).
type ExcludedStats struct {
	Count     int               `json:"count"`
	ByReason  map[string]int    `json:"by_reason"`
	ByTeacher map[string]int    `json:"by_teacher"`
	Rows      []curate.Excluded `json:"rows"`
}

// Rate returns n over the group's rows (0 for an empty group).
func (g *Group) Rate(n int) float64 { return ratio(n, g.Rows) }

func (g *Group) add(r *curate.Row) {
	g.Rows++
	g.tokens = append(g.tokens, int32(r.NumTokens))
	g.TrainableTokens += r.NumTrainableTokens
	t := int(r.Turns)
	for len(g.TurnsHistogram) <= t {
		g.TurnsHistogram = append(g.TurnsHistogram, 0)
	}
	g.TurnsHistogram[t]++
	g.out.Add(r.Outcome())
	o := &g.out
	g.Converged, g.ExecOK, g.Correct, g.Unjudged, g.RowsWithViolation, g.FormatViolations, g.RowsTruncated, g.MalformedTurns =
		o.Converged, o.ExecOK, o.Correct, o.Unjudged, o.RowsWithViolation, o.FormatViolations, o.RowsTruncated, o.MalformedTurns
	g.Think.Add(r)
	g.ReasoningTokens += r.ReasoningTokens
	if r.ReasoningTokensEstimated {
		g.RowsReasoningEstimated++
	}
}

func (g *Group) finish(total, maxTurns int) {
	g.Share = ratio(g.Rows, total)
	g.Tokens = curate.TokenStatsOf(g.tokens)
	g.tokens = nil
	g.AvgTurns = ratio(g.out.Turns, g.Rows)
	for len(g.TurnsHistogram) <= maxTurns {
		g.TurnsHistogram = append(g.TurnsHistogram, 0)
	}
}

// Dataset reads every row of the dataset at dir (streaming; it keeps 4 bytes per row for exact
// percentiles) and the exclusions from its stats.json.
func Dataset(ctx context.Context, dir string) (*DatasetStats, error) {
	ds, err := curate.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st := &DatasetStats{
		Dir: dir, Epochs: 1, Overall: Group{Name: "all"},
		tokensByTeacher: map[string][]int{}, turnsByTeacher: map[string][]int{},
		Excluded: ExcludedStats{ByReason: map[string]int{}, ByTeacher: map[string]int{}, Rows: []curate.Excluded{}},
	}
	teachers, dialects, diffs := map[string]*Group{}, map[string]*Group{}, map[string]*Group{}
	group := func(m map[string]*Group, name string) *Group {
		g := m[name]
		if g == nil {
			g = &Group{Name: name}
			m[name] = g
		}
		return g
	}
	err = ds.Rows(ctx, func(r *curate.Row) error {
		if st.ThinkMode == "" {
			st.ThinkMode = r.ThinkMode
		}
		st.Overall.add(r)
		group(teachers, r.Teacher).add(r)
		group(dialects, r.Dialect).add(r)
		group(diffs, r.Difficulty).add(r)
		st.tokensByTeacher[r.Teacher] = append(st.tokensByTeacher[r.Teacher], int(r.NumTokens))
		st.turnsByTeacher[r.Teacher] = append(st.turnsByTeacher[r.Teacher], int(r.Turns))
		st.MaxTurns = max(st.MaxTurns, int(r.Turns))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	total := st.Overall.Rows
	st.Overall.finish(total, st.MaxTurns)
	collect := func(m map[string]*Group, order func([]string) []string) []Group {
		names := order(keys(m))
		out := make([]Group, 0, len(names))
		for _, n := range names {
			g := m[n]
			g.finish(total, st.MaxTurns)
			out = append(out, *g)
		}
		return out
	}
	byName := func(s []string) []string { sort.Strings(s); return s }
	st.Teachers = collect(teachers, byName)
	st.Dialects = collect(dialects, byName)
	st.Difficulties = collect(diffs, orderDifficulties)
	if ds.Report != nil {
		st.Excluded.Rows = ds.Report.Excluded
		st.Excluded.Count = len(ds.Report.Excluded)
		for _, e := range ds.Report.Excluded {
			st.Excluded.ByReason[e.Reason]++
			st.Excluded.ByTeacher[e.Teacher]++
		}
		if ds.Report.Epochs > 0 {
			st.Epochs = ds.Report.Epochs
		}
		if ds.Report.ThinkMode != "" {
			st.ThinkMode = string(ds.Report.ThinkMode)
		}
		st.Truncated = string(ds.Report.Truncated)
	}
	st.SetEpochs(st.Epochs)
	return st, nil
}

// SetEpochs sets Epochs (n <= 0 means 1) and every group's TrainableTimesEpochs.
func (s *DatasetStats) SetEpochs(n int) {
	if n <= 0 {
		n = 1
	}
	s.Epochs = n
	s.Overall.TrainableTimesEpochs = s.Overall.TrainableTokens * int64(n)
	for _, gs := range [][]Group{s.Teachers, s.Dialects, s.Difficulties} {
		for i := range gs {
			gs[i].TrainableTimesEpochs = gs[i].TrainableTokens * int64(n)
		}
	}
}
