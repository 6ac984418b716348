package env

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/sandbox"
)

// sampleRoot is the db root of the sample, built once per test binary (TestMain removes it).
var sampleRoot string

// sampleTasks loads the bundled sample into sampleRoot.
var sampleTasks = sync.OnceValues(func() ([]datasets.Task, error) {
	return datasets.LoadTasks(datasets.SpecSample, sampleRoot)
})

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "env-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sampleRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func tasksOf(t testing.TB) []datasets.Task {
	t.Helper()
	tasks, err := sampleTasks()
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

// testServer serves cfg (the sample on SQLite unless cfg says otherwise) over httptest.
func testServer(t testing.TB, cfg Config) (*Server, string) {
	t.Helper()
	s := testEnv(t, cfg)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, hs.URL
}

// testEnv is the env of cfg (the sample on SQLite unless cfg says otherwise), closed when the
// test ends.
func testEnv(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Tasks == nil {
		cfg.Tasks = tasksOf(t)
	}
	if cfg.Dialects == nil {
		cfg.Dialects = []datasets.Dialect{datasets.SQLite}
	}
	if cfg.Opener == nil {
		conn := &sandbox.Connector{}
		t.Cleanup(func() { conn.Close() })
		cfg.Opener = conn
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// call sends body (a string or a value to encode) and decodes the JSON answer into out, which
// may be nil; it returns the status.
func call(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	return callHeader(t, method, url, body, out, nil)
}

// callHeader is call that also hands the answer's header to header, when not nil.
func callHeader(t *testing.T, method, url string, body, out any, header func(http.Header)) int {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if header != nil {
		header(resp.Header)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: content type %q, body %s", method, url, ct, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, data)
		}
	}
	return resp.StatusCode
}

// Wire shapes as a client decodes them: every field the API documents, so a renamed or missing
// field fails here.
type (
	wireRewards struct {
		Format, ExecOK, Converged, Correct *int
		Total                              *float64
	}
	wireInfo struct {
		SQL         string   `json:"sql"`
		Outcome     string   `json:"outcome"`
		Error       string   `json:"error"`
		Rows        *int     `json:"rows"`
		ExecMS      *float64 `json:"exec_ms"`
		GoldError   string   `json:"gold_error"`
		GoldDialect string   `json:"gold_dialect"`
	}
	wireStep struct {
		EpisodeID   string           `json:"episode_id"`
		Done        *bool            `json:"done"`
		Observation *json.RawMessage `json:"observation"`
		Turn        int              `json:"turn"`
		Rewards     wireRewards      `json:"rewards"`
		Info        wireInfo         `json:"info"`
		Error       *apiError        `json:"error"`
	}
	wireEpisode struct {
		EpisodeID string `json:"episode_id"`
		MaxTurns  int    `json:"max_turns"`
		Messages  []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		Error *apiError `json:"error"`
	}
	wireErr struct {
		Error *apiError `json:"error"`
	}
)

func (w *wireRewards) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for name, dst := range map[string]**int{"format": &w.Format, "exec_ok": &w.ExecOK, "converged": &w.Converged, "correct": &w.Correct} {
		if raw, ok := m[name]; ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				return fmt.Errorf("rewards.%s: %w", name, err)
			}
		}
	}
	if raw, ok := m["total"]; ok {
		return json.Unmarshal(raw, &w.Total)
	}
	return nil
}

// four returns the four rewards, failing the test on a missing one.
func (w wireRewards) four(t *testing.T) [4]int {
	t.Helper()
	if w.Format == nil || w.ExecOK == nil || w.Converged == nil || w.Correct == nil || w.Total == nil {
		t.Fatalf("rewards lack a field: %+v", w)
	}
	return [4]int{*w.Format, *w.ExecOK, *w.Converged, *w.Correct}
}

func gold(t *testing.T, task datasets.Task, d datasets.Dialect) string {
	t.Helper()
	g, ok := task.GoldFor(d)
	if !ok {
		t.Fatalf("task %s has no gold for %s", task.ID, d)
	}
	return g
}

func answer(sql string) string {
	return "<think>the question asks for this</think>\n<sql>" + sql + "</sql>"
}

