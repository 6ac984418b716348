package view

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/internal/httpguard"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/stats"
)

// get fetches path from the server's handler and decodes the JSON answer into v.
func get(tb testing.TB, h http.Handler, path string, v any) int {
	tb.Helper()
	req := httptest.NewRequest("GET", path, nil)
	req.Host = "127.0.0.1:8080"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if v != nil {
		if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
			tb.Fatalf("GET %s: %d %v: %s", path, w.Code, err, w.Body.String())
		}
	}
	return w.Code
}

func TestIndexRowMatchesSchema(t *testing.T) {
	full := parquet.SchemaOf(curate.Row{})
	byName := map[string]parquet.Field{}
	for _, f := range full.Fields() {
		byName[f.Name()] = f
	}
	fields := append(parquet.SchemaOf(indexRow{}).Fields(), parquet.SchemaOf(textRow{}).Fields()...)
	for _, f := range fields {
		g, ok := byName[f.Name()]
		if !ok {
			t.Errorf("indexRow or textRow column %q is not a curate.Row column", f.Name())
			continue
		}
		if f.Leaf() && f.Type().Kind() != g.Type().Kind() || !f.Leaf() && !parquet.SameNodes(f, g) || f.Optional() != g.Optional() || f.Repeated() != g.Repeated() {
			t.Errorf("column %q: projection %v, curate.Row %v", f.Name(), f.Type(), g.Type())
		}
	}
}

func TestDetect(t *testing.T) {
	fx := getFixture(t)
	for path, want := range map[string]Kind{fx.dataset: KindDataset, fx.run: KindRun, fx.evalStudent: KindEval} {
		if k, err := Detect(path); err != nil || k != want {
			t.Errorf("Detect(%s) = %q, %v; want %q", path, k, err, want)
		}
	}
	// An eval dir before its first summary.json looks like a run dir; beside eval dirs it is one.
	for _, paths := range [][]string{{fx.evalOracle, fx.run}, {fx.run, fx.evalOracle}} {
		if k, err := detectAll(paths); err != nil || k != KindEval {
			t.Errorf("detectAll(%v) = %q, %v; want eval", paths, k, err)
		}
	}
	empty := t.TempDir()
	file := filepath.Join(empty, "f.txt")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, c := range []struct {
		paths []string
		want  string
	}{
		{[]string{empty}, "is not a dataset dir"},
		{[]string{file}, "is a file"},
		{[]string{filepath.Join(empty, "nope")}, "no such file"},
		{[]string{fx.dataset, fx.run}, "give PATHs of one kind"},
		{nil, "no PATH"},
		{[]string{fx.evalOracle, fx.dataset}, "give PATHs of one kind"},
	} {
		_, err := Open(context.Background(), Options{Paths: c.paths})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Open(%v) = %v, want one line with %q", c.paths, err, c.want)
		}
	}
}

