package stats

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
)

// writeDataset writes rows as a one-shard dataset with a stats.json listing excluded.
func writeDataset(t *testing.T, rows []curate.Row, excluded []curate.Excluded) string {
	t.Helper()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, curate.DataDir), 0o755)
	// Two shards, to read across files.
	half := len(rows) / 2
	for i, part := range [][]curate.Row{rows[:half], rows[half:]} {
		f, err := os.Create(filepath.Join(dir, curate.DataDir, []string{"train-00000-of-00002.parquet", "train-00001-of-00002.parquet"}[i]))
		if err != nil {
			t.Fatal(err)
		}
		w := parquet.NewGenericWriter[curate.Row](f, parquet.Compression(&parquet.Zstd))
		if _, err := w.Write(part); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	rep := curate.BuildReport{Excluded: excluded, ExcludedCount: len(excluded), Epochs: 2}
	b, _ := json.Marshal(rep)
	os.WriteFile(filepath.Join(dir, curate.StatsFile), b, 0o644)
	return dir
}

func row(teacher, dialect, diff string, tokens, trainable, turns int, conv, ok, correct bool, viol int) curate.Row {
	return curate.Row{Teacher: teacher, Dialect: dialect, Difficulty: diff, NumTokens: int64(tokens), NumTrainableTokens: int64(trainable),
		Turns: int64(turns), Converged: conv, ExecOK: ok, Correct: correct, FormatViolations: int64(viol), Key: teacher + "/" + diff,
		Messages: []chat.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}}}
}

func handRows() []curate.Row {
	rows := []curate.Row{
		row("alpha", "sqlite", "simple", 100, 10, 1, false, true, true, 0),
		row("alpha", "sqlite", "moderate", 300, 30, 2, true, true, false, 1),
		row("alpha", "postgres", "simple", 200, 20, 2, true, false, false, 0),
		row("beta", "sqlite", "challenging", 1000, 100, 5, false, true, true, 3),
		row("beta", "postgres", "simple", 400, 40, 3, true, true, true, 0),
		row("alpha", "sqlite", "simple", 500, 50, 2, true, true, true, 2),
	}
	// alpha's postgres row could not be judged: its gold SQL failed there.
	rows[2].GoldError = "error: function strftime(unknown, text) does not exist"
	return rows
}

