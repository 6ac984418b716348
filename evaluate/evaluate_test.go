package evaluate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/evaluate/evalrun"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

func runEval(tb testing.TB, ctx context.Context, dir, spec string, tasks []datasets.Task, h *episode.PolicyHandle, mod func(*evaluate.Config)) (*evaluate.Summary, error) {
	tb.Helper()
	conn := &sandbox.Connector{}
	tb.Cleanup(func() { conn.Close() })
	cfg := evaluate.Config{Dir: dir, Tasks: tasks, TaskSpec: spec, Policy: h, Opener: conn, Batch: 4}
	if mod != nil {
		mod(&cfg)
	}
	return evalrun.Run(ctx, cfg)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func exOf(s *evaluate.Summary) map[string]float64 {
	m := map[string]float64{"": s.Eval.EX}
	for _, b := range s.Eval.ByDifficulty {
		m[b.Difficulty] = b.EX
	}
	return m
}

// oracleBIRD evaluates the oracle on entries written in BIRD's layout, returning the tasks,
// the eval dir and its summary.
func oracleBIRD(t *testing.T, entries []birdEntry) ([]datasets.Task, string, *evaluate.Summary) {
	t.Helper()
	path := writeBIRD(t, entries)
	tasks := loadBIRD(t, path)
	dir := filepath.Join(t.TempDir(), "eval")
	h, err := episode.ResolvePolicy("oracle", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := runEval(t, context.Background(), dir, "bird:"+path, tasks, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tasks, dir, s
}

// scoreDir scores the eval dir's predict_dev.json against tasks (Score, BIRD's style unless
// the tasks are Spider's).
func scoreDir(t *testing.T, dir string, tasks []datasets.Task) *evaluate.ScoreReport {
	t.Helper()
	preds, err := evaluate.ReadPredictions(filepath.Join(dir, evaluate.PredictFile))
	if err != nil {
		t.Fatal(err)
	}
	conn := &sandbox.Connector{}
	defer conn.Close()
	rep, err := evaluate.Score(context.Background(), evaluate.ScoreConfig{Tasks: tasks, Predictions: preds, Opener: conn})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestOracleBIRD(t *testing.T) {
	tasks, dir, s := oracleBIRD(t, evalEntries)
	if !s.Complete || s.Eval.N != 10 || s.Eval.EX != 1 || s.Eval.Convergence != 1 || s.Eval.ExecOK != 1 || s.Eval.AvgTurns != 2 || s.Eval.FormatViolationRate != 0 {
		t.Fatalf("oracle summary: %+v", s.Eval)
	}
	if s.Counts["simple"] != 5 || s.Counts["moderate"] != 3 || s.Counts["challenging"] != 2 || s.Loaded != 10 {
		t.Fatalf("counts %v loaded %d", s.Counts, s.Loaded)
	}
	want := map[string]int{"simple": 5, "moderate": 3, "challenging": 2}
	for _, b := range s.Eval.ByDifficulty {
		if b.N != want[b.Difficulty] || b.EX != 1 {
			t.Errorf("bucket %+v", b)
		}
	}
	if s.Temperature != 0 {
		t.Errorf("temperature %g, want greedy 0", s.Temperature)
	}

	// All four files are there and parse.
	var text bytes.Buffer
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "EX 100.00% (simple 100.00, moderate 100.00, challenging 100.00), convergence 100.0%, exec-ok 100.0%, format violations 0.0%, malformed turns 0, 2.00 turns") ||
		!strings.Contains(text.String(), "tasks 10 (simple 5, moderate 3, challenging 2)") {
		t.Errorf("table:\n%s", text.String())
	}
	back, err := evaluate.ReadSummary(dir)
	if err != nil || back.Eval.EX != 1 || back.Policy != "oracle" {
		t.Fatalf("summary.json: %+v, %v", back, err)
	}
	res, err := evaluate.ReadResults(dir)
	if err != nil || len(res) != 10 {
		t.Fatalf("results.jsonl: %d, %v", len(res), err)
	}
	for i, r := range res {
		e := evalEntries[i]
		if r.Index != i || r.DBID != e.DBID || r.Difficulty != e.Difficulty || r.SQL != e.SQL || r.Outcome != "ok" || !r.Correct || r.Turns != 2 || !r.Converged || !r.ExecOK {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	preds, err := evaluate.ReadPredictions(filepath.Join(dir, evaluate.PredictFile))
	if err != nil || len(preds) != 10 {
		t.Fatalf("predict_dev.json: %d, %v", len(preds), err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, evaluate.PredictFile))
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil || m["3"] != "SELECT name FROM students WHERE class = 'A'\t----- bird -----\tschool" {
		t.Fatalf("predict_dev.json entry 3: %q, %v", m["3"], err)
	}
	trs := readJSONL(t, filepath.Join(dir, evaluate.TrajectoriesFile))
	if len(trs) != 10 {
		t.Fatalf("trajectories.jsonl: %d lines", len(trs))
	}

	// The oracle's predictions score 100% under the official rules.
	if rep := scoreDir(t, dir, tasks); rep.EX.EX != 1 || rep.Style != judge.StyleBIRD {
		t.Fatalf("score of the oracle's predictions: %+v", rep)
	}
}

// wrongReplies are the scripted policy's known mistakes on evalEntries.
var wrongReplies = map[string][]string{
	// simple 1: converges on a wrong answer.
	"Which items are fruit?": {sqlReply("SELECT name FROM items")},
	// simple 3: a format violation, then the right answer twice (3 turns, correct).
	"Who is in class A?": {"I am not sure.", sqlReply("SELECT name FROM students WHERE class = 'A'")},
	// moderate 6: the same failing SQL twice: the same SQL, but it never ran.
	"What is the best grade of each class?": {sqlReply("SELECT class, MAX(nope) FROM students GROUP BY class")},
	// challenging 8: a different wrong query every turn, never converging (5 turns).
	"Who is above the average grade?": {
		sqlReply("SELECT name FROM students WHERE grade > 60"), sqlReply("SELECT name FROM students WHERE grade > 61"),
		sqlReply("SELECT name FROM students WHERE grade > 62"), sqlReply("SELECT name FROM students WHERE grade > 63"),
		sqlReply("SELECT name FROM students WHERE grade > 64"),
	},
}

func TestScriptedWrongAnswers(t *testing.T) {
	path := writeBIRD(t, evalEntries)
	tasks := loadBIRD(t, path)
	dir := t.TempDir()
	s, err := runEval(t, context.Background(), dir, "bird:"+path, tasks, handle("scripted", newScripted(evalEntries, wrongReplies)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ex := exOf(s)
	if !near(ex[""], 0.7) || !near(ex["simple"], 0.8) || !near(ex["moderate"], 2.0/3) || !near(ex["challenging"], 0.5) {
		t.Errorf("EX %v, want 0.7 (simple 0.8, moderate 2/3, challenging 0.5)", ex)
	}
	// 24 turns: 7 × 2, 3 (violation first), 2 (failing SQL twice), 5 (never converging).
	if !near(s.Eval.Convergence, 0.8) || !near(s.Eval.ExecOK, 0.9) || !near(s.Eval.AvgTurns, 2.4) || !near(s.Eval.FormatViolationRate, 1.0/24) {
		t.Errorf("summary %+v", s.Eval)
	}
	want := "EX 70.00% (simple 80.00, moderate 66.67, challenging 50.00), convergence 80.0%, exec-ok 90.0%, format violations 4.2%, malformed turns 1, 2.40 turns"
	if got := s.Eval.Headline(); got != want {
		t.Errorf("headline\n got %q\nwant %q", got, want)
	}
	if s.Tokens.Total() != 24*15 || s.Throughput.Trajectories != 10 || s.Throughput.TasksPerSec <= 0 || s.TurnTime.Turns != 24 {
		t.Errorf("tokens %+v throughput %+v turn time %+v", s.Tokens, s.Throughput, s.TurnTime)
	}
	// Cache hits are counted apart: 14 later turns of 6 cached prompt tokens each; the computed
	// rate leaves them out, tokens_per_sec keeps its meaning (every token).
	if th := s.Throughput; th.Tokens != 24*15 || th.CachedTokens != 14*6 || th.Seconds <= 0 ||
		!near(th.TokensPerSec, float64(24*15)/th.Seconds) || !near(th.ComputedTokensPerSec, float64(24*15-14*6)/th.Seconds) {
		t.Errorf("throughput %+v: want 360 tokens, 84 cached, rates over seconds", th)
	}
	var text strings.Builder
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), " computed tokens/s, 84 prompt tokens from cache (10 trajectories in ") {
		t.Errorf("summary text has no computed rate and cache-hit count:\n%s", text.String())
	}
	res, err := evaluate.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	r6 := res[6]
	if r6.Outcome != "error" || r6.Converged || r6.ExecOK || r6.Correct || r6.Turns != 2 || !strings.Contains(r6.Error, "nope") {
		t.Errorf("failing SQL task: %+v", r6)
	}
	if r3 := res[3]; r3.FormatViolations != 1 || r3.Turns != 3 || !r3.Correct {
		t.Errorf("violation task: %+v", r3)
	}
	if r8 := res[8]; r8.Turns != 5 || r8.Converged || r8.SQL != "SELECT name FROM students WHERE grade > 64" {
		t.Errorf("non-converging task: %+v", r8)
	}
}

func TestResumeAfterCancel(t *testing.T) {
	path := writeBIRD(t, evalEntries)
	tasks := loadBIRD(t, path)

	// Reference: one uninterrupted run.
	ref := t.TempDir()
	if _, err := runEval(t, context.Background(), ref, "bird:"+path, tasks, handle("scripted", newScripted(evalEntries, wrongReplies)), nil); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	p := newScripted(evalEntries, wrongReplies)
	p.before = func(n int) {
		if n == 6 {
			cancel()
		}
	}
	s, err := runEval(t, ctx, dir, "bird:"+path, tasks, handle("scripted", p), func(c *evaluate.Config) { c.Batch = 1 })
	if !errors.Is(err, evalrun.ErrInterrupted) {
		t.Fatalf("cancelled run: %v, want ErrInterrupted", err)
	}
	if s.Complete || s.Pending == 0 || s.Eval.N == 0 || s.Eval.N >= 10 {
		t.Fatalf("cancelled run summary: complete %v pending %d results %d", s.Complete, s.Pending, s.Eval.N)
	}
	firstN := s.Eval.N

	// A torn line at the end of a shard (a crash mid-write) is cut on resume.
	shards, err := rundir.ShardFiles(dir)
	if err != nil || len(shards) != 1 {
		t.Fatalf("shards %v, %v", shards, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, rundir.ShardsDir, shards[0]), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"protocol":"chained-sql/v1","key":"tor`)
	f.Close()

	p2 := newScripted(evalEntries, wrongReplies)
	s2, err := runEval(t, context.Background(), dir, "bird:"+path, tasks, handle("scripted", p2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s2.Repairs) == 0 {
		t.Error("resume did not report cutting the torn line")
	}
	if !s2.Complete || !reflect.DeepEqual(s2.Eval, mustSummary(t, ref).Eval) {
		t.Errorf("resumed summary %+v\nwant %+v", s2.Eval, mustSummary(t, ref).Eval)
	}
	if s2.Throughput.Trajectories != 10-firstN {
		t.Errorf("resume did %d trajectories, want %d", s2.Throughput.Trajectories, 10-firstN)
	}
	for _, name := range []string{evaluate.ResultsFile, evaluate.PredictFile} {
		a, _ := os.ReadFile(filepath.Join(ref, name))
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs after resume:\n%s\nwant\n%s", name, b, a)
		}
	}
	if n := len(readJSONL(t, filepath.Join(dir, evaluate.TrajectoriesFile))); n != 10 {
		t.Errorf("trajectories.jsonl has %d lines after resume, want 10", n)
	}

	// A third run has nothing to do and keeps the throughput of the run that did the work.
	s3, err := runEval(t, context.Background(), dir, "bird:"+path, tasks, handle("scripted", newScripted(evalEntries, wrongReplies)), nil)
	if err != nil || s3.Throughput != s2.Throughput || !reflect.DeepEqual(s3.Eval, s2.Eval) {
		t.Errorf("idle rerun: %+v, %v", s3, err)
	}
}

func mustSummary(tb testing.TB, dir string) *evaluate.Summary {
	tb.Helper()
	s, err := evaluate.ReadSummary(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestRunRefusesOtherRunDir(t *testing.T) {
	path := writeBIRD(t, evalEntries)
	tasks := loadBIRD(t, path)
	dir := t.TempDir()
	if _, err := runEval(t, context.Background(), dir, "bird:"+path, tasks, handle("scripted", newScripted(evalEntries, nil)), nil); err != nil {
		t.Fatal(err)
	}
	_, err := runEval(t, context.Background(), dir, "bird:"+path, tasks[:5], handle("scripted", newScripted(evalEntries, nil)), nil)
	if err == nil || !strings.Contains(err.Error(), "different run") {
		t.Fatalf("eval over another task set in the same dir: %v", err)
	}
}

// failing errors on one question: the episode fails terminally and scores 0.
type failing struct{ *scripted }

func (f failing) Chat(ctx context.Context, msgs []chat.Message, o chat.Options) (chat.Reply, error) {
	if question(msgs) == evalEntries[4].Question {
		return chat.Reply{}, errors.New("endpoint said no")
	}
	return f.scripted.Chat(ctx, msgs, o)
}

func TestFailedEpisodeScoresZero(t *testing.T) {
	path := writeBIRD(t, evalEntries)
	tasks := loadBIRD(t, path)
	dir := t.TempDir()
	s, err := runEval(t, context.Background(), dir, "bird:"+path, tasks, handle("failing", failing{newScripted(evalEntries, nil)}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Complete || s.Failed != 1 || s.Eval.N != 10 || !near(s.Eval.EX, 0.9) || !near(exOf(s)["simple"], 0.8) {
		t.Fatalf("summary: complete %v failed %d n %d EX %v", s.Complete, s.Failed, s.Eval.N, exOf(s))
	}
	res, err := evaluate.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[4]; r.Outcome != evaluate.OutcomeFailed || r.Correct || !strings.Contains(r.Error, "endpoint said no") || r.Turns != 0 {
		t.Errorf("failed task: %+v", r)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, evaluate.PredictFile))
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil || m["4"] != evaluate.BIRDSeparator+"shop" {
		t.Errorf("failed task's prediction: %q, %v", m["4"], err)
	}
}

// TestUnjudgedGold: a task whose gold SQL does not run is scored wrong (as BIRD's evaluation
// does) and counted as unjudged, in the summary, its headline, the results and Score's report,
// so that a low EX from gold SQL that fails on the dialect is not read as the policy's.
func TestUnjudgedGold(t *testing.T) {
	entries := append([]birdEntry(nil), evalEntries[:4]...)
	entries[2].SQL = "SELECT COUNT(*) FROM no_such_table"
	tasks, dir, s := oracleBIRD(t, entries)
	if s.Eval.N != 4 || s.Eval.Correct != 3 || s.Eval.Unjudged != 1 {
		t.Fatalf("summary: %+v", s.Eval)
	}
	if h := s.Eval.Headline(); !strings.HasSuffix(h, "; 1 of 4 unjudged: their gold SQL failed") {
		t.Errorf("headline %q", h)
	}
	back, err := evaluate.ReadSummary(dir)
	if err != nil || back.Eval.Unjudged != 1 {
		t.Fatalf("summary.json: %+v, %v", back, err)
	}
	if m, err := evaluate.Merge(filepath.Join(t.TempDir(), "merged"), []string{dir}); err != nil || m.Eval.Unjudged != 1 {
		t.Fatalf("merged: %+v, %v", m, err)
	}
	var cmp strings.Builder
	if err := evaluate.Compare(&cmp, []string{dir}); err != nil || !regexp.MustCompile(`(?m)^unjudged \(gold failed\)\s+1$`).MatchString(cmp.String()) {
		t.Errorf("compare (%v):\n%s", err, cmp.String())
	}
	res, err := evaluate.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if (r.GoldError != "") != (r.Index == 2) || (r.Index == 2 && r.Correct) {
			t.Errorf("result %d: correct %v, gold error %q", r.Index, r.Correct, r.GoldError)
		}
	}
	rep := scoreDir(t, dir, tasks)
	if rep.EX.Correct != 3 || rep.EX.Unjudged != 1 || rep.Items[2].GoldError == "" {
		t.Fatalf("score: %+v", rep)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "unjudged: 1 of 4, their gold SQL failed") {
		t.Errorf("score text:\n%s%v", text.String(), err)
	}
}

// TestPredictionsHoldSeparator: a final SQL whose text holds BIRD's separator (in a string
// literal, in a comment) is read back from predict_dev.json whole and with its own db_id, so
// student score gives the eval's EX. Read at the first separator, both scored 0 as naming
// another database.
func TestPredictionsHoldSeparator(t *testing.T) {
	path := writeBIRD(t, evalEntries)
	tasks := loadBIRD(t, path)
	dir := t.TempDir()
	sep := strings.ReplaceAll(evaluate.BIRDSeparator, "\t", `\t`)
	replies := map[string][]string{
		"How many items are there?":    {sqlReply("SELECT COUNT(*) FROM items WHERE '" + evaluate.BIRDSeparator + "' <> ''")},
		"How many students are there?": {sqlReply("SELECT COUNT(*) FROM students\n-- " + evaluate.BIRDSeparator + "shop")},
	}
	s, err := runEval(t, context.Background(), dir, "bird:"+path, tasks, handle("scripted", newScripted(evalEntries, replies)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Eval.EX != 1 {
		t.Fatalf("eval EX %v, want 1", s.Eval.EX)
	}
	preds, err := evaluate.ReadPredictions(filepath.Join(dir, evaluate.PredictFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		p := preds[i]
		if want := evalEntries[i].DBID; p.DBID != want || !strings.Contains(p.SQL, evaluate.BIRDSeparator) || p.Malformed != "" {
			t.Errorf("prediction %d read as SQL %q, db_id %q (malformed %q); want the SQL with %s and db_id %q", i, p.SQL, p.DBID, p.Malformed, sep, want)
		}
	}
	if rep := scoreDir(t, dir, tasks); rep.EX.EX != s.Eval.EX {
		t.Errorf("student score EX %v (outcomes %v), the eval's %v", rep.EX.EX, rep.Outcomes, s.Eval.EX)
	}
}
