package evaluate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/sandbox"
)

// slowSQL never finishes: it must be stopped by the timeout.
const slowSQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT MAX(x) FROM c"

// scoreCase is one task of the hand-computed scoring set with its prediction.
type scoreCase struct {
	gold, pred, diff string
	db               string // the prediction's db_id ("" = the task's)
	missing          bool
	correct          bool
	outcome          string
}

var scoreCases = []scoreCase{
	{gold: "SELECT COUNT(*) FROM items", pred: "SELECT COUNT(id) FROM items", diff: "simple", correct: true, outcome: "ok"},
	// Duplicate rows: BIRD compares sets (apple, pear, apple == apple, pear).
	{gold: "SELECT name FROM items WHERE cat = 'fruit'", pred: "SELECT DISTINCT name FROM items WHERE cat = 'fruit'", diff: "simple", correct: true, outcome: "ok"},
	// Column order is kept.
	{gold: "SELECT name, price FROM items WHERE id = 1", pred: "SELECT price, name FROM items WHERE id = 1", diff: "simple", outcome: "ok"},
	{gold: "SELECT MAX(price) FROM items", pred: "SELECT 3.25", diff: "simple", correct: true, outcome: "ok"},
	// Floats compare exactly, as Python's: 0.1 + 0.2 != 0.3.
	{gold: "SELECT 0.3", pred: "SELECT 0.1 + 0.2", diff: "simple", outcome: "ok"},
	// An integer equals the float of the same value (5 == 5.0).
	{gold: "SELECT COUNT(*) FROM items", pred: "SELECT 5.0", diff: "moderate", correct: true, outcome: "ok"},
	// NULL equals NULL.
	{gold: "SELECT price FROM items WHERE id = 4", pred: "SELECT NULL", diff: "moderate", correct: true, outcome: "ok"},
	{gold: "SELECT name FROM items", pred: "SELECT nope FROM items", diff: "moderate", outcome: "error"},
	{gold: "SELECT name FROM items", pred: slowSQL, diff: "moderate", outcome: "timeout"},
	// Text is not a number ('5' != 5).
	{gold: "SELECT COUNT(*) FROM items", pred: "SELECT '5'", diff: "moderate", outcome: "ok"},
	// A DATE column (go-sqlite3 makes it a time) equals the same text from an expression.
	{gold: "SELECT added FROM items WHERE id = 1", pred: "SELECT MIN(added) FROM items", diff: "challenging", correct: true, outcome: "ok"},
	{gold: "SELECT name FROM items", missing: true, diff: "challenging", outcome: "missing"},
	// Two empty results are equal sets.
	{gold: "SELECT name FROM items WHERE 0", pred: "SELECT name FROM items WHERE price > 100", diff: "challenging", correct: true, outcome: "ok"},
	{gold: "SELECT name FROM items", pred: "SELECT name FROM items", db: "school", diff: "challenging", outcome: "db_mismatch"},
	// Unparsable dates stay their text: 'circa 1998' != 'circa 1999' (go-sqlite3 alone reads both as the zero time).
	{gold: "SELECT year FROM events WHERE id = 1", pred: "SELECT year FROM events WHERE id = 2", diff: "challenging", outcome: "ok"},
	{gold: "SELECT year FROM events WHERE id = 1", pred: "SELECT 'circa 1998'", diff: "challenging", correct: true, outcome: "ok"},
	// An integer in a DATETIME column is the integer, not a Unix time.
	{gold: "SELECT at FROM events WHERE id = 2", pred: "SELECT 1577872800", diff: "challenging", correct: true, outcome: "ok"},
	{gold: "SELECT at FROM events WHERE id = 2", pred: "SELECT '2020-01-01 10:00:00'", diff: "challenging", outcome: "ok"},
}