func start(t *testing.T, url, taskID, dialect string) wireEpisode {
	t.Helper()
	var ep wireEpisode
	if code := call(t, "POST", url+"/v1/episodes", map[string]string{"task_id": taskID, "dialect": dialect}, &ep); code != 200 || ep.EpisodeID == "" {
		t.Fatalf("start %s: %d %+v", taskID, code, ep.Error)
	}
	return ep
}

func step(t *testing.T, url, id, content string) wireStep {
	t.Helper()
	var st wireStep
	if code := call(t, "POST", url+"/v1/episodes/"+id+"/step", map[string]string{"content": content}, &st); code != 200 {
		t.Fatalf("step %s: %d %+v", id, code, st.Error)
	}
	return st
}

// TestGoldTwiceMalformedOnce is the "Done when" in process: a malformed reply scores
// format 0 and gets the format observation; the gold SQL twice ends the episode with all four
// rewards 1 (a clean episode) and total 1; the prompt is distill's.
func TestGoldTwiceMalformedOnce(t *testing.T) {
	_, url := testServer(t, Config{})
	task := tasksOf(t)[3]
	ep := start(t, url, task.ID, "")
	if len(ep.Messages) != 2 || ep.Messages[0].Role != "system" || ep.Messages[1].Role != "user" || ep.MaxTurns != protocol.DefaultMaxTurns {
		t.Fatalf("episode start: %+v", ep)
	}
	if !strings.Contains(ep.Messages[0].Content, "CREATE TABLE") || ep.Messages[1].Content != protocol.UserPrompt(task) {
		t.Fatalf("not distill's prompt:\n%s\n%s", ep.Messages[0].Content, ep.Messages[1].Content)
	}

	// A clean episode: gold, gold.
	g := gold(t, task, datasets.SQLite)
	s1 := step(t, url, ep.EpisodeID, answer(g))
	if *s1.Done || s1.Turn != 1 || s1.Observation == nil || !strings.Contains(string(*s1.Observation), `"role":"user"`) || s1.Info.Outcome != "ok" || s1.Info.SQL != g || s1.Info.Rows == nil {
		t.Fatalf("turn 1: %+v", s1)
	}
	if r := s1.Rewards.four(t); r != [4]int{1, 1, 0, 0} {
		t.Fatalf("turn 1 rewards %v", r)
	}
	var fields map[string]json.RawMessage // to tell "observation": null from a missing field
	if code := call(t, "POST", url+"/v1/episodes/"+ep.EpisodeID+"/step", map[string]string{"content": answer(g)}, &fields); code != 200 {
		t.Fatalf("turn 2: %d %s", code, fields["error"])
	}
	var s2 wireStep
	if err := json.Unmarshal(mustMarshal(t, fields), &s2); err != nil {
		t.Fatal(err)
	}
	if !*s2.Done || s2.Turn != 2 || string(fields["observation"]) != "null" {
		t.Fatalf("turn 2: %+v (observation %s)", s2, fields["observation"])
	}
	if r := s2.Rewards.four(t); r != [4]int{1, 1, 1, 1} || *s2.Rewards.Total != 1 {
		t.Fatalf("gold twice: rewards %v total %v", r, *s2.Rewards.Total)
	}
	var e wireErr
	if code := call(t, "POST", url+"/v1/episodes/"+ep.EpisodeID+"/step", map[string]string{"content": answer(g)}, &e); code != http.StatusConflict || !strings.Contains(e.Error.Message, "done") {
		t.Fatalf("step after the end: %d %+v", code, e.Error)
	}

	// A malformed reply, then the gold twice: converged and correct, but not a clean format.
	ep = start(t, url, task.ID, "sqlite")
	m := step(t, url, ep.EpisodeID, "SELECT the answer, no tags")
	if *m.Done || m.Info.Outcome != "format_violation" || !strings.Contains(string(*m.Observation), protocol.FormatViolationText) {
		t.Fatalf("malformed: %+v", m)
	}
	if r := m.Rewards.four(t); r[0] != 0 {
		t.Fatalf("malformed reply: rewards %v, want format 0", r)
	}
	step(t, url, ep.EpisodeID, answer(g))
	end := step(t, url, ep.EpisodeID, answer(g))
	if r := end.Rewards.four(t); !*end.Done || r != [4]int{0, 1, 1, 1} || *end.Rewards.Total != 0.9 {
		t.Fatalf("malformed then gold twice: done %v rewards %v total %v", *end.Done, r, *end.Rewards.Total)
	}

	// The whole conversation, as a trainer reads it back.
	var full struct {
		Done     bool `json:"done"`
		Turns    int  `json:"turns"`
		Messages []struct{ Role, Content string }
	}
	if code := call(t, "GET", url+"/v1/episodes/"+ep.EpisodeID, nil, &full); code != 200 || !full.Done || full.Turns != 3 || len(full.Messages) != 2+3+2 {
		t.Fatalf("GET episode: %d %+v", code, full)
	}
	if code := call(t, "DELETE", url+"/v1/episodes/"+ep.EpisodeID, nil, nil); code != 200 {
		t.Fatalf("DELETE: %d", code)
	}
	if code := call(t, "GET", url+"/v1/episodes/"+ep.EpisodeID, nil, &e); code != 404 {
		t.Fatalf("GET after DELETE: %d", code)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBudgetAndWrongAnswer: distinct replies run out the turn budget (done, not converged);
// a wrong final answer is not correct; a failing SQL repeated twice is not converged.
func TestBudgetAndWrongAnswer(t *testing.T) {
	_, url := testServer(t, Config{Episode: episode.EpisodeOptions{MaxTurns: 3}})
	task := tasksOf(t)[0]
	ep := start(t, url, task.ID, "")
	if ep.MaxTurns != 3 {
		t.Fatalf("max_turns %d", ep.MaxTurns)
	}
	var last wireStep
	for i := 1; i <= 3; i++ {
		last = step(t, url, ep.EpisodeID, answer(fmt.Sprintf("SELECT %d", i)))
		if *last.Done != (i == 3) {
			t.Fatalf("turn %d: done %v", i, *last.Done)
		}
	}
	if r := last.Rewards.four(t); r != [4]int{1, 1, 0, 0} {
		t.Fatalf("budget spent: rewards %v", r)
	}
	ep = start(t, url, task.ID, "")
	step(t, url, ep.EpisodeID, answer("SELECT nope FROM book"))
	bad := step(t, url, ep.EpisodeID, answer("SELECT nope FROM book"))
	if r := bad.Rewards.four(t); !*bad.Done || r != [4]int{1, 0, 0, 0} || bad.Info.Outcome != "error" || !strings.Contains(bad.Info.Error, "nope") {
		t.Fatalf("failing SQL twice: done %v rewards %v info %+v", *bad.Done, r, bad.Info)
	}
}

// TestTasksListing: split, limit and offset select from the listing; bad parameters are 400.
func TestTasksListing(t *testing.T) {
	tasks := tasksOf(t)
	_, url := testServer(t, Config{})
	var list struct {
		Total  int        `json:"total"`
		Tasks  []taskJSON `json:"tasks"`
		Splits []string   `json:"splits"`
	}
	if code := call(t, "GET", url+"/v1/tasks", nil, &list); code != 200 || list.Total != len(tasks) || len(list.Tasks) != len(tasks) || len(list.Splits) != 1 || list.Splits[0] != "sample" {
		t.Fatalf("all: %d total %d tasks %d splits %v", code, list.Total, len(list.Tasks), list.Splits)
	}
	if code := call(t, "GET", url+"/v1/tasks?split=sample&limit=5&offset=50", nil, &list); code != 200 || list.Total != len(tasks) || len(list.Tasks) != min(5, len(tasks)-50) {
		t.Fatalf("page: %d %+v", code, list)
	}
	want := tasks[50]
	if got := list.Tasks[0]; got.TaskID != want.ID || got.DBID != want.DBID || got.Difficulty != want.Difficulty || got.Split != "sample" {
		t.Fatalf("entry %+v for task %+v", got, want)
	}
	if code := call(t, "GET", url+"/v1/tasks?offset=1000", nil, &list); code != 200 || len(list.Tasks) != 0 {
		t.Fatalf("past the end: %d %d", code, len(list.Tasks))
	}
	var e wireErr
	for q, want := range map[string]int{"?split=bird-dev": 404, "?limit=-1": 400, "?offset=x": 400, "?page=2": 400} {
		if code := call(t, "GET", url+"/v1/tasks"+q, nil, &e); code != want || e.Error == nil || e.Error.Message == "" {
			t.Errorf("%s: %d %+v, want %d", q, code, e.Error, want)
		}
	}
}

// TestBadRequests: malformed JSON, unknown and missing fields, trailing data, oversized bodies,
// unknown ids, tasks, dialects and routes each get their status and a clear message.
func TestBadRequests(t *testing.T) {
	_, url := testServer(t, Config{MaxBody: 4096})
	task := tasksOf(t)[0]
	ep := start(t, url, task.ID, "")
	stepURL := url + "/v1/episodes/" + ep.EpisodeID + "/step"
	cases := []struct {
		method, path string
		body         any
		status       int
		says         string
	}{
		{"POST", stepURL, `{"content": "x"`, 400, "malformed"},
		{"POST", stepURL, `not json`, 400, "malformed"},
		{"POST", stepURL, ``, 400, "empty"},
		{"POST", stepURL, `{"content": "x", "temperature": 1}`, 400, `unknown field "temperature"`},
		{"POST", stepURL, `{"content": 3}`, 400, "malformed"},
		{"POST", stepURL, `{}`, 400, `"content" is required`},
		{"POST", stepURL, `{"content": "x"} {"content": "y"}`, 400, "after the JSON object"},
		{"POST", stepURL, `{"content": "` + strings.Repeat("x", 5000) + `"}`, 413, "over 4096 bytes"},
		{"POST", url + "/v1/episodes/0123456789abcdef/step", `{"content": "x"}`, 404, "not found"},
		{"GET", url + "/v1/episodes/nope", nil, 404, "not found"},
		{"DELETE", url + "/v1/episodes/nope", nil, 404, "not found"},
		{"POST", url + "/v1/episodes", `{"task_id": "sample/9999"}`, 404, "no task"},
		{"POST", url + "/v1/episodes", `{}`, 400, `"task_id" is required`},
		{"POST", url + "/v1/episodes", `{"task_id": "sample/0", "dialect": "postgres"}`, 400, "not served"},
		{"POST", url + "/v1/episodes", `{"task_id": "sample/0", "extra": 1}`, 400, "unknown field"},
		{"POST", url + "/v1/episodes:batch-step", `{"steps": []}`, 400, `"steps" is required`},
		{"POST", url + "/v1/episodes:batch-step", `{"steps": [{"content": "x"}]}`, 400, `"episode_id" is required`},
		{"POST", url + "/v1/episodes:batch-step", `{"steps": [{"episode_id": "a", "content": "x"}, {"episode_id": "a", "content": "y"}]}`, 400, "both step episode a"},
		{"POST", url + "/v1/score", `{"task_id": "sample/0"}`, 400, `"completions" is required`},
		{"POST", url + "/v1/score", `{"task_id": "sample/0", "completions": "x"}`, 400, "malformed"},
		{"GET", url + "/v2/nothing", nil, 404, "no route"},
	}
	for _, c := range cases {
		var e wireErr
		code := call(t, c.method, c.path, c.body, &e)
		if code != c.status || e.Error == nil || e.Error.Status != c.status || !strings.Contains(e.Error.Message, c.says) {
			t.Errorf("%s %s %.60v: %d %+v, want %d saying %q", c.method, strings.TrimPrefix(c.path, url), c.body, code, e.Error, c.status, c.says)
		}
	}
	// None of it touched the episode.
	if s := step(t, url, ep.EpisodeID, answer("SELECT 1")); s.Turn != 1 {
		t.Fatalf("the episode moved on bad requests: turn %d", s.Turn)
	}
}

// TestBatchStep: one request steps many episodes; an unknown id fails alone.
func TestBatchStep(t *testing.T) {
	tasks := tasksOf(t)
	_, url := testServer(t, Config{})
	type item struct {
		EpisodeID string `json:"episode_id"`
		Content   string `json:"content"`
	}
	var items []item
	var golds []string
	for i := 0; i < 8; i++ {
		task := tasks[i*5%len(tasks)]
		ep := start(t, url, task.ID, "")
		g := gold(t, task, datasets.SQLite)
		items = append(items, item{ep.EpisodeID, answer(g)})
		golds = append(golds, g)
	}
	items = append(items, item{"ffffffffffffffffffffffffffffffff", answer("SELECT 1")})
	var out struct {
		Results []wireStep `json:"results"`
	}
	for round := 1; round <= 2; round++ {
		if code := call(t, "POST", url+"/v1/episodes:batch-step", map[string]any{"steps": items}, &out); code != 200 || len(out.Results) != len(items) {
			t.Fatalf("round %d: %d, %d results", round, code, len(out.Results))
		}
		for i, r := range out.Results[:8] {
			if r.EpisodeID != items[i].EpisodeID || r.Error != nil || r.Turn != round || *r.Done != (round == 2) || r.Info.SQL != golds[i] {
				t.Fatalf("round %d item %d: %+v", round, i, r)
			}
			if round == 2 && r.Rewards.four(t) != [4]int{1, 1, 1, 1} {
				t.Fatalf("item %d: rewards %v", i, r.Rewards.four(t))
			}
		}
		if last := out.Results[8]; last.Error == nil || last.Error.Status != 404 || last.EpisodeID != items[8].EpisodeID || last.Done != nil {
			t.Fatalf("unknown id in a batch: %+v", last)
		}
	}
}

// TestScore: completions scored as single turns: the gold is correct, a wrong answer is not,
// a malformed one has format 0; converged is always 0.
func TestScore(t *testing.T) {
	task := tasksOf(t)[7]
	_, url := testServer(t, Config{})
	var out struct {
		Results []struct {
			Rewards wireRewards `json:"rewards"`
			Info    wireInfo    `json:"info"`
		} `json:"results"`
	}
	comps := []string{answer(gold(t, task, datasets.SQLite)), answer("SELECT 42"), "no sql here", answer("DELETE FROM book")}
	if code := call(t, "POST", url+"/v1/score", map[string]any{"task_id": task.ID, "completions": comps}, &out); code != 200 || len(out.Results) != len(comps) {
		t.Fatalf("%d, %d results", code, len(out.Results))
	}
	want := [][4]int{{1, 1, 0, 1}, {1, 1, 0, 0}, {0, 0, 0, 0}, {1, 0, 0, 0}}
	for i, r := range out.Results {
		if got := r.Rewards.four(t); got != want[i] {
			t.Errorf("completion %d: rewards %v, want %v (info %+v)", i, got, want[i], r.Info)
		}
	}
	if o := out.Results[3].Info.Outcome; o != "refused" {
		t.Errorf("a write: outcome %q", o)
	}
}

// TestStoreTTLAndCap: an idle episode expires (404); a full store drops finished episodes first
// and refuses a new one (429) when all are in play.
func TestStoreTTLAndCap(t *testing.T) {
	s, url := testServer(t, Config{MaxEpisodes: 3, MaxEpisodesPerClient: 3, TTL: time.Hour})
	advance := fakeClock(s.store)
	task := tasksOf(t)[0]
	g := answer(gold(t, task, datasets.SQLite))
	a := start(t, url, task.ID, "")
	b := start(t, url, task.ID, "")
	c := start(t, url, task.ID, "")
	var e wireErr
	if code := call(t, "POST", url+"/v1/episodes", map[string]string{"task_id": task.ID}, &e); code != 429 || !strings.Contains(e.Error.Message, "cap") {
		t.Fatalf("over the cap: %d %+v", code, e.Error)
	}
	step(t, url, b.EpisodeID, g)
	step(t, url, b.EpisodeID, g) // b is done: the next start may drop it
	d := start(t, url, task.ID, "")
	if code := call(t, "GET", url+"/v1/episodes/"+b.EpisodeID, nil, &e); code != 404 {
		t.Fatalf("the finished episode was kept over a new one: %d", code)
	}
	advance(59 * time.Minute)
	step(t, url, a.EpisodeID, g) // their TTLs restart
	step(t, url, d.EpisodeID, g)
	advance(2 * time.Minute)
	if code := call(t, "POST", url+"/v1/episodes/"+c.EpisodeID+"/step", map[string]string{"content": g}, &e); code != 404 || !strings.Contains(e.Error.Message, "expired") {
		t.Fatalf("idle past the TTL: %d %+v", code, e.Error)
	}
	if stored, live := s.Episodes(); stored != 2 || live != 2 {
		t.Fatalf("stored %d live %d, want a and d", stored, live)
	}
	advance(61 * time.Minute)
	if n := s.store.sweep(); n != 2 {
		t.Fatalf("sweep dropped %d, want 2", n)
	}
}

// gateDB holds every execution of a statement containing "gate" until release is closed.
type gateDB struct {
	sandbox.DB
	entered chan struct{}
	release chan struct{}
}

func (g *gateDB) Exec(ctx context.Context, q string, o sandbox.ExecOptions) (*sandbox.Result, error) {
	if strings.Contains(q, "gate") {
		g.entered <- struct{}{}
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.DB.Exec(ctx, q, o)
}

type gateOpener struct {
	conn *sandbox.Connector
	gate *gateDB
	once sync.Once
}

func (o *gateOpener) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error) {
	db, err := o.conn.Open(ctx, d, t)
	if err != nil {
		return nil, err
	}
	o.once.Do(func() { o.gate.DB = db })
	return o.gate, nil
}

// TestIsolation: while one episode's statement is stuck, a second step of it is refused (409),
// other episodes step on, and a client that gives up leaves the stuck episode unchanged.
func TestIsolation(t *testing.T) {
	conn := &sandbox.Connector{}
	t.Cleanup(func() { conn.Close() })
	tasks := tasksOf(t)[:1] // one database, so the gate wraps it
	gate := &gateDB{entered: make(chan struct{}, 1), release: make(chan struct{})}
	_, url := testServer(t, Config{Tasks: tasks, Opener: &gateOpener{conn: conn, gate: gate}})
	stuck := start(t, url, tasks[0].ID, "")
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"content": "<think>x</think>\n<sql>SELECT 'gate'</sql>"}`
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/episodes/"+stuck.EpisodeID+"/step", strings.NewReader(body))
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-gate.entered
	var e wireErr
	if code := call(t, "POST", url+"/v1/episodes/"+stuck.EpisodeID+"/step", map[string]string{"content": answer("SELECT 1")}, &e); code != 409 {
		t.Fatalf("second step of a busy episode: %d %+v", code, e.Error)
	}
	// Others go on, writes and attachments included, all refused without harm.
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep := start(t, url, tasks[0].ID, "")
			for _, q := range []string{"DROP TABLE book", "ATTACH DATABASE '/tmp/x' AS x", "SELECT 1; DELETE FROM book", "PRAGMA writable_schema=1"} {
				s := step(t, url, ep.EpisodeID, answer(q))
				if s.Info.Outcome == "ok" {
					t.Errorf("%q ran: %+v", q, s.Info)
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	// The episode is unchanged: its next step is turn 1, once the server has seen the client go.
	var s wireStep
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s = wireStep{}
		code := call(t, "POST", url+"/v1/episodes/"+stuck.EpisodeID+"/step", map[string]string{"content": answer("SELECT count(*) FROM book")}, &s)
		if code == 200 {
			break
		}
		if code != 409 || time.Now().After(deadline) {
			t.Fatalf("after the cancelled step: %d %+v", code, s.Error)
		}
	}
	if s.Turn != 1 || s.Info.Outcome != "ok" {
		t.Fatalf("after the cancelled step: %+v", s)
	}
	close(gate.release)
}

// countDB counts the executions of one statement.
type countDB struct {
	sandbox.DB
	sql string
	n   *atomic.Int64
}

func (c countDB) Exec(ctx context.Context, q string, o sandbox.ExecOptions) (*sandbox.Result, error) {
	if q == c.sql {
		c.n.Add(1)
	}
	return c.DB.Exec(ctx, q, o)
}

type countOpener struct {
	conn *sandbox.Connector
	sql  string
	n    atomic.Int64
}

func (o *countOpener) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error) {
	db, err := o.conn.Open(ctx, d, t)
	return countDB{DB: db, sql: o.sql, n: &o.n}, err
}

// TestGoldRunsOnce: a group of rollouts of one task (episodes and score completions) runs the
// task's gold SQL once; each is still judged.
func TestGoldRunsOnce(t *testing.T) {
	conn := &sandbox.Connector{}
	t.Cleanup(func() { conn.Close() })
	task := tasksOf(t)[5]
	g := gold(t, task, datasets.SQLite)
	wrong := "SELECT 'not the gold'"
	o := &countOpener{conn: conn, sql: g}
	_, url := testServer(t, Config{Tasks: []datasets.Task{task}, Opener: o})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := g
			if i%2 == 1 {
				q = wrong
			}
			ep := start(t, url, task.ID, "")
			step(t, url, ep.EpisodeID, answer(q))
			end := step(t, url, ep.EpisodeID, answer(q))
			if r := end.Rewards.four(t); !*end.Done || r[3] != 1-i%2 {
				t.Errorf("rollout %d: rewards %v", i, r)
			}
		}()
	}
	wg.Wait()
	// The 4 gold rollouts ran it twice each as their own SQL; the judge ran it once in all.
	if n := o.n.Load(); n != 4*2+1 {
		t.Fatalf("the gold SQL ran %d times, want %d", n, 4*2+1)
	}
}

// TestTruncatedReply: a reply the generator cut (finish_reason length) inside its <sql> block is
// a truncated turn, as distill records it: the truncation notice, outcome truncated, format 0;
// the same text finished normally runs.
func TestTruncatedReply(t *testing.T) {
	_, url := testServer(t, Config{})
	task := tasksOf(t)[0]
	ep := start(t, url, task.ID, "")
	cut := "<think>count the poetry</think>\n<sql>SELECT COUNT(*) FROM book WHERE genre"
	var st wireStep
	if code := call(t, "POST", url+"/v1/episodes/"+ep.EpisodeID+"/step", map[string]string{"content": cut, "finish_reason": "length"}, &st); code != 200 {
		t.Fatalf("%d %+v", code, st.Error)
	}
	if r := st.Rewards.four(t); st.Info.Outcome != "truncated" || r[0] != 0 || !strings.Contains(string(*st.Observation), "cut off by the length limit") {
		t.Fatalf("truncated reply: %+v rewards %v", st, r)
	}
	if s := step(t, url, ep.EpisodeID, cut); s.Info.Outcome == "truncated" || s.Info.SQL == "" || s.Turn != 2 {
		t.Fatalf("the same text without finish_reason: %+v", s.Info)
	}
}

// TestStoreDropMidStep: an episode dropped (deleted, expired) while its last step runs leaves its
// client's count of episodes in play once, not again when that step ends it: the client's cap
// still holds after.
func TestStoreDropMidStep(t *testing.T) {
	s := newStore(time.Hour, 10, 2, 1<<30, 1<<30)
	var eps []*liveEpisode
	for range 2 {
		e := &liveEpisode{client: "c", size: 1}
		if _, err := s.add(e); err != nil {
			t.Fatal(err)
		}
		eps = append(eps, e)
	}
	for round := range 3 {
		if !s.remove(eps[0].id, "") { // DELETE while its step runs
			t.Fatalf("round %d: not stored", round)
		}
		s.touch(eps[0], true, 1, 0) // the step ends the episode
		e := &liveEpisode{client: "c", size: 1}
		if _, err := s.add(e); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if _, err := s.add(&liveEpisode{client: "c", size: 1}); !errors.Is(err, errClientFull) {
			t.Fatalf("round %d: a third episode in play for the client: %v, want errClientFull", round, err)
		}
		eps[0] = e
	}
}
