package env

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// slowAnswer is a reply whose statement runs about a second on SQLite.
var slowAnswer = answer("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 3000000) SELECT count(*) FROM c")

// postCtx posts a JSON value to url within ctx.
func postCtx(ctx context.Context, url string, v any) (*http.Response, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// notBehind posts big (n slow statements) to url+path on a server of 2 slots and, while it
// runs, checks that it made few goroutines and that other, a request of one quick statement to
// url+otherPath, is answered 200 within 30 s rather than behind all of big.
func notBehind(t *testing.T, n int, url, path string, big any, otherPath string, other any) {
	t.Helper()
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := postCtx(ctx, url+path, big); err == nil {
			resp.Body.Close()
		}
	}()
	defer func() { cancel(); <-done }()
	time.Sleep(time.Second) // big is in, its first statements running
	if grew := runtime.NumGoroutine() - before; grew > 50 {
		t.Errorf("%s of %d slow statements on 2 slots: %d goroutines more", path, n, grew)
	}
	octx, ocancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ocancel()
	began := time.Now()
	resp, err := postCtx(octx, url+otherPath, other)
	if err != nil {
		t.Fatalf("%s behind %s of %d slow statements: %v after %v", otherPath, path, n, err, time.Since(began))
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d", otherPath, resp.StatusCode)
	}
	t.Logf("%s behind %s: %v", otherPath, path, time.Since(began).Round(time.Millisecond))
}

// TestScoreWaitsOneSlotAtATime: a score request of many slow completions starts an episode (and a
// goroutine) only for a completion that has an execution slot, and waits for one slot at a time,
// so another client's score request waits for a slot, not behind all of its completions. Without
// it, 300 completions made 300 goroutines and episodes at once (200 such requests took the
// binary's RSS to 918 MB), and the other request waited behind them all.
func TestScoreWaitsOneSlotAtATime(t *testing.T) {
	_, url := testServer(t, Config{Parallel: 2})
	task := tasksOf(t)[0]
	const n = 300
	completions := make([]string, n)
	for i := range completions {
		completions[i] = slowAnswer
	}
	notBehind(t, n, url, "/v1/score", map[string]any{"task_id": task.ID, "completions": completions},
		"/v1/score", map[string]any{"task_id": task.ID, "completions": []string{answer("SELECT 1")}})
}

// TestBatchStepWaitsOneSlotAtATime: as for score, a batch step of many slow steps starts a
// step's goroutine only once it has an execution slot, so a single step of another episode
// waits for a slot, not behind the whole batch (without it, behind 300 steps on 2 slots).
func TestBatchStepWaitsOneSlotAtATime(t *testing.T) {
	_, url := testServer(t, Config{Parallel: 2})
	task := tasksOf(t)[0]
	const n = 300
	var steps []map[string]string
	for range n {
		steps = append(steps, map[string]string{"episode_id": start(t, url, task.ID, "sqlite").EpisodeID, "content": slowAnswer})
	}
	other := start(t, url, task.ID, "sqlite").EpisodeID
	notBehind(t, n, url, "/v1/episodes:batch-step", map[string]any{"steps": steps},
		"/v1/episodes/"+other+"/step", map[string]string{"content": answer("SELECT 1")})
}
