package env

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/httpguard"
)

// guarded serves cfg's env behind a guard requiring keys, as `distill env serve --api-key`
// does, on a real loopback listener.
func guarded(t *testing.T, cfg Config, keys ...string) (*Server, string) {
	t.Helper()
	s := testEnv(t, cfg)
	ts := httptest.NewUnstartedServer(nil)
	g, err := httpguard.New(ts.Listener.Addr(), httpguard.Options{Name: "distill env serve", APIKeys: keys, MaxBody: cfg.MaxBody})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config = g.Server(s.Handler(), nil)
	ts.Start()
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// send sends a JSON body (none when "") with the key (none when "") and content type and
// returns the status, the answer's error message and the Retry-After header.
func send(t *testing.T, method, url, key, contentType, body string, out any) (int, string, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e struct {
		Error *apiError `json:"error"`
	}
	json.Unmarshal(data, &e)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, data)
		}
	}
	msg := ""
	if e.Error != nil {
		msg = e.Error.Message
	}
	return resp.StatusCode, msg, resp.Header.Get("Retry-After")
}

// TestGuardedEnv: behind its guard the env refuses a foreign Host (403), a text/plain body
// (415) and a request without its key (401) before running any SQL; with the key, a score
// request runs.
func TestGuardedEnv(t *testing.T) {
	_, url := guarded(t, Config{}, "k1")
	task := tasksOf(t)[0]
	body := `{"task_id": "` + task.ID + `", "completions": ["<sql>SELECT 1</sql>"]}`
	if code, msg, _ := send(t, "POST", url+"/v1/score", "", "application/json", body, nil); code != 401 || !strings.Contains(msg, "--api-key") {
		t.Errorf("no key: %d %s", code, msg)
	}
	if code, msg, _ := send(t, "POST", url+"/v1/score", "k1", "text/plain", body, nil); code != 415 || !strings.Contains(msg, "application/json") {
		t.Errorf("text/plain: %d %s", code, msg)
	}
	req, _ := http.NewRequest("POST", url+"/v1/score", strings.NewReader(body))
	req.Host = "attacker.example"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer k1")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("a foreign Host: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	var out struct {
		Results []json.RawMessage `json:"results"`
	}
	if code, msg, _ := send(t, "POST", url+"/v1/score", "k1", "application/json; charset=utf-8", body, &out); code != 200 || len(out.Results) != 1 {
		t.Errorf("with the key: %d %s %+v", code, msg, out)
	}
}

// TestEpisodesPerClient: a client (an API key) at its cap of episodes in play gets 429 with a
// Retry-After, while another client still starts episodes; a finished episode no longer counts;
// a store full of episodes in play refuses every client.
func TestEpisodesPerClient(t *testing.T) {
	s, url := guarded(t, Config{MaxEpisodes: 5, MaxEpisodesPerClient: 2, TTL: time.Hour}, "a-key", "b-key", "c-key")
	advance := fakeClock(s.store)
	task := tasksOf(t)[0]
	g := answer(gold(t, task, datasets.SQLite))
	create := `{"task_id": "` + task.ID + `"}`
	startAs := func(key string) (int, string, string, string) {
		var ep struct {
			EpisodeID string `json:"episode_id"`
		}
		code, msg, retry := send(t, "POST", url+"/v1/episodes", key, "application/json", create, &ep)
		return code, msg, retry, ep.EpisodeID
	}
	mustStart := func(key string) string {
		t.Helper()
		code, msg, _, id := startAs(key)
		if code != 200 {
			t.Fatalf("start as %s: %d %s", key, code, msg)
		}
		return id
	}
	a1 := mustStart("a-key")
	advance(10 * time.Minute)
	mustStart("a-key")
	code, msg, retry, _ := startAs("a-key")
	if code != 429 || !strings.Contains(msg, "client key 1 has 2 episodes in play") || !strings.Contains(msg, "--max-episodes-per-client") {
		t.Fatalf("a client over its cap: %d %s", code, msg)
	}
	// a1 expires first, 50 minutes from now.
	if n, err := strconv.Atoi(retry); err != nil || n != 50*60 {
		t.Errorf("Retry-After %q, want 3000", retry)
	}
	b1 := mustStart("b-key") // not locked out by a
	mustStart("b-key")
	stepAs := func(key, id string) {
		t.Helper()
		if code, msg, _ := send(t, "POST", url+"/v1/episodes/"+id+"/step", key, "application/json", `{"content": `+strconv.Quote(g)+`}`, nil); code != 200 {
			t.Fatalf("step: %d %s", code, msg)
		}
	}
	stepAs("a-key", a1)
	stepAs("a-key", a1) // done: a has one in play
	mustStart("a-key")
	if code, _, _, _ := startAs("a-key"); code != 429 {
		t.Fatalf("a at its cap again: %d", code)
	}
	// The store holds 5: a1 (done) and four in play; c's start drops a1, the next is refused
	// for the store's cap.
	mustStart("c-key")
	code, msg, retry, _ = startAs("c-key")
	if code != 429 || !strings.Contains(msg, "the server's cap (--max-episodes)") || retry == "" {
		t.Fatalf("a full store: %d %s (Retry-After %q)", code, msg, retry)
	}
	if code, _, _ := send(t, "DELETE", url+"/v1/episodes/"+b1, "b-key", "", "", nil); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	mustStart("c-key")
	if stored, live := s.Episodes(); stored != 5 || live != 5 {
		t.Errorf("stored %d, in play %d", stored, live)
	}
	// Once the TTL passes, every count is back to 0.
	advance(2 * time.Hour)
	s.store.sweep()
	s.store.mu.Lock()
	left := len(s.store.clients)
	s.store.mu.Unlock()
	if left != 0 {
		t.Errorf("after expiry, clients still counted: %d", left)
	}
}

