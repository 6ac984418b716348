package view

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/rundir"
)

// fieldTexts is the reference split of a dataset row's text into the full-text fields, by
// regular expressions over the stored messages rather than the protocol parser: reasoning is
// each assistant message without its <sql> blocks and think tags, plus the reasoning column;
// sql the <sql> blocks and the final SQL; observation the user messages after the question.
func fieldTexts(r *curate.Row) map[string]string {
	sqlRE := regexp.MustCompile(`(?s)<sql>(.*?)</sql>`)
	out := map[string]string{}
	add := func(f, s string) { out[f] += "\n" + s }
	for i, m := range r.Messages {
		switch {
		case m.Role == chat.RoleAssistant:
			for _, sm := range sqlRE.FindAllStringSubmatch(m.Content, -1) {
				add("sql", sm[1])
			}
			add("reasoning", strings.NewReplacer("<think>", " ", "</think>", " ").Replace(sqlRE.ReplaceAllString(m.Content, " ")))
		case m.Role == chat.RoleUser && i > 1:
			add("observation", m.Content)
		}
	}
	for _, s := range r.Reasoning {
		add("reasoning", s)
	}
	add("sql", r.FinalSQL)
	return out
}

// holdsWords reports whether every word of query begins a word of text, ignoring case.
func holdsWords(text, query string) bool {
	for _, w := range strings.FieldsFunc(query, func(r rune) bool { return !isWordRune(r) }) {
		if !regexp.MustCompile(`(?i)(^|[^\p{L}\p{N}_])` + regexp.QuoteMeta(w)).MatchString(text) {
			return false
		}
	}
	return true
}

