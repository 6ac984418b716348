package env

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
)

// maxReply is a reply as large as the finding's: a 70 KB think block and a 65 KB statement in
// the content, 70 KB of reasoning beside; k makes the statement its own.
func maxReply(k int) map[string]string {
	sql := fmt.Sprintf("SELECT %d -- ", k) + strings.Repeat("x", 64980)
	return map[string]string{"content": "<think>" + strings.Repeat("t", 70000) + "</think>\n<sql>" + sql + "</sql>", "reasoning": strings.Repeat("r", 70000)}
}

// TestEpisodeSize: what the store counts for an episode (episodeSize) is what it holds in the
// heap, within a margin: never much less (the bound would not hold), and not much more where
// the texts are most of it; each step adds at most what was reserved for it (stepGrowth).
func TestEpisodeSize(t *testing.T) {
	tasks := tasksOf(t)[:1]
	for _, shape := range []struct {
		name  string
		turns int
		reply func(k int) map[string]string
		over  float64 // the most counted / heap
	}{
		{"started", 0, nil, 3},
		{"five small turns", 5, func(k int) map[string]string {
			return map[string]string{"content": answer(fmt.Sprintf("SELECT %d FROM book", k))}
		}, 2}, // small records: the safe side, counted above their 5.4 KB of live objects
		{"five maximal turns", 5, maxReply, 1.5},
	} {
		n := 300 // enough that the spans' fill moves the heap in use by little an episode
		if shape.name == "five maximal turns" {
			n = 30
		}
		// What earlier tests left running (a shared gold outlives its step) may allocate or free
		// while this measures: a shape passes if one of three fresh servers measures within the
		// margin; a wrong count fails all three.
		for attempt := 1; ; attempt++ {
			s, url := testServer(t, Config{Tasks: tasks})
			start(t, url, tasks[0].ID, "") // the shared schema prompt, before measuring
			before := heapInUse()
			for i := range n {
				ep := start(t, url, tasks[0].ID, "")
				for k := range shape.turns {
					s.store.mu.Lock()
					e := s.store.m[ep.EpisodeID]
					was := e.size
					s.store.mu.Unlock()
					rp := shape.reply(i*10 + k)
					var out wireStep
					if err := post(http.DefaultClient, url+"/v1/episodes/"+ep.EpisodeID+"/step", rp, &out); err != nil || out.Error != nil {
						t.Fatalf("step: %v %+v", err, out.Error)
					}
					content := rp["content"]
					growth := stepGrowth(reply{Content: &content, Reasoning: rp["reasoning"]}, k, s.cfg.Episode.Caps, s.cfg.Episode.ReplyCap)
					s.store.mu.Lock()
					now := e.size
					s.store.mu.Unlock()
					if now-was > growth {
						t.Errorf("%s: a step added %d bytes, over the %d reserved for it", shape.name, now-was, growth)
					}
				}
			}
			heap := float64(heapInUse()-before) / float64(n)
			bytes, reserved := s.store.held()
			counted := float64(bytes) / float64(n+1)
			t.Logf("%s: %.0f bytes of heap an episode, %.0f counted", shape.name, heap, counted)
			if raceEnabled && shape.name != "five maximal turns" {
				break // small records: the race detector's heap is not the one measured
			}
			if counted >= 0.8*heap && counted <= shape.over*heap && reserved == 0 {
				break
			}
			if attempt == 3 {
				t.Errorf("%s: %.0f bytes counted an episode for %.0f in the heap (want 0.8 to %g times; %d reserved)", shape.name, counted, heap, shape.over, reserved)
				break
			}
		}
	}
}

// TestStoreBytes: the store holds at most Config.MaxStoreBytes: a new episode is refused (429,
// Retry-After) once they hold three quarters of it, after finished episodes are dropped to make
// room; a step that may pass the bound is refused (429), the episode unchanged; a delete gives
// the room back.
func TestStoreBytes(t *testing.T) {
	const maxBytes = 1_000_000
	task := tasksOf(t)[0]
	cfg := Config{Tasks: []datasets.Task{task}, MaxStoreBytes: maxBytes}
	cfg.Episode.MaxTurns = 20
	s, url := testServer(t, cfg)
	within := func(when string) {
		t.Helper()
		if b, r := s.store.held(); b+r > maxBytes || b < 0 || r != 0 {
			t.Fatalf("%s: the store holds %d bytes and reserves %d, bound %d", when, b, r, maxBytes)
		}
	}
	stepOK := func(id string, rp map[string]string) wireStep {
		t.Helper()
		var st wireStep
		if code := call(t, "POST", url+"/v1/episodes/"+id+"/step", rp, &st); code != 200 {
			t.Fatalf("step: %d %+v", code, st.Error)
		}
		within("after a step")
		return st
	}
	refused := func(what string, code int, retry string, e *apiError) {
		t.Helper()
		if n, err := strconv.Atoi(retry); code != 429 || err != nil || n < 1 || e == nil || !strings.Contains(e.Message, "--max-store-mib") {
			t.Fatalf("%s: %d, Retry-After %q, %+v; want 429 naming --max-store-mib", what, code, retry, e)
		}
	}
	// A: four maximal turns, the last two one statement: done, about 790 KB.
	a := start(t, url, task.ID, "")
	for k := range 4 {
		if st := stepOK(a.EpisodeID, maxReply(min(k, 2))); *st.Done != (k == 3) {
			t.Fatalf("A's step %d: done %v", k+1, *st.Done)
		}
	}
	// B starts: A, finished, is dropped to make room.
	b := start(t, url, task.ID, "")
	if code := call(t, "GET", url+"/v1/episodes/"+a.EpisodeID, nil, nil); code != 404 {
		t.Fatalf("the finished episode was kept over a new one: %d", code)
	}
	for k := range 4 {
		stepOK(b.EpisodeID, maxReply(k))
	}
	// B in play holds past three quarters: no new episode, and no room for B's fifth step.
	var e wireErr
	code, retry := callRetry(t, "POST", url+"/v1/episodes", map[string]string{"task_id": task.ID}, &e)
	refused("a new episode", code, retry, e.Error)
	e = wireErr{}
	code, retry = callRetry(t, "POST", url+"/v1/episodes/"+b.EpisodeID+"/step", maxReply(9), &e)
	refused("B's fifth step", code, retry, e.Error)
	var got wireEpisode
	if code := call(t, "GET", url+"/v1/episodes/"+b.EpisodeID, nil, &got); code != 200 || len(got.Messages) != 2+2*4 {
		t.Fatalf("B after the refused step: %d, %d messages, want 10 (unchanged)", code, len(got.Messages))
	}
	within("after the refusals")
	if code := call(t, "DELETE", url+"/v1/episodes/"+b.EpisodeID, nil, nil); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if bytes, _ := s.store.held(); bytes != 0 {
		t.Fatalf("an empty store counts %d bytes", bytes)
	}
	start(t, url, task.ID, "")
}

// callRetry is call that also returns the Retry-After header.
func callRetry(t *testing.T, method, url string, body, out any) (int, string) {
	t.Helper()
	var retry string
	code := callHeader(t, method, url, body, out, func(h http.Header) { retry = h.Get("Retry-After") })
	return code, retry
}
