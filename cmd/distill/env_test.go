package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/pgtest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

func TestEnvFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"env"}, "distill env: no command given (want serve or prompts)\nrun 'distill env -h' for usage\n"},
		{[]string{"env", "start"}, "distill env: unknown command \"start\"\nrun 'distill env -h' for usage\n"},
		{[]string{"env", "serve", "--weights", "correct=x"}, "not a finite number"},
		{[]string{"env", "serve", "--weights", "speed=1"}, "unknown weight"},
		{[]string{"env", "serve", "--dialects", "oracle-sql"}, "unknown dialect"},
		{[]string{"env", "serve", "--dialects", "postgres", "--pg-dsn", ""}, "needs --pg-dsn"},
		{[]string{"env", "serve", "--tasks", "nosuch:x"}, `unknown task spec "nosuch:x"`},
		{[]string{"env", "serve", "--ttl", "0s"}, "must be positive"},
		{[]string{"env", "serve", "--limit", "-1"}, "--limit -1 is negative"},
		{[]string{"env", "serve", "--limit", "x"}, "--limit"},
		{[]string{"env", "serve", "--reward-mode", "sum"}, `reward mode "sum": want final or delta`},
		{[]string{"env", "serve", "--format-penalty", "NaN"}, "--format-penalty must be a number within"},
		{[]string{"env", "serve", "--format-penalty", "1e300"}, "--format-penalty must be a number within"},
		{[]string{"env", "serve", "--weights", "correct=1e308,format=1e308"}, "beyond"},
		{[]string{"env", "serve", "--tokenizer", "/nonexistent/tok"}, "load tokenizer /nonexistent/tok"},
		{[]string{"env", "serve", "extra"}, "unexpected argument"},
		{[]string{"env", "serve", "--val-fraction", "-0.5"}, "--val-fraction: validation fraction -0.5: want a number from 0 to 1"},
		{[]string{"env", "prompts"}, "--out FILE is required"},
		{[]string{"env", "prompts", "--out", "p.parquet", "--val-fraction", "NaN"}, "want a number from 0 to 1"},
		{[]string{"env", "prompts", "--out", "p.parquet", "--tokenizer", "/nonexistent/tok"}, "load tokenizer /nonexistent/tok"},
		{[]string{"env", "prompts", "--out", "p.parquet", "--tasks", "nosuch:x"}, `unknown task spec "nosuch:x"`},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q lacks %q", c.args, code, errb.String(), c.want)
		}
	}
}

// envServer is a running `distill env serve`.
type envServer struct {
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
}

var listening = regexp.MustCompile(`on (http://[^ ]+)/v1$`)

// startEnv runs the built binary's env serve on a free port and waits until it listens.
func startEnv(t *testing.T, bin string, args ...string) *envServer {
	t.Helper()
	s := &envServer{done: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{"env", "serve", "--addr", "127.0.0.1:0"}, args...)...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.log.WriteString(line + "\n")
			s.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				urls <- m[1]
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			s.cmd.Process.Kill()
			s.cmd.Wait()
		}
	})
	select {
	case s.url = <-urls:
	case <-s.done:
		s.cmd.Wait()
		t.Fatalf("distill env serve exited before listening:\n%s", s.stderr())
	case <-time.After(2 * time.Minute):
		t.Fatalf("distill env serve did not listen within 2 minutes:\n%s", s.stderr())
	}
	return s
}

func (s *envServer) stderr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// stop sends SIGINT and checks the server shuts down cleanly.
func (s *envServer) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-s.done
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("after SIGINT: %v\n%s", err, s.stderr())
	}
	if !strings.Contains(s.stderr(), "distill env serve: stopped") {
		t.Fatalf("no clean stop:\n%s", s.stderr())
	}
}

// python3 is Debian's interpreter when installed, else the first on PATH.
func python3(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: install Debian's python3 (apt-get install python3) to test the Python client of docs/ENV.md")
	}
	return p
}

// clientReport is what docs/env_client.py prints.
type clientReport struct {
	Tasks struct {
		Total int      `json:"total"`
		First []string `json:"first"`
	} `json:"tasks"`
	Episode struct {
		Roles       []string           `json:"roles"`
		Done        bool               `json:"done"`
		Turn        int                `json:"turn"`
		Rewards     map[string]float64 `json:"rewards"`
		Observation *json.RawMessage   `json:"observation"`
		FinalReward *float64           `json:"final_reward"`
		TurnRewards []float64          `json:"turn_rewards"`
	} `json:"episode"`
	Batch []struct {
		Done        *bool              `json:"done"`
		Rewards     map[string]float64 `json:"rewards"`
		Outcome     string             `json:"outcome"`
		Observation string             `json:"observation"`
		Error       *struct {
			Status int `json:"status"`
		} `json:"error"`
	} `json:"batch"`
	Score   []map[string]float64 `json:"score"`
	Unknown *struct {
		Status  int    `json:"status"`
		Message string `json:"message"`
	} `json:"unknown"`
}