// TestFullTextSearch checks /api/rows?text= over every field of the fixture dataset against
// the rows read back and matched by regular expression, and the 503 and 400 answers.
func TestFullTextSearch(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	s := openServer(t, fx.tok, fx.dataset)
	if err := s.WaitSearch(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	var info Info
	get(t, h, "/api/info", &info)
	if !info.Search.Ready || info.Search.Rows != len(rows) {
		t.Errorf("info search %+v, want ready over %d rows", info.Search, len(rows))
	}
	texts := make([]map[string]string, len(rows))
	for i := range rows {
		texts[i] = fieldTexts(&rows[i])
	}
	for _, c := range []struct{ text, in string }{
		{"column", ""}, {"column", "reasoning"}, {"column", "observation"}, {"no_such", "sql"}, {"no_such", "observation"},
		{"caf", "reasoning"}, {"CAFÉ naïve", "reasoning"}, {"schema", "reasoning"}, {"field reasoning", "reasoning"},
		{"select", "sql"}, {"select", "observation,sql"}, {`"such column"`, ""}, {"guess", "sql"}, {"zzzz", ""},
	} {
		want := 0
		for i := range rows {
			fields := strings.Split(c.in, ",")
			if c.in == "" {
				fields = fieldNames[:]
			}
			text := ""
			for _, f := range fields {
				text += texts[i][f]
			}
			if holdsWords(text, c.text) {
				want++
			}
		}
		var p Page
		q := url.Values{"text": {c.text}, "in": {c.in}, "limit": {"500"}}
		if code := get(t, h, "/api/rows?"+q.Encode(), &p); code != 200 || p.Total != want {
			t.Errorf("text=%q in=%q: %d, %d rows; want %d", c.text, c.in, code, p.Total, want)
		}
		if c.text == "column" && c.in == "" && want == 0 {
			t.Error("the fixture has no row with the word column: the test checks nothing")
		}
	}
	// Combined with the other filters.
	var p Page
	get(t, h, "/api/rows?text=column&teacher=oracle", &p)
	for _, r := range p.Rows {
		if r.Teacher != "oracle" {
			t.Errorf("row %d of teacher %s under teacher=oracle", r.ID, r.Teacher)
		}
	}
	if code := get(t, h, "/api/rows?text=x&in=prompt", &p); code != 400 {
		t.Errorf("in=prompt: %d, want 400", code)
	}

	// While the index is still being built a full-text query is refused with 503, other
	// queries are answered.
	ns := &Server{kind: KindDataset, ix: s.ix, text: newTextIndex(), statsCache: map[string]*cachedStats{}}
	ns.text.total = 10
	nh := ns.Handler()
	var e map[string]string
	if code := get(t, nh, "/api/rows?text=column", &e); code != 503 || !strings.Contains(e["error"], "still being built") {
		t.Errorf("before the index is ready: %d %v", code, e)
	}
	if code := get(t, nh, "/api/rows?q=column", &p); code != 200 {
		t.Errorf("plain search before the full-text index is ready: %d", code)
	}
}

// TestFullTextSearchRun: a run dir's trajectories are searchable as they are read.
func TestFullTextSearchRun(t *testing.T) {
	fx := getFixture(t)
	var trajs []*rundir.Trajectory
	if err := rundir.ReadRun(fx.run, func(t *rundir.Trajectory) error { trajs = append(trajs, t); return nil }); err != nil {
		t.Fatal(err)
	}
	s := openServer(t, nil, fx.run)
	h := s.Handler()
	for _, c := range []struct{ text, in string }{{"schema", "reasoning"}, {"such", "observation"}} {
		want := 0
		for _, tr := range trajs {
			text := ""
			for _, tu := range tr.Turns {
				if c.in == "reasoning" {
					text += "\n" + tu.Reasoning + "\n" + tu.Content
				} else {
					text += "\n" + tu.Observation
				}
			}
			if holdsWords(text, c.text) {
				want++
			}
		}
		var p Page
		if get(t, h, "/api/rows?text="+c.text+"&in="+c.in, &p); p.Total != want || want == 0 {
			t.Errorf("run dir, text=%s in=%s: %d rows, want %d (> 0)", c.text, c.in, p.Total, want)
		}
	}
}

// TestSortEveryColumn sorts by each column both ways and compares with the rows sorted here.
func TestSortEveryColumn(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	h := openServer(t, fx.tok, fx.dataset).Handler()
	b2i := func(b bool) int64 {
		if b {
			return 1
		}
		return 0
	}
	keys := map[string]func(i int) any{
		"id": func(i int) any { return int64(i) }, "key": func(i int) any { return rows[i].Key },
		"task_id": func(i int) any { return rows[i].TaskID }, "question": func(i int) any { return rows[i].Question },
		"teacher": func(i int) any { return rows[i].Teacher }, "dialect": func(i int) any { return rows[i].Dialect },
		"difficulty": func(i int) any { return rows[i].Difficulty }, "db_id": func(i int) any { return rows[i].DBID },
		"turns": func(i int) any { return rows[i].Turns }, "converged": func(i int) any { return b2i(rows[i].Converged) },
		"exec_ok": func(i int) any { return b2i(rows[i].ExecOK) }, "correct": func(i int) any { return b2i(rows[i].Correct) },
		"truncated": func(i int) any { return b2i(rows[i].TruncatedTurns > 0) }, "format_violations": func(i int) any { return rows[i].FormatViolations },
		"tokens": func(i int) any { return rows[i].NumTokens }, "trainable": func(i int) any { return rows[i].NumTrainableTokens },
	}
	if len(keys) != len(sortKeys) {
		t.Errorf("the test knows %d columns, the index sorts by %d", len(keys), len(sortKeys))
	}
	compare := func(a, b any) int {
		if x, ok := a.(int64); ok {
			return cmp.Compare(x, b.(int64))
		}
		return cmp.Compare(a.(string), b.(string))
	}
	for col, key := range keys {
		for _, sign := range []int{1, -1} {
			want := make([]int, len(rows))
			for i := range want {
				want[i] = i
			}
			slices.SortStableFunc(want, func(a, b int) int { return sign * compare(key(a), key(b)) })
			sort := col
			if sign < 0 {
				sort = "-" + col
			}
			var p Page
			if code := get(t, h, "/api/rows?limit=500&sort="+sort, &p); code != 200 {
				t.Fatalf("sort=%s: %d", sort, code)
			}
			var got []int
			for _, r := range p.Rows {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("sort=%s: %v, want %v", sort, got[:min(10, len(got))], want[:min(10, len(want))])
			}
		}
	}
}

// TestExport exports filters as Parquet and JSONL through /api/export and compares what comes
// back with the rows read through curate's reader, field by field; DuckDB reads the Parquet
// file when CHAINEDSQL_NODE_MODULES holds the npm package @duckdb/node-api.
func TestExport(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	s := openServer(t, fx.tok, fx.dataset)
	h := s.Handler()
	texts := make([]map[string]string, len(rows))
	for i := range rows {
		texts[i] = fieldTexts(&rows[i])
	}
	for _, c := range []struct {
		query string
		keep  func(i int) bool
	}{
		{"", func(int) bool { return true }},
		{"teacher=alpha&correct=0&sort=-tokens&limit=3", func(i int) bool { return rows[i].Teacher == "alpha" && !rows[i].Correct }},
		{"text=column&in=observation", func(i int) bool { return holdsWords(texts[i]["observation"], "column") }},
		{"violations=some&q=count", func(i int) bool {
			return rows[i].FormatViolations > 0 && strings.Contains(strings.ToLower(rows[i].Question+"\x00"+rows[i].FinalSQL+"\x00"+rows[i].GoldSQL+"\x00"+rows[i].DBID+"\x00"+rows[i].Key), "count")
		}},
	} {
		var want []curate.Row
		for i := range rows {
			if c.keep(i) {
				want = append(want, rows[i])
			}
		}
		for _, format := range []string{FormatParquet, FormatJSONL} {
			req := httptest.NewRequest("GET", "/api/export?format="+format+"&"+c.query, nil)
			req.Host = "127.0.0.1:8080"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != 200 || !strings.Contains(w.Header().Get("Content-Disposition"), "attachment") {
				t.Fatalf("export %s %q: %d %s", format, c.query, w.Code, w.Header())
			}
			var got []curate.Row
			if format == FormatParquet {
				got = readParquet(t, w.Body.Bytes())
			} else {
				sc := bufio.NewScanner(w.Body)
				sc.Buffer(nil, 1<<26)
				for sc.Scan() {
					var r curate.Row
					if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
						t.Fatalf("JSONL line: %v", err)
					}
					got = append(got, r)
				}
			}
			if len(got) != len(want) {
				t.Errorf("export %s %q: %d rows, want %d", format, c.query, len(got), len(want))
				continue
			}
			for i := range got {
				if !reflect.DeepEqual(normal(got[i]), normal(want[i])) {
					t.Errorf("export %s %q: row %d (%s) differs from the dataset's", format, c.query, i, want[i].Key)
					break
				}
			}
			if format == FormatParquet && c.query == "" {
				duckCount(t, w.Body.Bytes(), want)
			}
		}
	}
	for q, code := range map[string]int{"format=csv": 400, "": 400, "format=jsonl&sort=nothing": 400, "format=jsonl&teachers=alpha": 400, "format=jsonl&teacher=alpha": 200} {
		if got := get(t, h, "/api/export?"+q, nil); got != code {
			t.Errorf("export?%s: %d, want %d", q, got, code)
		}
	}
	rs := openServer(t, nil, fx.run)
	if got := get(t, rs.Handler(), "/api/export?format=jsonl", nil); got != 400 {
		t.Errorf("export of a run dir: %d, want 400", got)
	}
}