// TestClientIsRemoteAddress: without keys, a client is its remote address, so a trainer on
// another host is not locked out by the ones on this one; every loopback address is one client
// (this host), so that picking 127.0.0.2 does not pass the cap.
func TestClientIsRemoteAddress(t *testing.T) {
	h := testEnv(t, Config{MaxEpisodes: 10, MaxEpisodesPerClient: 1}).Handler()
	task := tasksOf(t)[0]
	for i, want := range []struct {
		addr string
		code int
	}{{"10.0.0.1:1000", 200}, {"10.0.0.1:1001", 429}, {"10.0.0.2:1000", 200},
		{"127.0.0.1:1000", 200}, {"127.0.0.2:1000", 429}, {"[::1]:1000", 429}, {"[::ffff:127.0.0.9]:1000", 429}} {
		req := httptest.NewRequest("POST", "/v1/episodes", strings.NewReader(`{"task_id": "`+task.ID+`"}`))
		req.RemoteAddr = want.addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != want.code {
			t.Errorf("%d: from %s: %d %s, want %d", i, want.addr, w.Code, w.Body, want.code)
		}
	}
}

// fakeClock makes st's clock stand still and returns what moves it on.
func fakeClock(st *store) (advance func(time.Duration)) {
	now := time.Now()
	var mu sync.Mutex
	st.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	return func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
}

// TestEpisodesOwnedByKey: with API keys an episode answers only the key that started it: another
// key's GET, step, batch step and DELETE of it are 404 with the answer of an unknown id (so that
// they do not tell it exists either), and leave it as it was for its own key, which still plays
// it. (Without the check, key 2 read, played and deleted key 1's episode.)
func TestEpisodesOwnedByKey(t *testing.T) {
	_, url := guarded(t, Config{TTL: time.Hour}, "a-key", "b-key")
	task := tasksOf(t)[0]
	var ep struct {
		EpisodeID string `json:"episode_id"`
	}
	if code, msg, _ := send(t, "POST", url+"/v1/episodes", "a-key", "application/json", `{"task_id": "`+task.ID+`"}`, &ep); code != 200 {
		t.Fatalf("start: %d %s", code, msg)
	}
	id := ep.EpisodeID
	unknown := strings.Repeat("0", len(id))
	_, want, _ := send(t, "GET", url+"/v1/episodes/"+unknown, "b-key", "", "", nil)
	want = strings.ReplaceAll(want, unknown, id)
	stepBody := `{"content": "<sql>SELECT 1</sql>"}`
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/episodes/" + id, ""},
		{"POST", "/v1/episodes/" + id + "/step", stepBody},
		{"DELETE", "/v1/episodes/" + id, ""},
	} {
		ct := ""
		if c.body != "" {
			ct = "application/json"
		}
		if code, msg, _ := send(t, c.method, url+c.path, "b-key", ct, c.body, nil); code != 404 || msg != want {
			t.Errorf("%s %s by another key: %d %q, want 404 %q", c.method, c.path, code, msg, want)
		}
	}
	var batch struct {
		Results []batchResult `json:"results"`
	}
	if code, msg, _ := send(t, "POST", url+"/v1/episodes:batch-step", "b-key", "application/json", `{"steps": [{"episode_id": "`+id+`", "content": "<sql>SELECT 1</sql>"}]}`, &batch); code != 200 ||
		len(batch.Results) != 1 || batch.Results[0].Error == nil || batch.Results[0].Error.Status != 404 || batch.Results[0].Error.Message != want {
		t.Errorf("a batch step by another key: %d %s %+v", code, msg, batch.Results)
	}
	var got episodeJSON
	if code, msg, _ := send(t, "GET", url+"/v1/episodes/"+id, "a-key", "", "", &got); code != 200 || got.Turns != 0 || got.Done {
		t.Fatalf("its own key's GET after the others': %d %s %+v", code, msg, got)
	}
	if code, msg, _ := send(t, "POST", url+"/v1/episodes/"+id+"/step", "a-key", "application/json", stepBody, nil); code != 200 {
		t.Fatalf("its own key's step: %d %s", code, msg)
	}
	if code, msg, _ := send(t, "DELETE", url+"/v1/episodes/"+id, "a-key", "", "", nil); code != 200 {
		t.Fatalf("its own key's DELETE: %d %s", code, msg)
	}
}
