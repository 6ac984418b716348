package env

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// TestTrainerAdapters: the trainer adapters in docs/trainers compile (python3 -m py_compile,
// which needs none of the trainers installed), call only methods the clients of docs/ define,
// and the clients call only routes the server registers.
func TestTrainerAdapters(t *testing.T) {
	adapters, err := filepath.Glob(filepath.Join("..", "docs", "trainers", "*.py"))
	if err != nil || len(adapters) < 3 {
		t.Fatalf("adapters %v: %v", adapters, err)
	}
	clients := ""
	for _, name := range []string{"env_client.py", "env_client_async.py"} {
		b, err := os.ReadFile(filepath.Join("..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		clients += string(b)
	}
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^    (?:async )?def (\w+)\(`).FindAllStringSubmatch(clients, -1) {
		defined[m[1]] = true
	}
	calls := regexp.MustCompile(`\b(?:self\.client|self\.env|env)\.(\w+)\(`)
	for _, a := range adapters {
		src, err := os.ReadFile(a)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range calls.FindAllStringSubmatch(string(src), -1) {
			n++
			if !defined[m[1]] {
				t.Errorf("%s calls the client's %s, which docs/env_client*.py do not define", a, m[1])
			}
		}
		if n == 0 {
			t.Errorf("%s calls no client method", a)
		}
	}
	// The routes: each _call("METHOD", "/v1/...") of the client against the server's patterns.
	server, err := os.ReadFile("http.go")
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]bool{}
	for _, m := range regexp.MustCompile(`HandleFunc\("([A-Z]+ /v1/[^"]*)"`).FindAllStringSubmatch(string(server), -1) {
		routes[m[1]] = true
	}
	used := regexp.MustCompile(`_call\("([A-Z]+)", f?"(/v1/[^"?]*)`).FindAllStringSubmatch(clients, -1)
	if len(used) < 6 {
		t.Fatalf("found %d client calls", len(used))
	}
	param := regexp.MustCompile(`\{\w+\}`)
	for _, m := range used {
		if r := m[1] + " " + param.ReplaceAllString(m[2], "{id}"); !routes[r] {
			t.Errorf("the client calls %s, which the server does not route (%v)", r, routes)
		}
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to compile the adapters")
	}
	for _, a := range adapters {
		cmd := exec.Command(py, "-c", "import sys, py_compile; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)", a, filepath.Join(t.TempDir(), "x.pyc"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s does not compile: %v\n%s", a, err, strings.TrimSpace(string(out)))
		}
	}
}

// TestTRLAdapterProcesses plays the TRL adapter on simulated trainer processes whose episodes end
// at different turns, against a fake of TRL's vLLM server-mode generate that slices the gathered
// completions by each process's own list length (testdata/trl_processes.py): every episode must
// get only its own completions, and every process must make the same number of calls.
func TestTRLAdapterProcesses(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to run the adapter")
	}
	cmd := exec.Command(py, "-B", filepath.Join("testdata", "trl_processes.py"), filepath.Join("..", "docs", "trainers"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok ") {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestTRLAdapterEpisodes runs docs/trainers/trl_rollout_func.py's PromptIndex and EnvRollout
// against this server (the sample on SQLite and, with servers, PostgreSQL; the student's
// tokenizer; two turns) with fakes of TRL's trainer, vLLM and the tokenizer
// (testdata/trl_adapter.py): every prompt of the two-dialect export starts its own task and
// dialect (the user message is the same in both), and each completion ends with TRL's eos
// exactly when its last reply stopped, with its ids, log-probs and mask aligned; played again
// with generation_kwargs' stop string "</sql>" and a stop_token_ids id, the replies vLLM ended
// on them (no stop id for the string) go as "stop" with the text of their ids, cut after the
// token completing the stop string when vLLM's ids ran past it, and the completion still ends
// on eos (before, as "length", and truncated).
func TestTRLAdapterEpisodes(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to run the adapter")
	}
	tok, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5"))
	if err != nil {
		t.Fatal(err)
	}
	tasks := tasksOf(t)[:3]
	cfg := Config{Tasks: tasks, Tokenizer: tok, Episode: episode.EpisodeOptions{MaxTurns: 2}, Dialects: []datasets.Dialect{datasets.SQLite}}
	if os.Getenv("CHAINEDSQL_NO_SERVERS") == "" {
		cfg.Opener = freshPostgres(t, tasks)
		cfg.Dialects = append(cfg.Dialects, datasets.Postgres)
	} else {
		t.Log("CHAINEDSQL_NO_SERVERS is set: one dialect (SQLite), so the prompts are not checked across dialects")
	}
	s, url := testServer(t, cfg)
	type row struct {
		PromptRow
		Gold string `json:"gold"`
		Plan string `json:"plan"`
	}
	var rows []row
	plans := []string{"stop", "cut", "endoftext", "special"}
	err = s.Prompts(context.Background(), func(batch []PromptRow) error {
		for _, r := range batch {
			task := s.tasks[r.TaskID]
			rows = append(rows, row{PromptRow: r, Gold: gold(t, *task, datasets.Dialect(r.Dialect)), Plan: plans[len(rows)%len(plans)]})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(tasks)*len(cfg.Dialects) {
		t.Fatalf("%d prompt rows", len(rows))
	}
	if len(cfg.Dialects) == 2 && rows[0].Prompt[1] != rows[1].Prompt[1] {
		t.Fatalf("the user message differs across dialects; the test no longer shows the index's case:\n%+v\n%+v", rows[0].Prompt[1], rows[1].Prompt[1])
	}
	casePath := filepath.Join(t.TempDir(), "case.json")
	b, err := json.Marshal(map[string]any{"url": url, "rows": rows, "max_turns": cfg.Episode.MaxTurns})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(casePath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "-B", filepath.Join("testdata", "trl_adapter.py"), filepath.Join("..", "docs", "trainers"), casePath).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok ") {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
	if _, live := s.Episodes(); live != 0 {
		t.Errorf("%d episodes left in play", live)
	}
}
