package env

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// TestSlotsFreedWhenClientsLeave: on one execution slot, a batch step and a score request of
// slow statements, interleaved with single steps, whose clients go away while they wait for
// the slot, free it: the next single step is answered within a few statements' time, not
// behind the 40 slow statements the gone requests had queued, and their goroutines end.
func TestSlotsFreedWhenClientsLeave(t *testing.T) {
	_, url := testServer(t, Config{Parallel: 1})
	task := tasksOf(t)[0]
	const n = 20
	var steps []map[string]string
	completions := make([]string, n)
	for i := range n {
		steps = append(steps, map[string]string{"episode_id": start(t, url, task.ID, "sqlite").EpisodeID, "content": slowAnswer})
		completions[i] = slowAnswer
	}
	singles := []string{start(t, url, task.ID, "sqlite").EpisodeID, start(t, url, task.ID, "sqlite").EpisodeID}
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	post := func(path string, v any) {
		if resp, err := postCtx(ctx, url+path, v); err == nil {
			resp.Body.Close()
		}
		done <- struct{}{}
	}
	go post("/v1/episodes:batch-step", map[string]any{"steps": steps})
	time.Sleep(100 * time.Millisecond)
	go post("/v1/score", map[string]any{"task_id": task.ID, "completions": completions})
	time.Sleep(100 * time.Millisecond)
	go post("/v1/episodes/"+singles[0]+"/step", map[string]string{"content": slowAnswer})
	time.Sleep(time.Second)
	cancel()
	for range 3 {
		<-done
	}
	began := time.Now()
	octx, ocancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ocancel()
	resp, err := postCtx(octx, url+"/v1/episodes/"+singles[1]+"/step", map[string]string{"content": answer("SELECT 1")})
	if err != nil {
		t.Fatalf("a step after the clients left: %v after %v", err, time.Since(began))
	}
	resp.Body.Close()
	if took := time.Since(began); resp.StatusCode != 200 || took > 5*time.Second {
		t.Fatalf("a step after the clients left: %d after %v", resp.StatusCode, took)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+5 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before+5 {
		t.Errorf("%d goroutines, %d before the requests", g, before)
	}
	t.Logf("the step took %v", time.Since(began).Round(time.Millisecond))
}