// normal makes nil and empty slices equal (JSON and Parquet give either for an empty list).
func normal(r curate.Row) curate.Row {
	if len(r.Messages) == 0 {
		r.Messages = nil
	}
	if len(r.Reasoning) == 0 {
		r.Reasoning = nil
	}
	if len(r.ThinkSources) == 0 {
		r.ThinkSources = nil
	}
	return r
}

func readParquet(t *testing.T, b []byte) []curate.Row {
	t.Helper()
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("exported Parquet: %v", err)
	}
	if !parquet.SameNodes(f.Schema(), parquet.SchemaOf(curate.Row{})) {
		t.Errorf("exported schema %v, want curate.Row's", f.Schema())
	}
	r := parquet.NewGenericReader[curate.Row](bytes.NewReader(b))
	defer r.Close()
	out := make([]curate.Row, r.NumRows())
	if n, err := r.Read(out); n != len(out) || (err != nil && err != io.EOF) {
		t.Fatalf("read exported Parquet: %d of %d rows, %v", n, len(out), err)
	}
	return out
}

// duckCount has DuckDB read a Parquet file: its row count, distinct keys and messages
// must be those of want.
func duckCount(t *testing.T, b []byte, want []curate.Row) {
	t.Helper()
	if os.Getenv(testbin.NodeModulesEnv) == "" {
		t.Logf("DuckDB check skipped: set %s to a node_modules folder with @duckdb/node-api", testbin.NodeModulesEnv)
		return
	}
	p := filepath.Join(t.TempDir(), "export.parquet")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	msgs := 0
	for _, r := range want {
		msgs += len(r.Messages)
	}
	got, _ := testbin.DuckDB(t, fmt.Sprintf("select count(*) as n, count(distinct key) as k, sum(len(messages)) as m from read_parquet('%s')", p))
	if exp := fmt.Sprintf(`[{"n":"%d","k":"%d","m":"%d"}]`, len(want), len(want), msgs); got != exp {
		t.Errorf("DuckDB reads %s, want %s", got, exp)
	}
	t.Logf("DuckDB: %s", got)
}
