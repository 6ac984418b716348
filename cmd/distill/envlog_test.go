package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/internal/testbin/readback"
	"github.com/chainedsql/chainedsql/rundir"
)

// envPost posts body to url and decodes the reply into out, failing the test on a status other
// than 200.
func envPost(t *testing.T, url string, body, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
}

// playEnv starts an episode of task on url and plays replies, one step each; it returns whether
// the last step ended it.
func playEnv(t *testing.T, url, task string, replies ...string) bool {
	t.Helper()
	var ep struct {
		EpisodeID string `json:"episode_id"`
	}
	envPost(t, url+"/v1/episodes", map[string]string{"task_id": task, "dialect": "sqlite"}, &ep)
	var st struct {
		Done bool `json:"done"`
	}
	for _, r := range replies {
		envPost(t, url+"/v1/episodes/"+ep.EpisodeID+"/step", map[string]string{"content": r}, &st)
	}
	return st.Done
}

// TestEnvServeLogDir plays episodes on the built `distill env serve --log-dir`, stops it with
// SIGINT, plays more on a second server resuming the dir, and checks that the run dir holds
// exactly the finished episodes (an abandoned one is not logged), that a server of other options
// refuses the dir, and that the built `curate build` and `curate stats` and the viewer read it
// with the counts that were played.
func TestEnvServeLogDir(t *testing.T) {
	root := t.TempDir()
	tasks, err := datasets.LoadTasks("sample", root)
	if err != nil {
		t.Fatal(err)
	}
	tok := shared.Path(t, "tokenizer/qwen2.5")
	bin := testbin.Build(t, ".")
	curateBin := testbin.Build(t, "../curate")
	logDir := filepath.Join(t.TempDir(), "rollouts")
	sql := func(s string) string { return "<think>t</think>\n<sql>" + s + "</sql>" }
	gold := func(task datasets.Task) string { g, _ := task.GoldFor(datasets.SQLite); return g }

	// First server: two correct episodes (gold twice), one wrong that converges (SELECT 1
	// twice), one abandoned after a step.
	srv := startEnv(t, bin, "--tasks", "sample", "--db-root", root, "--log-dir", logDir)
	for i, ep := range [][]string{
		{sql(gold(tasks[0])), sql(gold(tasks[0]))},
		{sql(gold(tasks[1])), sql(gold(tasks[1]))},
		{sql("SELECT 1"), sql("SELECT 1")},
	} {
		if !playEnv(t, srv.url, tasks[i].ID, ep...) {
			t.Fatalf("episode %d is not done", i)
		}
	}
	if playEnv(t, srv.url, tasks[3].ID, sql("SELECT 1")) {
		t.Fatal("an episode of one step is done")
	}
	srv.stop(t)

	// Second server on the same dir appends; one more correct episode, of a task played before.
	srv = startEnv(t, bin, "--tasks", "sample", "--db-root", root, "--log-dir", logDir)
	if !playEnv(t, srv.url, tasks[0].ID, sql(gold(tasks[0])), sql(gold(tasks[0]))) {
		t.Fatal("episode 4 is not done")
	}
	srv.stop(t)

	// Other options: refused, naming the field.
	code, _, stderr := testbin.Run(t, exec.Command(bin, "env", "serve", "--addr", "127.0.0.1:0", "--tasks", "sample", "--db-root", root, "--log-dir", logDir, "--max-turns", "3"))
	if code != 1 || !strings.Contains(stderr, "max_turns") {
		t.Fatalf("a server of --max-turns 3 on the dir: exit %d, stderr %q", code, stderr)
	}

	// The run dir: four trajectories, keys unique, teacher env, the client in model.
	keys := map[string]bool{}
	correct := 0
	err = rundir.ReadRun(logDir, func(tr *rundir.Trajectory) error {
		if keys[tr.Key] {
			return fmt.Errorf("key %s twice", tr.Key)
		}
		keys[tr.Key] = true
		if tr.Teacher != "env" || tr.Model == "" || !strings.HasPrefix(tr.Key, tr.TaskID+"/sqlite/") || len(tr.Turns) != 2 {
			return fmt.Errorf("trajectory %s: teacher %q, model %q, %d turns", tr.Key, tr.Teacher, tr.Model, len(tr.Turns))
		}
		if tr.Correct {
			correct++
		}
		return nil
	})
	if err != nil || len(keys) != 4 || correct != 3 {
		t.Fatalf("run dir: %v; %d trajectories, %d correct; want 4, 3", err, len(keys), correct)
	}

	readback.Check(t, curateBin, tok, logDir, readback.Counts{Rows: 4, Correct: 3, Converged: 4})
}

// tryPost is envPost that returns its failure (a server going down) instead of failing the test.
func tryPost(url string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// TestEnvServeLogDirInterrupt stops the built server with SIGINT while eight clients finish
// episodes as fast as they can: every episode whose last step was answered is in the run dir,
// at most one more per client (a step answered after its line was committed but lost in the
// shutdown), the dir reads without a damaged line, and a new server resumes it.
func TestEnvServeLogDirInterrupt(t *testing.T) {
	root := t.TempDir()
	tasks, err := datasets.LoadTasks("sample", root)
	if err != nil {
		t.Fatal(err)
	}
	bin := testbin.Build(t, ".")
	logDir := filepath.Join(t.TempDir(), "log")
	srv := startEnv(t, bin, "--tasks", "sample", "--db-root", root, "--log-dir", logDir)
	const clients = 8
	answered := make([]int, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				task := tasks[(c+i)%len(tasks)]
				g, _ := task.GoldFor(datasets.SQLite)
				var ep struct {
					EpisodeID string `json:"episode_id"`
				}
				if tryPost(srv.url+"/v1/episodes", map[string]string{"task_id": task.ID}, &ep) != nil {
					return
				}
				var st struct {
					Done bool `json:"done"`
				}
				for range 2 {
					if tryPost(srv.url+"/v1/episodes/"+ep.EpisodeID+"/step", map[string]string{"content": "<sql>" + g + "</sql>"}, &st) != nil {
						return
					}
				}
				if st.Done {
					answered[c]++
				}
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	srv.stop(t)
	wg.Wait()
	total := 0
	for _, n := range answered {
		total += n
	}
	logged := 0
	if err := rundir.ReadRun(logDir, func(*rundir.Trajectory) error { logged++; return nil }); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d episodes answered done, %d logged", total, logged)
	if total == 0 || logged < total || logged > total+clients {
		t.Fatalf("%d episodes answered done, %d logged", total, logged)
	}
	srv = startEnv(t, bin, "--tasks", "sample", "--db-root", root, "--log-dir", logDir)
	srv.stop(t)
}
