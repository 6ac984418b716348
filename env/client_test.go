package env

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// pythonClient runs a Python file of testdata or docs with args and returns its output; it
// skips without python3.
func pythonClient(t *testing.T, script string, args ...string) (string, error) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to run the Python clients of docs/")
	}
	// -B: importing the clients writes no __pycache__ into docs/.
	out, err := exec.Command(py, append([]string{"-B", script}, args...)...).CombinedOutput()
	return string(out), err
}

// TestPythonClientErrors runs testdata/client_errors.py: behind the guard, with --max-body
// 1 MiB and --max-episodes-per-client 2, a 16 MiB step is EnvError(413) for both clients (not a
// reset connection), a start over the cap is EnvError(429) with retry_after, a client allowed to
// wait gets its episode once another is deleted, a step whose database is busy (its first two
// tries of a statement holding busy_marker: sandbox.ErrBusy) is sent again until it runs or
// the client's budget is spent (EnvError(503) with retry_after), and nothing is left in play.
func TestPythonClientErrors(t *testing.T) {
	conn := &sandbox.Connector{}
	t.Cleanup(func() { conn.Close() })
	o := &busyOpener{conn: conn, marker: "busy_marker", firstTries: 2}
	s, url := guarded(t, Config{MaxBody: 1 << 20, MaxEpisodesPerClient: 2, TTL: time.Hour, Opener: o})
	out, err := pythonClient(t, filepath.Join("testdata", "client_errors.py"), filepath.Join("..", "docs"), url, tasksOf(t)[0].ID)
	if err != nil || !strings.HasPrefix(out, "ok") {
		t.Fatalf("%v\n%s", err, out)
	}
	if _, live := s.Episodes(); live != 0 {
		t.Errorf("%d episodes left in play", live)
	}
}

// TestPythonClientSelfChecks runs the self-checks of docs/env_client.py and
// docs/env_client_async.py against the env behind its guard: they pass and leave no episode in
// play (a client at --max-episodes-per-client would get 429 on its next run).
func TestPythonClientSelfChecks(t *testing.T) {
	s, url := guarded(t, Config{})
	task := tasksOf(t)[3]
	g := gold(t, task, datasets.SQLite)
	for _, name := range []string{"env_client.py", "env_client_async.py"} {
		out, err := pythonClient(t, filepath.Join("..", "docs", name), url, task.ID, g)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if _, live := s.Episodes(); live != 0 {
			t.Errorf("%s left %d episodes in play", name, live)
		}
	}
}