// runClient runs the doc's Python client against url on task with its gold SQL in dialect and
// checks its report: the "Done when" through the built binary.
func runClient(t *testing.T, py, url string, task datasets.Task, d datasets.Dialect) {
	t.Helper()
	gold, ok := task.GoldFor(d)
	if !ok {
		t.Fatalf("task %s has no gold for %s", task.ID, d)
	}
	client := filepath.Join("..", "..", "docs", "env_client.py")
	code, stdout, stderr := testbin.Run(t, exec.Command(py, client, url, task.ID, gold, string(d)))
	var rep clientReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("client exit %d, output not JSON (%v):\n%s\n%s", code, err, stdout, stderr)
	}
	if code != 0 {
		t.Errorf("client exit %d (its own checks failed):\n%s\n%s", code, stdout, stderr)
	}
	all1 := map[string]float64{"format": 1, "exec_ok": 1, "converged": 1, "correct": 1, "malformed_turns": 0, "total": 1}
	e := rep.Episode
	if !e.Done || e.Turn != 2 || fmt.Sprint(e.Rewards) != fmt.Sprint(all1) || e.Observation != nil ||
		strings.Join(e.Roles, ",") != "system,user,assistant,user,assistant" || e.FinalReward == nil || *e.FinalReward != 1 ||
		fmt.Sprint(e.TurnRewards) != "[0 1]" {
		t.Errorf("gold twice: %+v", e)
	}
	if len(rep.Batch) != 3 {
		t.Fatalf("batch: %+v", rep.Batch)
	}
	if b := rep.Batch[0]; b.Done == nil || *b.Done || b.Rewards["format"] != 0 || b.Outcome != "format_violation" || !strings.Contains(b.Observation, "Format error") {
		t.Errorf("malformed reply in a batch: %+v", b)
	}
	if b := rep.Batch[1]; b.Done == nil || *b.Done || b.Rewards["format"] != 1 || b.Rewards["exec_ok"] != 1 || b.Outcome != "ok" {
		t.Errorf("gold once in a batch: %+v", b)
	}
	if b := rep.Batch[2]; b.Error == nil || b.Error.Status != 404 {
		t.Errorf("unknown episode in a batch: %+v", b)
	}
	if len(rep.Score) != 2 || rep.Score[0]["correct"] != 1 || rep.Score[0]["converged"] != 0 || rep.Score[1]["format"] != 0 {
		t.Errorf("score: %+v", rep.Score)
	}
	if rep.Unknown == nil || rep.Unknown.Status != 404 || !strings.Contains(rep.Unknown.Message, "not found") {
		t.Errorf("unknown episode: %+v", rep.Unknown)
	}
	if rep.Tasks.Total < 48 || len(rep.Tasks.First) != 3 {
		t.Errorf("tasks: %+v", rep.Tasks)
	}
}

// TestEnvServePythonClient starts the built `distill env serve` on the bundled sample (SQLite)
// and runs the Python client of docs/ENV.md against it: one full episode (the gold SQL twice:
// done, all four rewards 1), one batch step (a malformed reply: format 0), one score call; then
// SIGINT stops the server cleanly.
func TestEnvServePythonClient(t *testing.T) {
	py := python3(t)
	root := t.TempDir()
	tasks, err := datasets.LoadTasks("sample", root)
	if err != nil {
		t.Fatal(err)
	}
	bin := testbin.Build(t, ".")
	srv := startEnv(t, bin, "--tasks", "sample", "--db-root", root)
	runClient(t, py, srv.url, tasks[3], datasets.SQLite)
	srv.stop(t)
}

// TestEnvServeNoTokenizer: without a tokenizer env serve still serves (texts only) and says at
// start what its responses lack, instead of leaving a trainer to find no token ids.
func TestEnvServeNoTokenizer(t *testing.T) {
	root := t.TempDir()
	if _, err := datasets.LoadTasks("sample", root); err != nil {
		t.Fatal(err)
	}
	bin := testbin.Build(t, ".")
	t.Setenv(cli.TokenizerEnv, "")
	t.Chdir(t.TempDir()) // no ../shared/tokenizer from here
	srv := startEnv(t, bin, "--tasks", "sample", "--db-root", root)
	if !strings.Contains(srv.stderr(), "WARNING: no tokenizer") || !strings.Contains(srv.stderr(), "without token ids") {
		t.Errorf("no warning:\n%s", srv.stderr())
	}
	srv.stop(t)
}

