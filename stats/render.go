package stats

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes s as indented JSON.
func (s *DatasetStats) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// table is a rendered-agnostic table: a title, a header and rows of cells.
type table struct {
	title  string
	header []string
	rows   [][]string
}

func pct(r float64) string { return fmt.Sprintf("%.1f%%", 100*r) }

func groupTable(title, key string, groups []Group, overall *Group) table {
	t := table{title: title, header: []string{key, "rows", "share", "tokens", "mean", "p50", "p95", "max", "trainable", "trainable×ep", "avg turns", "converged", "exec ok", "correct", "unjudged", "viol rows", "viol total", "malformed turns"}}
	row := func(g *Group) []string {
		return []string{g.Name, fmt.Sprint(g.Rows), pct(g.Share), fmt.Sprint(g.Tokens.Sum), fmt.Sprintf("%.1f", g.Tokens.Mean),
			fmt.Sprint(g.Tokens.P50), fmt.Sprint(g.Tokens.P95), fmt.Sprint(g.Tokens.Max), fmt.Sprint(g.TrainableTokens),
			fmt.Sprint(g.TrainableTimesEpochs), fmt.Sprintf("%.2f", g.AvgTurns), pct(g.Rate(g.Converged)), pct(g.Rate(g.ExecOK)),
			pct(g.Rate(g.Correct)), fmt.Sprint(g.Unjudged), fmt.Sprint(g.RowsWithViolation), fmt.Sprint(g.FormatViolations),
			fmt.Sprint(g.MalformedTurns)}
	}
	for i := range groups {
		r := row(&groups[i])
		if r[0] == "" {
			r[0] = "(none)"
		}
		t.rows = append(t.rows, r)
	}
	if overall != nil {
		t.rows = append(t.rows, row(overall))
	}
	return t
}

func (s *DatasetStats) turnsTable() table {
	t := table{title: "Turns histogram (rows per number of turns)", header: []string{"teacher"}}
	for k := 1; k <= s.MaxTurns; k++ {
		t.header = append(t.header, fmt.Sprint(k))
	}
	add := func(g *Group) {
		r := []string{g.Name}
		for k := 1; k <= s.MaxTurns; k++ {
			r = append(r, fmt.Sprint(g.TurnsHistogram[k]))
		}
		t.rows = append(t.rows, r)
	}
	for i := range s.Teachers {
		add(&s.Teachers[i])
	}
	add(&s.Overall)
	return t
}

func (s *DatasetStats) excludedTable() table {
	t := table{title: fmt.Sprintf("Excluded rows: %d", s.Excluded.Count), header: []string{"reason", "teacher", "rows"}}
	type k struct{ reason, teacher string }
	counts := map[k]int{}
	for _, e := range s.Excluded.Rows {
		counts[k{e.Reason, e.Teacher}]++
	}
	ks := make([]k, 0, len(counts))
	for x := range counts {
		ks = append(ks, x)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].reason != ks[j].reason {
			return ks[i].reason < ks[j].reason
		}
		return ks[i].teacher < ks[j].teacher
	})
	for _, x := range ks {
		t.rows = append(t.rows, []string{x.reason, x.teacher, fmt.Sprint(counts[x])})
	}
	return t
}

// thinkTable counts, per teacher, where the assistant turns' think blocks came from, the inline
// blocks left out, the truncated turns, and the teacher's reasoning tokens.
func (s *DatasetStats) thinkTable() table {
	mode := s.ThinkMode
	if mode == "" {
		mode = "unknown"
	}
	title := fmt.Sprintf("Think blocks (--think %s) and truncation, in assistant turns", mode)
	if s.Truncated != "" {
		title = fmt.Sprintf("Think blocks (--think %s) and truncation (--truncated %s), in assistant turns", mode, s.Truncated)
	}
	t := table{title: title,
		header: []string{"teacher", "think field", "think inline", "no think", "inline dropped", "truncated turns", "rows truncated", "reasoning tokens", "rows estimated"}}
	add := func(g *Group) {
		t.rows = append(t.rows, []string{g.Name, fmt.Sprint(g.Think.Field), fmt.Sprint(g.Think.Inline), fmt.Sprint(g.Think.None),
			fmt.Sprint(g.Think.InlineDropped), fmt.Sprint(g.Think.TruncatedTurns), fmt.Sprint(g.RowsTruncated),
			fmt.Sprint(g.ReasoningTokens), fmt.Sprint(g.RowsReasoningEstimated)})
	}
	for i := range s.Teachers {
		add(&s.Teachers[i])
	}
	add(&s.Overall)
	return t
}

func (s *DatasetStats) tables() []table {
	title := fmt.Sprintf("Per teacher (%d rows, trainable × %d epochs)", s.Overall.Rows, s.Epochs)
	if s.Overall.Unjudged > 0 {
		// As the eval headline says it: correct counts these rows as wrong.
		title += fmt.Sprintf("; %d of %d unjudged: their gold SQL failed", s.Overall.Unjudged, s.Overall.Rows)
	}
	return []table{
		groupTable(title, "teacher", s.Teachers, &s.Overall),
		groupTable("Per dialect", "dialect", s.Dialects, nil),
		groupTable("Per difficulty", "difficulty", s.Difficulties, nil),
		s.turnsTable(),
		s.thinkTable(),
		s.excludedTable(),
	}
}

// Table is one of the summary's tables as WriteText prints it: a title, a header and rows of
// cells (for other renderers, such as curate view's stats page).
type Table struct {
	Title  string     `json:"title"`
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

// Tables returns the tables WriteText and WriteMarkdown print, in the same order.
func (s *DatasetStats) Tables() []Table {
	ts := s.tables()
	out := make([]Table, len(ts))
	for i, t := range ts {
		out[i] = Table{Title: t.title, Header: t.header, Rows: t.rows}
		if out[i].Rows == nil {
			out[i].Rows = [][]string{}
		}
	}
	return out
}

// WriteText writes the summary as aligned terminal tables; a table without rows is "(none)".
func (s *DatasetStats) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "Dataset %s\n", s.Dir)
	for _, t := range s.tables() {
		fmt.Fprintf(w, "\n%s\n", t.title)
		if len(t.rows) == 0 {
			// No header over nothing, as WriteMarkdown and curate view do.
			if _, err := fmt.Fprintln(w, "(none)"); err != nil {
				return err
			}
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(t.header, "\t")+"\t")
		for _, r := range t.rows {
			fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// WriteMarkdown writes the summary as Markdown tables.
func (s *DatasetStats) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Dataset `%s`\n", s.Dir)
	for _, t := range s.tables() {
		fmt.Fprintf(&b, "\n## %s\n\n", t.title)
		if len(t.rows) == 0 {
			b.WriteString("(none)\n")
			continue
		}
		b.WriteString("| " + strings.Join(t.header, " | ") + " |\n|")
		for i := range t.header {
			if i == 0 {
				b.WriteString("---|")
			} else {
				b.WriteString("---:|")
			}
		}
		b.WriteString("\n")
		for _, r := range t.rows {
			cells := make([]string, len(r))
			for i, c := range r {
				cells[i] = strings.ReplaceAll(c, "|", `\|`)
			}
			b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