// TestDatasetRowsAndFilters checks the table against the Parquet rows read by curate: counts
// per filter, search, order, paging, facet counts.
func TestDatasetRowsAndFilters(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	s := openServer(t, fx.tok, fx.dataset)
	h := s.Handler()
	count := func(keep func(r *curate.Row) bool) int {
		n := 0
		for i := range rows {
			if keep(&rows[i]) {
				n++
			}
		}
		return n
	}
	cases := []struct {
		query string
		keep  func(r *curate.Row) bool
	}{
		{"", func(*curate.Row) bool { return true }},
		{"teacher=alpha", func(r *curate.Row) bool { return r.Teacher == "alpha" }},
		{"teacher=alpha&teacher=oracle", func(*curate.Row) bool { return true }},
		{"teacher=alpha&correct=0", func(r *curate.Row) bool { return r.Teacher == "alpha" && !r.Correct }},
		{"converged=1&exec_ok=1", func(r *curate.Row) bool { return r.Converged && r.ExecOK }},
		{"violations=some", func(r *curate.Row) bool { return r.FormatViolations > 0 }},
		{"violations=none&difficulty=moderate", func(r *curate.Row) bool { return r.FormatViolations == 0 && r.Difficulty == "moderate" }},
		{"turns_min=3", func(r *curate.Row) bool { return r.Turns >= 3 }},
		{"turns_min=2&turns_max=2", func(r *curate.Row) bool { return r.Turns == 2 }},
		{"tokens_min=1000&tokens_max=1100", func(r *curate.Row) bool { return r.NumTokens >= 1000 && r.NumTokens <= 1100 }},
		{"db_id=clinic&dialect=sqlite", func(r *curate.Row) bool { return r.DBID == "clinic" }},
		{"q=" + url.QueryEscape("HOW many"), func(r *curate.Row) bool { return strings.Contains(strings.ToLower(r.Question), "how many") }},
		{"q=" + url.QueryEscape(`"select 42"`), func(r *curate.Row) bool { return strings.Contains(strings.ToLower(r.FinalSQL), "select 42") }},
		{"q=" + url.QueryEscape("library poetry"), func(r *curate.Row) bool {
			return r.DBID == "library" && strings.Contains(strings.ToLower(r.Question+r.FinalSQL+r.GoldSQL), "poetry")
		}},
	}
	for _, c := range cases {
		var p Page
		if code := get(t, h, "/api/rows?limit=500&"+c.query, &p); code != 200 {
			t.Fatalf("%s: status %d", c.query, code)
		}
		want := count(c.keep)
		if p.Total != want || len(p.Rows) != want || p.All != len(rows) {
			t.Errorf("%q: total %d (%d rows) of %d, want %d of %d", c.query, p.Total, len(p.Rows), p.All, want, len(rows))
		}
		for _, r := range p.Rows {
			if !c.keep(&rows[r.ID]) || rows[r.ID].Key != r.Key {
				t.Errorf("%q: row %d (%s) should not match", c.query, r.ID, r.Key)
			}
		}
	}
	if n := count(func(r *curate.Row) bool { return r.FormatViolations > 0 }); n == 0 {
		t.Fatal("fixture has no format violations")
	}

	// Facet counts ignore their own facet's filter.
	var p Page
	get(t, h, "/api/rows?teacher=alpha&correct=1", &p)
	for _, fc := range p.Facets["teacher"] {
		want := count(func(r *curate.Row) bool { return r.Teacher == fc.Value && r.Correct })
		if fc.Count != want {
			t.Errorf("facet teacher=%s: %d, want %d", fc.Value, fc.Count, want)
		}
	}
	// Order and paging.
	get(t, h, "/api/rows?sort=-tokens&limit=5&offset=5", &p)
	toks := make([]int, len(rows))
	for i, r := range rows {
		toks[i] = int(r.NumTokens)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(toks)))
	for i, r := range p.Rows {
		if r.Tokens != toks[5+i] {
			t.Errorf("sorted page row %d has %d tokens, want %d", i, r.Tokens, toks[5+i])
		}
	}
	for _, bad := range []string{"converged=maybe", "turns_min=-1", "sort=name", "violations=lots", "bogus=1", "teachers=alpha"} {
		if code := get(t, h, "/api/rows?"+bad, nil); code != 400 {
			t.Errorf("%s: status %d, want 400", bad, code)
		}
	}
}