// TestEnvServePythonClientPostgres is the same on PostgreSQL: the sample loaded with `distill
// load` into a fresh database, served beside SQLite, its statements run as the reader.
func TestEnvServePythonClientPostgres(t *testing.T) {
	shared.SkipServers(t)
	py := python3(t)
	dsn, drop := pgtest.FreshDB(t, "cs_env_")
	defer drop()
	root := t.TempDir()
	tasks, err := datasets.LoadTasks("sample", root)
	if err != nil {
		t.Fatal(err)
	}
	reader := testReader(t, datasets.Postgres, shared.PostgresDSN()) // dropped after the database
	bin := testbin.Build(t, ".")
	// Without the reader the server refuses to start, and says what to do.
	if code, _, stderr := testbin.Run(t, exec.Command(bin, "env", "serve", "--tasks", "sample", "--db-root", root, "--dialects", "postgres", "--pg-dsn", dsn, "--reader", reader)); code != 1 || !strings.Contains(stderr, "distill load") {
		t.Errorf("no reader yet: exit %d: %s", code, stderr)
	}
	if code, _, stderr := testbin.Run(t, exec.Command(bin, "load", "--tasks", "sample", "--db-root", root, "--dialect", "postgres", "--dsn", dsn, "--reader", reader)); code != 0 {
		t.Fatalf("distill load: exit %d\n%s", code, stderr)
	}
	srv := startEnv(t, bin, "--tasks", "sample", "--db-root", root, "--dialects", "postgres,sqlite", "--pg-dsn", dsn, "--reader", reader)
	runClient(t, py, srv.url, tasks[9], datasets.Postgres)
	srv.stop(t)
}

// TestEnvServeLimitPostgres: after `distill load --limit N` (the first sample database only),
// env serve on PostgreSQL without --limit refuses to start, naming the first database not
// loaded; with --limit N it serves those N tasks, and env prompts --limit N exports their
// prompts.
func TestEnvServeLimitPostgres(t *testing.T) {
	shared.SkipServers(t)
	tokPath := shared.Path(t, "tokenizer/qwen2.5")
	dsn, drop := pgtest.FreshDB(t, "cs_envlim_")
	defer drop()
	root := t.TempDir()
	tasks, err := datasets.LoadTasks("sample", root)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 10
	next := 0 // the first task of another database than the first task's
	for next < len(tasks) && tasks[next].DBID == tasks[0].DBID {
		next++
	}
	if next < limit || next == len(tasks) {
		t.Fatalf("the first %d sample tasks should share one database, a later one another", limit)
	}
	reader := testReader(t, datasets.Postgres, shared.PostgresDSN()) // dropped after the database
	bin := testbin.Build(t, ".")
	lim := fmt.Sprint(limit)
	pg := []string{"--tasks", "sample", "--db-root", root, "--dialects", "postgres", "--pg-dsn", dsn, "--reader", reader}
	if code, _, stderr := testbin.Run(t, exec.Command(bin, "load", "--tasks", "sample", "--limit", lim, "--db-root", root, "--dialect", "postgres", "--dsn", dsn, "--reader", reader)); code != 0 {
		t.Fatalf("distill load: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := testbin.Run(t, exec.Command(bin, append([]string{"env", "serve", "--addr", "127.0.0.1:0"}, pg...)...)); code != 1 || !strings.Contains(stderr, `"`+tasks[next].DBID+`" does not exist`) {
		t.Errorf("all tasks, %d loaded: exit %d: %s", limit, code, stderr)
	}
	srv := startEnv(t, bin, append([]string{"--limit", lim}, pg...)...)
	if !strings.Contains(srv.stderr(), fmt.Sprintf(": %d tasks (", limit)) {
		t.Errorf("start line: %s", srv.stderr())
	}
	resp, err := http.Get(srv.url + "/v1/tasks?limit=1000")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Total int `json:"total"`
		Tasks []struct {
			ID string `json:"task_id"`
		} `json:"tasks"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || list.Total != limit || len(list.Tasks) != limit || list.Tasks[0].ID != tasks[0].ID || list.Tasks[limit-1].ID != tasks[limit-1].ID {
		t.Errorf("GET /v1/tasks: %v %+v, want the first %d tasks", err, list, limit)
	}
	srv.stop(t)
	out := filepath.Join(t.TempDir(), "prompts.parquet")
	code, _, stderr := testbin.Run(t, exec.Command(bin, append([]string{"env", "prompts", "--limit", lim, "--tokenizer", tokPath, "--out", out}, pg...)...))
	if code != 0 || !strings.Contains(stderr, fmt.Sprintf(": %d prompts (", limit)) {
		t.Errorf("env prompts --limit %d: exit %d\n%s", limit, code, stderr)
	}
}

// TestEnvServeLimitAndCounts: --limit 1 serves the first task only, and the start and stop
// lines count in the singular: "1 task", "1 episode dropped".
func TestEnvServeLimitAndCounts(t *testing.T) {
	root := t.TempDir()
	tasks, err := datasets.LoadTasks("sample", root)
	if err != nil {
		t.Fatal(err)
	}
	srv := startEnv(t, testbin.Build(t, "."), "--tasks", "sample", "--db-root", root, "--limit", "1")
	if !strings.Contains(srv.stderr(), ": 1 task (sample)") {
		t.Errorf("start line: %s", srv.stderr())
	}
	for _, c := range []struct {
		task string
		code int
	}{{tasks[0].ID, 200}, {tasks[1].ID, 404}} {
		resp, err := http.Post(srv.url+"/v1/episodes", "application/json", strings.NewReader(`{"task_id": "`+c.task+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("episode of task %s: %d, want %d", c.task, resp.StatusCode, c.code)
		}
	}
	srv.stop(t)
	if !strings.Contains(srv.stderr(), "stopped; 1 episode dropped (1 in play)") {
		t.Errorf("stop line: %s", srv.stderr())
	}
}