// writeScoreSet writes the cases as a BIRD dataset and a predict_dev.json; it returns both paths.
func writeScoreSet(tb testing.TB, cases []scoreCase) (devPath, predPath string) {
	tb.Helper()
	var entries []birdEntry
	preds := map[string]string{}
	for i, c := range cases {
		entries = append(entries, birdEntry{QuestionID: i, DBID: "shop", Question: "q", SQL: c.gold, Difficulty: c.diff})
		if c.missing {
			continue
		}
		db := c.db
		if db == "" {
			db = "shop"
		}
		preds[strings.TrimSpace(jsonInt(i))] = c.pred + evaluate.BIRDSeparator + db
	}
	devPath = writeBIRD(tb, entries)
	data, _ := json.Marshal(preds)
	predPath = filepath.Join(tb.TempDir(), "predict_dev.json")
	if err := os.WriteFile(predPath, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	return devPath, predPath
}

func jsonInt(i int) string { b, _ := json.Marshal(i); return string(b) }

// scoreSet scores the cases, written as writeScoreSet writes them, on SQLite with timeout.
func scoreSet(t *testing.T, cases []scoreCase, timeout time.Duration) *evaluate.ScoreReport {
	t.Helper()
	dev, predPath := writeScoreSet(t, cases)
	tasks := loadBIRD(t, dev)
	preds, err := evaluate.ReadPredictions(predPath)
	if err != nil {
		t.Fatal(err)
	}
	conn := &sandbox.Connector{}
	defer conn.Close()
	rep, err := evaluate.Score(context.Background(), evaluate.ScoreConfig{Tasks: tasks, Predictions: preds, Opener: conn, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestScoreHandComputed(t *testing.T) {
	start := time.Now()
	rep := scoreSet(t, scoreCases, 300*time.Millisecond)
	if time.Since(start) > 20*time.Second {
		t.Errorf("scoring took %s: the timeout did not stop the slow query", time.Since(start))
	}
	for i, c := range scoreCases {
		it := rep.Items[i]
		if it.Correct != c.correct || it.Outcome != c.outcome {
			t.Errorf("case %d (%s vs %s): correct %v outcome %q (%s), want %v %q", i, c.pred, c.gold, it.Correct, it.Outcome, it.Error, c.correct, c.outcome)
		}
	}
	// By hand: simple 3/5, moderate 2/5, challenging 4/8, total 9/18.
	ex := map[string]float64{"": rep.EX.EX}
	for _, b := range rep.EX.ByDifficulty {
		ex[b.Difficulty] = b.EX
	}
	if !near(ex[""], 0.5) || !near(ex["simple"], 0.6) || !near(ex["moderate"], 0.4) || !near(ex["challenging"], 0.5) {
		t.Errorf("EX %v", ex)
	}
	var out bytes.Buffer
	rep.WriteText(&out)
	if !strings.HasPrefix(out.String(), "EX 50.00% (simple 60.00, moderate 40.00, challenging 50.00) (bird style, on sqlite)") ||
		!strings.Contains(out.String(), "count     5             5             8             18") {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestReadPredictionsErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"x": "SELECT 1\t----- bird -----\tshop"}`), 0o644)
	if _, err := evaluate.ReadPredictions(bad); err == nil || !strings.Contains(err.Error(), `key "x"`) {
		t.Errorf("bad key: %v", err)
	}
	odd := filepath.Join(dir, "odd.json")
	os.WriteFile(odd, []byte(`{"0": 5, "1": "SELECT 1"}`), 0o644)
	p, err := evaluate.ReadPredictions(odd)
	if err != nil || p[0].Malformed == "" || p[1].Malformed == "" {
		t.Errorf("malformed values: %+v, %v", p, err)
	}
	if _, err := evaluate.ReadPredictions(filepath.Join(dir, "none.json")); err == nil {
		t.Error("missing file: no error")
	}
}

// TestScoreWriteJSON: the report file is replaced whole, readable by others (0644, not
// CreateTemp's 0600), and reads back as the report; a failed write leaves the old file.
func TestScoreWriteJSON(t *testing.T) {
	rep := &evaluate.ScoreReport{Style: judge.StyleBIRD, Items: []evaluate.ScoreItem{{Index: 3, ID: "t/3", Outcome: "ok", Correct: true}},
		Outcomes: map[string]int{"ok": 1}}
	path := filepath.Join(t.TempDir(), "items.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("stat: %v, mode %v", err, st.Mode())
	}
	var back evaluate.ScoreReport
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &back); err != nil || len(back.Items) != 1 || back.Items[0].ID != "t/3" {
		t.Fatalf("read back: %v %s", err, data)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("%d files beside the report, want none", len(ents)-1)
	}
	if err := rep.WriteJSON(filepath.Join(path, "sub")); err == nil {
		t.Error("writing under a file: no error")
	}
}

// TestScorePartialGold: tasks without gold SQL for the dialect scored are unjudged, as eval
// judges them, where others have it; where none has, scoring stops before it starts.
func TestScorePartialGold(t *testing.T) {
	cases := scoreCases[:2]
	dev, predPath := writeScoreSet(t, cases)
	tasks := loadBIRD(t, dev)
	preds, err := evaluate.ReadPredictions(predPath)
	if err != nil {
		t.Fatal(err)
	}
	tasks[1].Gold = map[datasets.Dialect]string{datasets.Postgres: cases[1].gold}
	conn := &sandbox.Connector{}
	defer conn.Close()
	rep, err := evaluate.Score(context.Background(), evaluate.ScoreConfig{Tasks: tasks, Predictions: preds, Opener: conn})
	if err != nil {
		t.Fatal(err)
	}
	if it := rep.Items[1]; it.Outcome != judge.OutcomeGoldError || !strings.Contains(it.GoldError, "no gold SQL for sqlite") || rep.EX.Unjudged != 1 || rep.EX.Correct != 1 {
		t.Errorf("item %+v, EX %+v", it, rep.EX)
	}
	tasks[0].Gold = map[datasets.Dialect]string{datasets.Postgres: cases[0].gold}
	if _, err := evaluate.Score(context.Background(), evaluate.ScoreConfig{Tasks: tasks, Predictions: preds, Opener: conn}); err == nil || !strings.Contains(err.Error(), "2 of 2 tasks have no gold SQL for sqlite") {
		t.Errorf("no task with gold: %v", err)
	}
}

// TestScoreErrorsCut: a prediction's and a gold's error are kept in the score report cut to
// textcap.Error, as a run dir keeps them: SQLite echoes a bad JSON path whole, so one statement
// of 60 bytes made an 8 MB error, and the report held it once per such prediction.
func TestScoreErrorsCut(t *testing.T) {
	const huge = "SELECT json_extract('{}', '$' || printf('%.8000000c', 'a'))"
	rep := scoreSet(t, []scoreCase{{gold: "SELECT name FROM items", pred: huge, diff: "simple"}, {gold: huge, pred: "SELECT 1", diff: "simple"}}, 10*time.Second)
	pred, gold := rep.Items[0], rep.Items[1]
	if pred.Outcome != "error" || !strings.Contains(pred.Error, "bad JSON path") || len(pred.Error) > textcap.Error {
		t.Errorf("the prediction's error: %s, %d bytes (%.60q), want at most %d", pred.Outcome, len(pred.Error), pred.Error, textcap.Error)
	}
	if gold.Outcome != judge.OutcomeGoldError || !strings.Contains(gold.GoldError, "bad JSON path") || len(gold.GoldError) > textcap.Error || len(gold.Error) > textcap.Error {
		t.Errorf("the gold's error: %s, %d and %d bytes (%.60q), want at most %d", gold.Outcome, len(gold.GoldError), len(gold.Error), gold.GoldError, textcap.Error)
	}
}