// TestDatasetDetailAndMask checks every row's trajectory page and loss mask against the
// Parquet row: turns, SQL and think of each assistant message, observations, and a mask whose
// tokens tile the rendered template with exactly num_tokens tokens, num_trainable_tokens of
// them marked, covering every assistant span.
func TestDatasetDetailAndMask(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	h := openServer(t, fx.tok, fx.dataset).Handler()
	kinds := map[string]int{}
	for id, row := range rows {
		var d Detail
		get(t, h, "/api/row?id="+itoa(id), &d)
		if d.Error != "" || d.Key != row.Key || len(d.Turns) != int(row.Turns) {
			t.Fatalf("row %d: %+v", id, d)
		}
		k := 0
		for _, m := range row.Messages {
			if m.Role != chat.RoleAssistant {
				continue
			}
			p := protocol.ParseReply(m.Content)
			think, sql, ok := p.Think, p.SQL, p.OK
			tv := d.Turns[k]
			if tv.SQL != sql || tv.FormatViolation == ok || tv.Reply != m.Content {
				t.Errorf("row %d turn %d: %+v, want sql %q", id, k, tv, sql)
			}
			// The row's message is the rendered training text: its think block is what the page
			// shows, with the source the row records.
			if think != "" && (tv.Think != think || tv.ThinkSource != row.ThinkSources[k]) {
				t.Errorf("row %d turn %d: think %q (%s), want %q (%s)", id, k, tv.Think, tv.ThinkSource, think, row.ThinkSources[k])
			}
			if row.Reasoning[k] != "" && row.ThinkSources[k] == curate.ThinkFromField && tv.Think != strings.TrimSpace(row.Reasoning[k]) {
				t.Errorf("row %d turn %d: field reasoning %q shown as %q (%s)", id, k, row.Reasoning[k], tv.Think, tv.ThinkSource)
			}
			if tv.Observation != nil {
				kinds[tv.Observation.Kind]++
			}
			k++
		}
		var mv MaskView
		get(t, h, "/api/mask?id="+itoa(id), &mv)
		if mv.Error != "" {
			t.Fatalf("row %d mask: %s", id, mv.Error)
		}
		if len(mv.Tokens) != int(row.NumTokens) || mv.Trainable != int(row.NumTrainableTokens) || !mv.HasStored {
			t.Errorf("row %d: mask %d tokens / %d trainable, row %d / %d", id, len(mv.Tokens), mv.Trainable, row.NumTokens, row.NumTrainableTokens)
		}
		text, spans := chattmpl.Render(row.Messages, false)
		if mv.Text != text {
			t.Fatalf("row %d: mask text is not the rendered template", id)
		}
		u := utf16.Encode([]rune(text))
		var joined, trained strings.Builder
		pos := 0
		for _, tk := range mv.Tokens {
			if tk[0] != pos || tk[1] < tk[0] {
				t.Fatalf("row %d: token %v after %d", id, tk, pos)
			}
			pos = tk[1]
			s := string(utf16.Decode(u[tk[0]:tk[1]]))
			joined.WriteString(s)
			if tk[2] >= 0 {
				trained.WriteString(s)
			}
		}
		if joined.String() != text {
			t.Errorf("row %d: tokens do not spell the text", id)
		}
		for _, sp := range spans {
			if !strings.Contains(trained.String(), text[sp.Start:sp.End]) {
				t.Errorf("row %d: span %q is not inside the trainable tokens", id, text[sp.Start:sp.End])
			}
		}
		sum := 0
		for _, tv := range d.Turns {
			sum += tv.Trainable
		}
		if sum != int(row.NumTrainableTokens) {
			t.Errorf("row %d: per-turn trainable tokens sum to %d, row has %d", id, sum, row.NumTrainableTokens)
		}
	}
	for _, k := range []string{"table", "error", "format"} {
		if kinds[k] == 0 {
			t.Errorf("no %q observation among the rows (%v)", k, kinds)
		}
	}
}

// TestDamagedRowShowsItsError corrupts the messages of one row group: the index (other
// columns) still builds, the rows of that group show the decode error, the others read.
func TestDamagedRowShowsItsError(t *testing.T) {
	fx := getFixture(t)
	dir, first := damagedCopy(t, fx.dataset)
	s := openServer(t, fx.tok, dir)
	h := s.Handler()
	var bad, good Detail
	get(t, h, "/api/row?id="+itoa(first), &bad)
	if bad.Error == "" || !strings.Contains(bad.Error, "row group 1") {
		t.Errorf("damaged row: error %q", bad.Error)
	}
	get(t, h, "/api/row?id=0", &good)
	if good.Error != "" || len(good.Turns) == 0 {
		t.Errorf("undamaged row: %+v", good)
	}
	var mv MaskView
	get(t, h, "/api/mask?id="+itoa(first), &mv)
	if mv.Error == "" {
		t.Error("mask of the damaged row has no error")
	}
}

