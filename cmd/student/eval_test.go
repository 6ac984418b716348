package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/inference/cuda"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/rundir"
)

// birdDir writes a BIRD-layout dataset (dev.json, dev_databases/shop/shop.sqlite) with one
// task per difficulty and returns the dev.json path.
func birdDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeShopDB(t, filepath.Join(dir, "dev_databases", "shop", "shop.sqlite"))
	entries := []map[string]any{
		{"question_id": 0, "db_id": "shop", "question": "How many items?", "evidence": "", "SQL": "SELECT COUNT(*) FROM items", "difficulty": "simple"},
		{"question_id": 1, "db_id": "shop", "question": "Which items cost more than 1?", "evidence": "", "SQL": "SELECT name FROM items WHERE price > 1", "difficulty": "moderate"},
		{"question_id": 2, "db_id": "shop", "question": "Which item has no price?", "evidence": "", "SQL": "SELECT name FROM items WHERE price IS NULL", "difficulty": "challenging"},
	}
	data, _ := json.Marshal(entries)
	path := filepath.Join(dir, "dev.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeShopDB writes the SQLite database the BIRD-layout tests ask about at path: items (id,
// name, price) holding apple 1.5, pear 2.0 and fig without a price.
func writeShopDB(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL);
		INSERT INTO items VALUES (1, 'apple', 1.5), (2, 'pear', 2.0), (3, 'fig', NULL)`); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestEvalScoreCompareOracle(t *testing.T) {
	dev := birdDir(t)
	a, b := filepath.Join(t.TempDir(), "oracle-a"), filepath.Join(t.TempDir(), "oracle-b")
	for _, dir := range []string{a, b} {
		code, out, errs := run(t, "eval", "--policy", "oracle", "--tasks", "bird:"+dev, "--out", dir, "--progress", "off")
		if code != 0 || !strings.Contains(out, "EX 100.00% (simple 100.00, moderate 100.00, challenging 100.00), convergence 100.0%, exec-ok 100.0%, format violations 0.0%, malformed turns 0, 2.00 turns") {
			t.Fatalf("eval: exit %d\n%s\n%s", code, out, errs)
		}
	}
	code, out, errs := run(t, "score", "--predictions", filepath.Join(a, evaluate.PredictFile), "--tasks", "bird:"+dev)
	if code != 0 || !strings.HasPrefix(out, "EX 100.00% (simple 100.00, moderate 100.00, challenging 100.00) (bird style, on sqlite)") {
		t.Fatalf("score: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = run(t, "compare", a, b)
	if code != 0 || !strings.Contains(out, "oracle-a") || !strings.Contains(out, "oracle-b") || !strings.Contains(out, "100.00% (1/1)") {
		t.Fatalf("compare: exit %d\n%s\n%s", code, out, errs)
	}
}

func TestEvalFlagErrors(t *testing.T) {
	dev := birdDir(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "oracle", "--tasks", "bird:" + dev, "--backend", "rocm"}, "want cpu, cuda or cuda-emulated"},
		{[]string{"--policy", "oracle", "--model", "x", "--tasks", "bird:" + dev}, "not both"},
		{[]string{"--tasks", "bird:" + dev}, "--model DIR"},
		{[]string{"--policy", "oracle"}, "--tasks is required"},
		{[]string{"--policy", "oracle", "--tasks", "bird:" + dev, "--samples", "3"}, "--temperature"},
		{[]string{"--policy", "oracle", "--tasks", "bird:" + dev, "--vote"}, "--vote needs"},
		{[]string{"--policy", "nosuch:x", "--tasks", "bird:" + dev}, "unknown prefix"},
		{[]string{"--policy", "oracle", "--tasks", "bird:" + dev, "--dialect", "oracle"}, "want sqlite, postgres or mysql"},
	} {
		code, _, errs := run(t, append([]string{"eval"}, c.args...)...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("eval %v: exit %d, stderr %q, want %q", c.args, code, errs, c.want)
		}
	}
	// A CUDA backend that cannot run here is refused before the run starts.
	for _, b := range []string{cuda.BackendCUDA, cuda.BackendEmulated} {
		if cuda.Check(b) == nil {
			continue
		}
		code, _, errs := run(t, "eval", "--policy", "oracle", "--tasks", "bird:"+dev, "--backend", b)
		if want := "--backend " + b + ": cuda: backend unavailable"; code == 0 || !strings.Contains(errs, want) {
			t.Errorf("--backend %s: exit %d, stderr %q, want %q", b, code, errs, want)
		}
	}
	if code, _, errs := run(t, "score", "--tasks", "bird:"+dev); code == 0 || !strings.Contains(errs, "--predictions") {
		t.Errorf("score without predictions: %d %q", code, errs)
	}
	if code, _, _ := run(t, "compare"); code != 2 {
		t.Errorf("compare without dirs: exit %d", code)
	}
	if code, _, errs := run(t, "compare", t.TempDir()); code != 1 || !strings.Contains(errs, "summary.json") {
		t.Errorf("compare of a dir without summary: %d %q", code, errs)
	}
}

// TestEvalNeedsReader: on a server, student eval runs as the reader distill load made; without
// it, it stops before the first task, naming distill load, and writes no eval dir.
func TestEvalNeedsReader(t *testing.T) {
	shared.SkipServers(t)
	dev := birdDir(t)
	out := filepath.Join(t.TempDir(), "eval")
	reader := "cs_rd_none_" + strconv.Itoa(os.Getpid())
	code, _, errs := run(t, "eval", "--policy", "oracle", "--tasks", "bird:"+dev, "--dialect", "postgres",
		"--pg-dsn", shared.PostgresDSN(), "--reader", reader, "--out", out, "--progress", "off")
	if code != 1 || !strings.Contains(errs, "distill load") || !strings.Contains(errs, reader) {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("eval dir created: %v", err)
	}
}

// TestEvalTinyStudent runs the bundled runtime with random weights end to end: it answers
// nonsense, so the table shows format violations, and all four files are written and parse.
func TestEvalTinyStudent(t *testing.T) {
	model := shared.Path(t, "models/tiny-qwen2-f32/config.json")
	tok := shared.Path(t, "tokenizer/qwen2.5/tokenizer.json")
	dev := birdDir(t)
	dir := filepath.Join(t.TempDir(), "tiny")
	code, out, errs := run(t, "eval", "--model", filepath.Dir(model), "--tokenizer", tok, "--tasks", "bird:"+dev,
		"--out", dir, "--max-turns", "2", "--max-tokens", "12", "--batch", "3", "--progress", "off")
	if code != 0 {
		t.Fatalf("eval: exit %d\n%s\n%s", code, out, errs)
	}
	s, err := evaluate.ReadSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Eval.N != 3 || s.Eval.FormatViolationRate == 0 || s.Tokens.CompletionTokens == 0 || s.TurnTime.ModelMS <= 0 {
		t.Errorf("tiny student summary: %+v tokens %+v turn time %+v", s.Eval, s.Tokens, s.TurnTime)
	}
	if !strings.Contains(out, "format violations") || strings.Contains(out, "format violations 0.0%") {
		t.Errorf("the table does not show the violations:\n%s", out)
	}
	if r, err := evaluate.ReadResults(dir); err != nil || len(r) != 3 {
		t.Errorf("results.jsonl: %d, %v", len(r), err)
	}
	if p, err := evaluate.ReadPredictions(filepath.Join(dir, evaluate.PredictFile)); err != nil || len(p) != 3 {
		t.Errorf("predict_dev.json: %d, %v", len(p), err)
	}
	data, err := os.ReadFile(filepath.Join(dir, evaluate.TrajectoriesFile))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if err != nil || len(lines) != 3 {
		t.Fatalf("trajectories.jsonl: %d lines, %v", len(lines), err)
	}
	for _, l := range lines {
		var tr rundir.Trajectory
		if err := json.Unmarshal([]byte(l), &tr); err != nil || len(tr.Turns) == 0 {
			t.Errorf("trajectory line: %v", err)
		}
	}
}

// TestEvalCacheTokens: --cache-tokens -1 turns prefix reuse off (every prompt computed in full:
// no cached tokens in usage.json) and the results are the same as with it on, where the tasks'
// shared system prompt and each conversation's first turn are reused.
func TestEvalCacheTokens(t *testing.T) {
	model := shared.Path(t, "models/tiny-qwen2-f32/config.json")
	tok := shared.Path(t, "tokenizer/qwen2.5/tokenizer.json")
	dev := birdDir(t)
	eval := func(extra ...string) (string, chat.Usage) {
		dir := filepath.Join(t.TempDir(), "tiny")
		args := append([]string{"eval", "--model", filepath.Dir(model), "--tokenizer", tok, "--tasks", "bird:" + dev,
			"--out", dir, "--max-turns", "2", "--max-tokens", "12", "--batch", "3", "--progress", "off"}, extra...)
		if code, out, errs := run(t, args...); code != 0 {
			t.Fatalf("eval %v: exit %d\n%s\n%s", extra, code, out, errs)
		}
		u, err := rundir.ReadUsage(dir)
		if err != nil || len(u.Teachers) != 1 {
			t.Fatalf("usage.json: %+v, %v", u, err)
		}
		res, err := os.ReadFile(filepath.Join(dir, evaluate.ResultsFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, tu := range u.Teachers {
			return string(res), tu.Usage
		}
		return "", chat.Usage{}
	}
	on, uOn := eval()
	off, uOff := eval("--cache-tokens", "-1")
	if uOff.CachedTokens != 0 || uOn.CachedTokens == 0 || uOn.PromptTokens != uOff.PromptTokens {
		t.Fatalf("usage with reuse %+v, without %+v", uOn, uOff)
	}
	if on != off {
		t.Fatalf("results differ:\n%s\nwithout reuse:\n%s", on, off)
	}
	if code, _, errs := run(t, "eval", "--model", filepath.Dir(model), "--tasks", "bird:"+dev, "--cache-tokens", "x"); code != 2 || !strings.Contains(errs, "cache-tokens") {
		t.Fatalf("--cache-tokens x: exit %d, %s", code, errs)
	}
}

// TestEvalTeacherOverHTTP evaluates a teacher from a config file, served by a real HTTP server
// speaking the OpenAI wire format, and compares it with the oracle on the same tasks.
func TestEvalTeacherOverHTTP(t *testing.T) {
	dev := birdDir(t)
	gold := map[string]string{
		"How many items?":               "SELECT COUNT(*) FROM items",
		"Which items cost more than 1?": "SELECT name FROM items", // wrong: includes the unpriced fig
		"Which item has no price?":      "SELECT name FROM items WHERE price IS NULL",
	}
	srv := oaitest.NewServer(t, func(r oaitest.Request) oaitest.Response {
		for q, s := range gold {
			if strings.Contains(r.FirstUser(), "Question: "+q) {
				return oaitest.Response{Content: "<sql>" + s + "</sql>", ReasoningContent: "thinking"}
			}
		}
		return oaitest.Response{Content: "no idea"}
	})
	cfg := filepath.Join(t.TempDir(), "teachers.yaml")
	yaml := "teachers:\n  mock:\n    base_url: " + srv.BaseURL() + "\n    model: mock-model\n    max_retries: 1\n    api_key_env: \"\"\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	tdir, odir := filepath.Join(t.TempDir(), "mock"), filepath.Join(t.TempDir(), "oracle")
	code, out, errs := run(t, "eval", "--policy", "teacher:mock", "--config", cfg, "--tasks", "bird:"+dev, "--out", tdir, "--progress", "off")
	if code != 0 || !strings.Contains(out, "EX 66.67% (simple 100.00, moderate 0.00, challenging 100.00), convergence 100.0%") {
		t.Fatalf("teacher eval: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs = run(t, "eval", "--policy", "oracle", "--tasks", "bird:"+dev, "--out", odir, "--progress", "off"); code != 0 {
		t.Fatalf("oracle eval: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = run(t, "compare", tdir, odir)
	if code != 0 {
		t.Fatalf("compare: exit %d\n%s", code, errs)
	}
	for _, want := range []string{"mock-model", "66.67%", "100.00%", "0.00% (0/1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("compare output lacks %q:\n%s", want, out)
		}
	}
}