func TestDatasetHandComputed(t *testing.T) {
	excl := []curate.Excluded{{Key: "x/1", Teacher: "beta", Reason: curate.ReasonMaxLength, NumTokens: 40000}, {Key: "x/2", Teacher: "beta", Reason: curate.ReasonMaxLength, NumTokens: 50000}}
	dir := writeDataset(t, handRows(), excl)
	st, err := Dataset(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	o := st.Overall
	// 6 rows; tokens 100+300+200+1000+400+500 = 2500; sorted 100 200 300 400 500 1000:
	// p50 = 3rd (ceil 3.0) = 300, p95 = 6th (ceil 5.7) = 1000.
	if o.Rows != 6 || o.Tokens.Sum != 2500 || o.Tokens.P50 != 300 || o.Tokens.P95 != 1000 || o.Tokens.Max != 1000 || math.Abs(o.Tokens.Mean-2500.0/6) > 1e-9 {
		t.Errorf("overall tokens %+v rows %d", o.Tokens, o.Rows)
	}
	if o.TrainableTokens != 250 || st.Epochs != 2 || o.TrainableTimesEpochs != 500 {
		t.Errorf("trainable %d × %d = %d", o.TrainableTokens, st.Epochs, o.TrainableTimesEpochs)
	}
	// Converged: 4 rows repeat their SQL, but alpha/postgres's did not run (exec_ok false).
	if o.Converged != 3 || o.ExecOK != 5 || o.Correct != 4 || o.RowsWithViolation != 3 || o.FormatViolations != 6 || o.Unjudged != 1 {
		t.Errorf("overall %+v", o)
	}
	if want := []int{0, 1, 3, 1, 0, 1}; !equalInts(o.TurnsHistogram, want) || st.MaxTurns != 5 || math.Abs(o.AvgTurns-15.0/6) > 1e-9 {
		t.Errorf("turns histogram %v (max %d, avg %v), want %v", o.TurnsHistogram, st.MaxTurns, o.AvgTurns, want)
	}
	if len(st.Teachers) != 2 || st.Teachers[0].Name != "alpha" || st.Teachers[1].Name != "beta" {
		t.Fatalf("teachers %+v", st.Teachers)
	}
	a, b := st.Teachers[0], st.Teachers[1]
	// alpha: 100 300 200 500 → sum 1100, sorted 100 200 300 500, p50 = 2nd = 200, p95 = 4th = 500.
	if a.Rows != 4 || math.Abs(a.Share-4.0/6) > 1e-9 || a.Tokens.Sum != 1100 || a.Tokens.P50 != 200 || a.Tokens.P95 != 500 || a.TrainableTokens != 110 || a.TrainableTimesEpochs != 220 {
		t.Errorf("alpha %+v", a)
	}
	if !equalInts(a.TurnsHistogram, []int{0, 1, 3, 0, 0, 0}) || a.Converged != 2 || a.ExecOK != 3 || a.Correct != 2 || a.RowsWithViolation != 2 || a.FormatViolations != 3 || a.Unjudged != 1 {
		t.Errorf("alpha %+v", a)
	}
	if b.Rows != 2 || b.Tokens.P50 != 400 || b.Tokens.Max != 1000 || !equalInts(b.TurnsHistogram, []int{0, 0, 0, 1, 0, 1}) || b.Correct != 2 || b.Unjudged != 0 {
		t.Errorf("beta %+v", b)
	}
	if len(st.Dialects) != 2 || st.Dialects[0].Name != "postgres" || st.Dialects[0].Rows != 2 || st.Dialects[1].Rows != 4 ||
		st.Dialects[0].Unjudged != 1 || st.Dialects[1].Unjudged != 0 {
		t.Errorf("dialects %+v", st.Dialects)
	}
	if len(st.Difficulties) != 3 || st.Difficulties[0].Name != "simple" || st.Difficulties[0].Rows != 4 || st.Difficulties[1].Name != "moderate" || st.Difficulties[2].Name != "challenging" {
		t.Errorf("difficulties %+v", st.Difficulties)
	}
	if st.Excluded.Count != 2 || st.Excluded.ByReason[curate.ReasonMaxLength] != 2 || st.Excluded.ByTeacher["beta"] != 2 {
		t.Errorf("excluded %+v", st.Excluded)
	}
	st.SetEpochs(3)
	if st.Overall.TrainableTimesEpochs != 750 || st.Teachers[1].TrainableTimesEpochs != 420 {
		t.Errorf("SetEpochs(3): %d %d", st.Overall.TrainableTimesEpochs, st.Teachers[1].TrainableTimesEpochs)
	}

	var txt, md, js bytes.Buffer
	if err := st.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"alpha", "66.7%", "2500", "max_length", "; 1 of 6 unjudged: their gold SQL failed", " unjudged "} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, txt.String())
		}
	}
	// alpha: correct 2 of 4, 1 unjudged; postgres: 1 of 2 unjudged.
	for _, want := range []string{"| alpha | 4 | 66.7% | 1100 | 275.0 | 200 | 500 | 500 | 110 | 330 |", "| correct | unjudged |",
		"| 50.0% | 1 | 2 | 3 |", "## Per teacher (6 rows, trainable × 3 epochs); 1 of 6 unjudged: their gold SQL failed\n"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	var back DatasetStats
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Overall.Tokens.Sum != 2500 || len(back.Teachers) != 2 || back.Excluded.Count != 2 ||
		back.Overall.Unjudged != 1 || back.Teachers[0].Unjudged != 1 || back.Dialects[0].Unjudged != 1 {
		t.Errorf("json round trip: %v %+v", err, back.Overall)
	}
	if !strings.Contains(js.String(), `"unjudged": 1`) {
		t.Errorf("json lacks unjudged:\n%s", js.String())
	}

	paths, err := st.WritePlots(filepath.Join(t.TempDir(), "plots"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 4 {
		t.Fatalf("plots %v", paths)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 2000 {
			t.Errorf("%s is not a PNG (%d bytes)", p, len(b))
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestNearestRank(t *testing.T) {
	s := make([]int64, 20)
	for i := range s {
		s[i] = int64(i + 1)
	}
	for _, c := range []struct {
		p    float64
		want int64
	}{{50, 10}, {95, 19}, {100, 20}, {1, 1}, {5, 1}, {5.1, 2}} {
		if got := curate.NearestRank(s, c.p); got != c.want {
			t.Errorf("p%v of 1..20 = %d, want %d", c.p, got, c.want)
		}
	}
	if got := curate.TokenStatsOf([]int{7}); got.P50 != 7 || got.P95 != 7 || got.Mean != 7 {
		t.Errorf("single value: %+v", got)
	}
	if got := curate.TokenStatsOf([]int{}); got != (curate.TokenStats{}) {
		t.Errorf("empty: %+v", got)
	}
}

func TestSummarizeEval(t *testing.T) {
	res := []EvalResult{
		{Difficulty: "simple", Correct: true, Converged: true, ExecOK: true, Turns: 2},
		{Difficulty: "simple", Correct: false, Converged: true, ExecOK: true, Turns: 2},
		{Difficulty: "challenging", Correct: true, Converged: false, ExecOK: true, Turns: 5, FormatViolations: 2},
		{Difficulty: "moderate", Correct: false, Converged: false, ExecOK: false, Turns: 1, FormatViolations: 1},
	}
	s := SummarizeEval(res)
	if s.N != 4 || s.Correct != 2 || s.EX != 0.5 || s.Convergence != 0.5 || s.ExecOK != 0.75 || s.AvgTurns != 2.5 ||
		s.FormatViolationRate != 0.3 || s.RowsWithViolation != 2 || s.RowsWithViolationShare != 0.5 {
		t.Errorf("summary %+v", s)
	}
	if len(s.ByDifficulty) != 3 || s.ByDifficulty[0].Difficulty != "simple" || s.ByDifficulty[0].EX != 0.5 ||
		s.ByDifficulty[1].Difficulty != "moderate" || s.ByDifficulty[1].EX != 0 || s.ByDifficulty[2].Difficulty != "challenging" || s.ByDifficulty[2].EX != 1 {
		t.Errorf("by difficulty %+v", s.ByDifficulty)
	}
	if z := SummarizeEval(nil); z.N != 0 || z.EX != 0 || len(z.ByDifficulty) != 0 {
		t.Errorf("empty summary %+v", z)
	}
}

// TestEvalSummaryJSON: rows_with_violation is the count in both dataset stats and the eval
// summary, the share has its own name, and a summary of the older layout (the share under
// rows_with_violation, no rows_with_violation_share) still reads, the count recovered from N.
func TestEvalSummaryJSON(t *testing.T) {
	s := SummarizeEval([]EvalResult{{Turns: 1, FormatViolations: 1}, {Turns: 1}, {Turns: 1, FormatViolations: 3}, {Turns: 1}, {Turns: 1}})
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m["rows_with_violation"] != 2.0 || m["rows_with_violation_share"] != 0.4 {
		t.Fatalf("rows_with_violation %v, rows_with_violation_share %v; want 2 and 0.4", m["rows_with_violation"], m["rows_with_violation_share"])
	}
	var back EvalSummary
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.RowsWithViolation != 2 || back.RowsWithViolationShare != 0.4 || back.N != 5 || back.AvgTurns != 1 {
		t.Fatalf("round trip %+v", back)
	}

	var old EvalSummary
	if err := json.Unmarshal([]byte(`{"n": 7, "correct": 3, "ex": 0.42857142857142855, "rows_with_violation": 0.42857142857142855, "avg_turns": 2}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.RowsWithViolation != 3 || old.RowsWithViolationShare != 0.42857142857142855 || old.N != 7 || old.Correct != 3 || old.AvgTurns != 2 {
		t.Fatalf("older layout read as %+v", old)
	}
	if err := json.Unmarshal([]byte(`{"n": 2, "rows_with_violation": 0.5, "rows_with_violation_share": 0.25}`), &old); err == nil {
		t.Fatal("a fractional count next to a share was accepted")
	}
}

func TestDatasetThinkCounts(t *testing.T) {
	rows := handRows()
	rows[0].ThinkMode, rows[0].ThinkSources = "auto", []string{"field"}
	rows[1].ThinkSources, rows[1].InlineThinkDropped, rows[1].TruncatedTurns = []string{"field", "inline"}, 1, 1
	rows[3].ThinkSources, rows[3].TruncatedTurns = []string{"none", "none", "inline", "inline", "inline"}, 2
	rows[3].ReasoningTokens, rows[3].ReasoningTokensEstimated = 77, true
	rows[4].ReasoningTokens = 23
	st, err := Dataset(context.Background(), writeDataset(t, rows, nil))
	if err != nil {
		t.Fatal(err)
	}
	o := st.Overall
	want := curate.ThinkCounts{Field: 2, Inline: 4, None: 2, InlineDropped: 1, TruncatedTurns: 3}
	if o.Think != want || o.RowsTruncated != 2 || o.ReasoningTokens != 100 || o.RowsReasoningEstimated != 1 || st.ThinkMode != "auto" {
		t.Errorf("think %+v rows truncated %d reasoning %d/%d mode %q", o.Think, o.RowsTruncated, o.ReasoningTokens, o.RowsReasoningEstimated, st.ThinkMode)
	}
	if b := st.Teachers[1]; b.Name != "beta" || b.Think.Inline != 3 || b.Think.TruncatedTurns != 2 {
		t.Errorf("beta %+v", b.Think)
	}
	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "Think blocks (--think auto) and truncation") {
		t.Errorf("text lacks the think table:\n%s", text.String())
	}
	// No excluded rows: a "(none)" line, not a header over nothing, in text and Markdown.
	if !strings.HasSuffix(text.String(), "\nExcluded rows: 0\n(none)\n") {
		t.Errorf("text's empty excluded table:\n%s", text.String())
	}
	var md bytes.Buffer
	if err := st.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "## Excluded rows: 0\n\n(none)\n") || strings.Contains(md.String(), "| reason |") {
		t.Errorf("markdown's empty excluded table:\n%s", md.String())
	}
}

// TestDatasetOldSchema: a dataset written before gold_error (chainedsql-sft/v4 and earlier)
// reads with no row unjudged, not an error, and its tables say nothing of unjudged rows.
func TestDatasetOldSchema(t *testing.T) {
	type v4Row struct {
		Teacher   string `parquet:"teacher,dict"`
		Dialect   string `parquet:"dialect,dict"`
		Turns     int64  `parquet:"turns"`
		Converged bool   `parquet:"converged"`
		ExecOK    bool   `parquet:"exec_ok"`
		Correct   bool   `parquet:"correct"`
		NumTokens int64  `parquet:"num_tokens"`
		Key       string `parquet:"key"`
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, curate.DataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := parquet.WriteFile(filepath.Join(dir, curate.DataDir, "train-00000-of-00001.parquet"), []v4Row{
		{Teacher: "t", Dialect: "postgres", Turns: 2, Converged: true, ExecOK: true, Correct: true, NumTokens: 10, Key: "k1"},
		{Teacher: "t", Dialect: "postgres", Turns: 3, NumTokens: 20, Key: "k2"},
	}); err != nil {
		t.Fatal(err)
	}
	st, err := Dataset(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Overall.Rows != 2 || st.Overall.Correct != 1 || st.Overall.Unjudged != 0 || st.Teachers[0].Unjudged != 0 || st.Dialects[0].Unjudged != 0 {
		t.Errorf("old dataset: %+v", st.Overall)
	}
	var txt bytes.Buffer
	if err := st.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(txt.String(), "of 2 unjudged") {
		t.Errorf("old dataset's text names unjudged rows:\n%s", txt.String())
	}
}