// damagedCopy copies a dataset and overwrites the page header of row group 1's
// messages.content chunk; it returns the copy and the first row of that group.
func damagedCopy(t *testing.T, dataset string) (string, int) {
	t.Helper()
	return damageColumn(t, dataset, "messages.list.element.content")
}

// damageColumn copies a dataset and overwrites the first page header of row group 1's chunk
// of the leaf column at path (dot-joined); it returns the copy and the first row of the group.
func damageColumn(t *testing.T, dataset, path string) (string, int) {
	t.Helper()
	dir := copyDir(t, dataset)
	files, _ := filepath.Glob(filepath.Join(dir, curate.DataDir, "*.parquet"))
	f, err := os.OpenFile(files[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	md := pf.Metadata()
	if len(md.RowGroups) < 2 {
		t.Fatalf("fixture dataset has %d row groups, want several", len(md.RowGroups))
	}
	var col *format.ColumnMetaData
	var paths []string
	for i := range md.RowGroups[1].Columns {
		c := &md.RowGroups[1].Columns[i].MetaData
		paths = append(paths, strings.Join(c.PathInSchema, "."))
		if paths[i] == path {
			col = c
		}
	}
	if col == nil {
		t.Fatalf("no column %s among %v", path, paths)
	}
	junk := make([]byte, 24)
	for i := range junk {
		junk[i] = 0xA5
	}
	if _, err := f.WriteAt(junk, col.DataPageOffset); err != nil {
		t.Fatal(err)
	}
	return dir, int(md.RowGroups[0].NumRows)
}

// TestDamagedIndexColumn corrupts a column the index reads (question) in one row group: the
// viewer still opens, the rows of that group are listed with the error (only while nothing
// filters), their pages show it, and every other row is indexed as before.
func TestDamagedIndexColumn(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	dir, first := damageColumn(t, fx.dataset, "question")
	s := openServer(t, fx.tok, dir)
	if s.Rows() != len(rows) {
		t.Fatalf("%d rows indexed, want %d", s.Rows(), len(rows))
	}
	h := s.Handler()
	var p Page
	get(t, h, "/api/rows?limit=500", &p)
	bad := 0
	for _, r := range p.Rows {
		if r.Error != "" {
			bad++
			if r.ID < first || !strings.Contains(r.Error, "row group 1") {
				t.Errorf("row %d: error %q", r.ID, r.Error)
			}
		} else if r.Question != rows[r.ID].Question || r.Key != rows[r.ID].Key {
			t.Errorf("row %d: %q %q, want %q %q", r.ID, r.Key, r.Question, rows[r.ID].Key, rows[r.ID].Question)
		}
	}
	if bad == 0 {
		t.Error("no row of the damaged group is listed with its error")
	}
	var d Detail
	get(t, h, "/api/row?id="+itoa(first), &d)
	if d.Error == "" {
		t.Error("the damaged row's page has no error")
	}
	var f Page
	get(t, h, "/api/rows?limit=500&correct=1", &f)
	for _, r := range f.Rows {
		if r.Error != "" {
			t.Errorf("row %d with an error passes a filter", r.ID)
		}
	}
}

func TestDamagedParquetIsOneLine(t *testing.T) {
	fx := getFixture(t)
	dir := copyDir(t, fx.dataset)
	files, _ := filepath.Glob(filepath.Join(dir, curate.DataDir, "*.parquet"))
	data, _ := os.ReadFile(files[0])
	os.WriteFile(files[0], data[:len(data)/2], 0o644)
	_, err := Open(context.Background(), Options{Paths: []string{dir}})
	if err == nil || !strings.Contains(err.Error(), files[0]) || strings.Contains(err.Error(), "\n") {
		t.Errorf("truncated Parquet: %v", err)
	}
}

// TestRunDirLive runs distill into a fresh run dir while the viewer watches it: rows appear
// as trajectories are committed, and the viewer ends with every one of them.
func TestRunDirLive(t *testing.T) {
	fx := getFixture(t)
	dir := filepath.Join(t.TempDir(), "live")
	conn := &sandbox.Connector{SQLiteRoot: filepath.Join(fx.root, "db")}
	defer conn.Close()
	slow := chat.PolicyFunc(func(ctx context.Context, msgs []chat.Message, o chat.Options) (chat.Reply, error) {
		time.Sleep(15 * time.Millisecond)
		return chat.Reply{Content: "<think>t</think>\n<sql>SELECT 1</sql>", FinishReason: chat.FinishStop}, nil
	})
	run := func() error {
		_, err := distill.Run(context.Background(), distill.RunConfig{Dir: dir, Tasks: fx.tasks, TaskSpec: "sample",
			Dialects: []datasets.Dialect{datasets.SQLite}, Policies: []*episode.PolicyHandle{{Name: "slow", Policy: slow}},
			Episode: episode.EpisodeOptions{MaxTurns: 3}, Opener: conn, Toolkit: "test", Concurrency: 2})
		return err
	}
	// The first trajectories make it a run dir; the viewer opens it mid-run.
	done := make(chan error, 1)
	go func() { done <- run() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if ks, err := rundir.DoneKeys(dir); err == nil && len(ks) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("distill committed nothing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	s := openServer(t, nil, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Watch(ctx)
	firstSeen := s.Rows()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for s.Rows() < len(fx.tasks) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if firstSeen >= len(fx.tasks) || s.Rows() != len(fx.tasks) {
		t.Fatalf("rows: %d at open, %d at the end; want fewer, then %d", firstSeen, s.Rows(), len(fx.tasks))
	}
	var p Page
	get(t, s.Handler(), "/api/rows?limit=500", &p)
	keys := map[string]bool{}
	for _, r := range p.Rows {
		keys[r.Key] = true
	}
	if len(keys) != len(fx.tasks) {
		t.Errorf("%d distinct keys, want %d", len(keys), len(fx.tasks))
	}
	// A torn line after the journaled end (a writer killed mid-line) is not shown.
	shards, _ := rundir.ShardFiles(dir)
	fh, _ := os.OpenFile(filepath.Join(dir, rundir.ShardsDir, shards[0]), os.O_APPEND|os.O_WRONLY, 0)
	fh.WriteString(`{"key":"torn","question":"half`)
	fh.Close()
	if _, err := s.runs[0].refresh(context.Background()); err != nil || s.Rows() != len(fx.tasks) {
		t.Errorf("after a torn tail: %v, %d rows", err, s.Rows())
	}
}

// TestRunDetail checks a run dir's pages against its trajectories.
func TestRunDetail(t *testing.T) {
	fx := getFixture(t)
	s := openServer(t, fx.tok, fx.run)
	h := s.Handler()
	var trajs []*rundir.Trajectory
	if err := rundir.ReadRun(fx.run, func(t *rundir.Trajectory) error { trajs = append(trajs, t); return nil }); err != nil {
		t.Fatal(err)
	}
	if s.Rows() != len(trajs) {
		t.Fatalf("%d rows, run has %d", s.Rows(), len(trajs))
	}
	var p Page
	get(t, h, "/api/rows?truncated=1&limit=500", &p)
	want := 0
	for _, tr := range trajs {
		if tr.TruncatedTurns > 0 {
			want++
		}
	}
	if want == 0 || p.Total != want {
		t.Errorf("truncated rows: %d, want %d", p.Total, want)
	}
	for id, tr := range trajs {
		var d Detail
		get(t, h, "/api/row?id="+itoa(id), &d)
		if d.Key != tr.Key || len(d.Turns) != len(tr.Turns) {
			t.Fatalf("row %d: %s with %d turns, want %s with %d", id, d.Key, len(d.Turns), tr.Key, len(tr.Turns))
		}
		for k, tu := range tr.Turns {
			tv := d.Turns[k]
			if tv.Reply != tu.Content || tv.SQL != tu.SQL || tv.Observation == nil || tv.Observation.Text != strings.Trim(strings.TrimSuffix(strings.TrimPrefix(tu.Observation, "<observation>"), "</observation>"), "\n") {
				t.Errorf("row %d turn %d: %+v", id, k, tv)
			}
			if tv.CompletionTokens != tu.Usage.CompletionTokens {
				t.Errorf("row %d turn %d: completion tokens %d, want %d", id, k, tv.CompletionTokens, tu.Usage.CompletionTokens)
			}
		}
	}
	var st StatsPage
	get(t, h, "/api/stats", &st)
	if len(st.Sections) != 1 || len(st.Sections[0].Charts) != 5 || st.Sections[0].Error != "" {
		t.Fatalf("stats: %+v", st)
	}
	req := httptest.NewRequest("GET", st.Sections[0].Charts[0].URL, nil)
	req.Host = "localhost"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 200 || !strings.HasPrefix(w.Body.String(), "\x89PNG") {
		t.Errorf("chart: %d %q", w.Code, w.Body.String()[:min(40, w.Body.Len())])
	}
}

// TestCompare checks the compare view against results.jsonl of the two eval dirs.
func TestCompare(t *testing.T) {
	fx := getFixture(t)
	s := openServer(t, fx.tok, fx.evalStudent, fx.evalOracle)
	h := s.Handler()
	student, err := evaluate.ReadResults(fx.evalStudent)
	if err != nil {
		t.Fatal(err)
	}
	wrong := 0
	for _, r := range student {
		if !r.Correct {
			wrong++
		}
	}
	var p ComparePage
	get(t, h, "/api/compare?good=1&bad=0&limit=500", &p)
	if !reflect.DeepEqual(p.Policies, []string{"student", "oracle"}) || p.All != len(fx.tasks) {
		t.Fatalf("policies %v, %d tasks", p.Policies, p.All)
	}
	if wrong == 0 || p.Total != wrong {
		t.Errorf("oracle correct, student wrong: %d tasks, want %d", p.Total, wrong)
	}
	var differ ComparePage
	get(t, h, "/api/compare?differ=1&limit=500", &differ)
	if differ.Total != wrong {
		t.Errorf("differ: %d, want %d", differ.Total, wrong)
	}
	var tp TaskPage
	get(t, h, "/api/task?id="+url.QueryEscape(p.Rows[0].TaskID), &tp)
	if len(tp.Details) != 2 || tp.Details[0] == nil || tp.Details[1] == nil || tp.Details[0].Correct || !tp.Details[1].Correct {
		t.Fatalf("task page: %+v", tp)
	}
	if code := get(t, h, "/api/compare?good=7", nil); code != 400 {
		t.Errorf("good=7: %d", code)
	}
	var e map[string]string
	if code := get(t, h, "/api/task?id=nothing", &e); code != 404 || e["error"] != `no task "nothing" in these eval dirs` {
		t.Errorf("unknown task: %d %q", code, e["error"])
	}
	rh := openServer(t, nil, fx.run).Handler()
	for _, path := range []string{"/api/compare", "/api/task?id=x"} {
		if code := get(t, rh, path, &e); code != 404 || e["error"] != "the compare view needs eval dirs or a dataset, not this run dir" {
			t.Errorf("%s of a run dir: %d %q", path, code, e["error"])
		}
	}
	checkPaging(t, h, "/api/compare")
}

// checkPaging: offsets and limits from a URL, however large, give a page (empty past the end)
// or a 400, never a panic.
func checkPaging(t *testing.T, h http.Handler, path string) {
	t.Helper()
	for q, want := range map[string]int{
		"offset=9223372036854775807": 200, "offset=9223372036854775807&limit=9223372036854775807": 200,
		"offset=1&limit=9223372036854775807": 200, "offset=-5": 400, "limit=-1": 400, "offset=x": 400,
		"offset=99999999999999999999": 400,
	} {
		var page struct {
			Rows []json.RawMessage `json:"rows"`
		}
		code := get(t, h, path+"?"+q, &page)
		if code != want {
			t.Errorf("%s?%s: %d, want %d", path, q, code, want)
		}
		if code == 200 && strings.HasPrefix(q, "offset=922") && len(page.Rows) != 0 {
			t.Errorf("%s?%s: %d rows past the end", path, q, len(page.Rows))
		}
	}
}

// TestStatsNotCachedWhenCancelled: a stats page whose request went away mid-computation is not
// kept, so the next request gets the tables, not "context canceled" for good.
func TestStatsNotCachedWhenCancelled(t *testing.T) {
	fx := getFixture(t)
	s := openServer(t, nil, fx.dataset)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c := s.stats(ctx, "0"); c.section.Error == "" {
		t.Fatalf("stats under a cancelled context: no error (%d tables)", len(c.section.Tables))
	}
	if c := s.stats(context.Background(), "0"); c.section.Error != "" || len(c.section.Tables) == 0 {
		t.Errorf("stats after a cancelled request: error %q, %d tables", c.section.Error, len(c.section.Tables))
	}
	h := s.Handler()
	if code := get(t, h, "/api/chart?s=runs&name="+stats.TokensPlot, nil); code != 404 {
		t.Errorf("chart of section runs on a dataset: %d, want 404", code)
	}
}

func TestRowsPaging(t *testing.T) {
	fx := getFixture(t)
	checkPaging(t, openServer(t, nil, fx.dataset).Handler(), "/api/rows")
}

// TestHostCheck: behind its guard, as curate view serves it, the viewer answers loopback names
// with its port and refuses another Host, a request from another origin and a non-JSON body.
func TestHostCheck(t *testing.T) {
	fx := getFixture(t)
	g, err := httpguard.New(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, httpguard.Options{Name: "curate view"})
	if err != nil {
		t.Fatal(err)
	}
	h := g.Handler(openServer(t, nil, fx.dataset).Handler())
	for host, want := range map[string]int{"127.0.0.1:8080": 200, "localhost:8080": 200, "[::1]:8080": 200, "evil.example:8080": 403, "localhost:9999": 403} {
		req := httptest.NewRequest("GET", "/api/info", nil)
		req.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("Host %s: %d, want %d", host, w.Code, want)
		}
	}
	req := httptest.NewRequest("POST", "/api/info", strings.NewReader("{}"))
	req.Host = "localhost:8080"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 403 || !strings.Contains(w.Body.String(), "other origins") {
		t.Errorf("a cross-site POST: %d %s", w.Code, w.Body)
	}
	// The page itself is embedded.
	req = httptest.NewRequest("GET", "/", nil)
	req.Host = "localhost:8080"
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	body, _ := io.ReadAll(w.Body)
	if w.Code != 200 || !strings.Contains(string(body), "app.js") {
		t.Errorf("index: %d", w.Code)
	}
}

func TestParseObservation(t *testing.T) {
	cases := []struct {
		in   string
		kind string
		rows int
	}{
		{"<observation>\nname | n\nAnn | 3\nBob | NULL\n(2 rows)\n</observation>", "table", 2},
		{"<observation>\nn\n5\n(1 row)\n</observation>", "table", 1},
		{"<observation>\nid\n1\n2\n… 48 more rows (50 total)\n</observation>", "table", 2},
		{"<observation>\nEmpty result set\nColumns: a | b\n</observation>", "empty", 0},
		{"<observation>\nError: no such column: x\n</observation>", "error", 0},
		{"<observation>\n" + protocol.FormatViolationText + "\n</observation>", "format", 0},
		{"<observation>\na | b\nx | y | z\n(1 row)\n</observation>", "text", 0},
		{"free text", "text", 0},
	}
	for _, c := range cases {
		o := parseObservation(c.in)
		if o.Kind != c.kind || len(o.Rows) != c.rows {
			t.Errorf("%q: %s with %d rows, want %s with %d", c.in, o.Kind, len(o.Rows), c.kind, c.rows)
		}
	}
	if o := parseObservation("<observation>\nEmpty result set\nColumns: a | b\n</observation>"); !reflect.DeepEqual(o.Columns, []string{"a", "b"}) {
		t.Errorf("empty columns %v", o.Columns)
	}
}

// TestMaskViewUTF16 checks the byte→UTF-16 conversion on tokens that split a character.
func TestMaskViewUTF16(t *testing.T) {
	text := "a🤔é"
	// Bytes: a(0) 🤔(1..4) é(5..6). Tokens split the emoji and the é.
	m := &curate.Masked{Text: text, Tokens: []curate.MaskToken{tk(0, 1, -1), tk(1, 3, 0), tk(3, 5, 0), tk(5, 6, 0), tk(6, 7, -1)}, Trainable: 3}
	mv := maskView(m)
	want := [][3]int{{0, 1, -1}, {1, 3, 0}, {3, 3, 0}, {3, 4, 0}, {4, 4, -1}}
	if !reflect.DeepEqual(mv.Tokens, want) {
		t.Errorf("tokens %v, want %v", mv.Tokens, want)
	}
}

func tk(start, end, span int) curate.MaskToken {
	return curate.MaskToken{Start: start, End: end, Span: span}
}

func copyDir(tb testing.TB, src string) string {
	tb.Helper()
	dst := filepath.Join(tb.TempDir(), filepath.Base(src))
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		tb.Fatal(err)
	}
	return dst
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestFacetLumpsWhatItCannotNumber: past the ids a facet has, values share one named bucket
// instead of taking the name of the last value numbered.
func TestFacetLumpsWhatItCannotNumber(t *testing.T) {
	f := facet{ids: map[string]uint16{}}
	for i := 0; i < 1<<16-2; i++ {
		f.id(strconv.Itoa(i))
	}
	a, b := f.id("a"), f.id("b")
	if a != b || f.names[a] != lumpedValues || f.names[f.id("7")] != "7" || len(f.names) != 1<<16-1 {
		t.Errorf("ids %d %d named %q, %d names", a, b, f.names[a], len(f.names))
	}
}

// TestDatasetTruncatedFilter: a dataset's truncated filter is its truncated_turns column (the
// rows with a truncated turn, as curate counted them) and is offered; a dataset built before
// that column still opens, with the filter greyed out and no row marked.
func TestDatasetTruncatedFilter(t *testing.T) {
	fx := getFixture(t)
	s := openServer(t, fx.tok, fx.dataset)
	h := s.Handler()
	var info Info
	get(t, h, "/api/info", &info)
	want := 0
	for _, r := range readRows(t, fx.dataset) {
		if r.TruncatedTurns > 0 {
			want++
		}
	}
	var p Page
	get(t, h, "/api/rows?truncated=1&limit=500", &p)
	if !info.TruncKnown || want == 0 || p.Total != want {
		t.Errorf("trunc_known %v, %d truncated rows, want %d", info.TruncKnown, p.Total, want)
	}
	for _, r := range p.Rows {
		if !r.Truncated {
			t.Errorf("row %s listed as truncated without the mark", r.Key)
		}
	}
	get(t, h, "/api/rows?truncated=0&limit=500", &p)
	if p.Total != s.Rows()-want {
		t.Errorf("untruncated rows %d, want %d", p.Total, s.Rows()-want)
	}

	// A shard without the column (the schema before it, as an older curate wrote it).
	type oldRow struct {
		Teacher          string `parquet:"teacher,dict"`
		Dialect          string `parquet:"dialect,dict"`
		Question         string `parquet:"question"`
		Turns            int64  `parquet:"turns"`
		FormatViolations int64  `parquet:"format_violations"`
		Key              string `parquet:"key"`
	}
	old := t.TempDir()
	if err := os.Mkdir(filepath.Join(old, curate.DataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := parquet.WriteFile(filepath.Join(old, curate.DataDir, "train-00000.parquet"), []oldRow{
		{Teacher: "t", Dialect: "sqlite", Question: "q1", Turns: 2, Key: "k1"},
		{Teacher: "t", Dialect: "sqlite", Question: "q2", Turns: 3, FormatViolations: 1, Key: "k2"},
	}); err != nil {
		t.Fatal(err)
	}
	so := openServer(t, fx.tok, old)
	ho := so.Handler()
	get(t, ho, "/api/info", &info)
	get(t, ho, "/api/rows?limit=10", &p)
	if info.TruncKnown || so.Rows() != 2 || p.Total != 2 || p.Rows[0].Truncated || p.Rows[1].Truncated {
		t.Errorf("old dataset: trunc_known %v, rows %d, page %+v", info.TruncKnown, so.Rows(), p)
	}
}
