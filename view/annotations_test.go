package view

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// annotatedCopy copies the fixture dataset to a temporary dir, so that a test's annotations
// stay its own.
func annotatedCopy(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ds")
	if err := os.CopyFS(dir, os.DirFS(getFixture(t).dataset)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// post sends a JSON body to the server at base with Host host and extra headers, and returns
// the status and body.
func post(t *testing.T, base, path, host, ctype, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestAnnotations: notes and labels saved through the guarded server land in the sidecar
// file (one line per annotated row, keyed by the row's key), show on the row, filter the table
// with label counts, export as two more columns, survive a reopen; a stale revision is a 409; a
// foreign Host, another origin and a non-JSON body are refused before the handler.
func TestAnnotations(t *testing.T) {
	dir := annotatedCopy(t)
	rows := readRows(t, dir)
	s := openServer(t, nil, dir)
	ts := serveGuarded(t, s)
	h := s.Handler()
	save := func(id int, rev int, note string, labels ...string) (int, Annotation) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"id": id, "labels": labels, "note": note, "rev": rev})
		code, b := post(t, ts.URL, "/api/annotate", "", "application/json", string(body))
		var an Annotation
		if code == 200 {
			if err := json.Unmarshal(b, &an); err != nil {
				t.Fatalf("annotate answer %s: %v", b, err)
			}
		}
		return code, an
	}

	code, an := save(3, 0, "  looks right\n", " good ", "good", "hard", "")
	if code != 200 || an.Rev != 1 || an.Key != rows[3].Key || !slices.Equal(an.Labels, []string{"good", "hard"}) || an.Note != "  looks right\n" {
		t.Fatalf("first save: %d %+v", code, an)
	}
	if code, _ := save(3, 0, "other tab", "bad"); code != http.StatusConflict {
		t.Errorf("a save from revision 0 after revision 1: %d, want 409", code)
	}
	if code, _ := save(7, 0, "", "good"); code != 200 {
		t.Errorf("second row: %d", code)
	}
	if code, _ := save(9, 0, "a note only"); code != 200 {
		t.Errorf("note only: %d", code)
	}
	// The file: one line per annotated row, sorted by key.
	data, err := os.ReadFile(filepath.Join(dir, AnnotationsFile))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var a Annotation
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("sidecar line %q: %v", line, err)
		}
		keys = append(keys, a.Key)
	}
	want := []string{rows[3].Key, rows[7].Key, rows[9].Key}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("sidecar keys %q, want %q", keys, want)
	}

	var d Detail
	get(t, h, "/api/row?id=3", &d)
	if d.Annotation == nil || d.Annotation.Rev != 1 || d.Annotation.Note != "  looks right\n" {
		t.Errorf("row 3's annotation %+v", d.Annotation)
	}
	get(t, h, "/api/row?id=4", &d)
	if d.Annotation == nil || d.Annotation.Rev != 0 || d.Annotation.Key != rows[4].Key || len(d.Annotation.Labels) != 0 {
		t.Errorf("row 4's (empty) annotation %+v", d.Annotation)
	}
	var p Page
	get(t, h, "/api/rows?label=good", &p)
	if p.Total != 2 || len(p.Rows) != 2 || p.Rows[0].ID != 3 || p.Rows[1].ID != 7 {
		t.Errorf("label=good: %d rows %+v", p.Total, p.Rows)
	}
	if !slices.Equal(p.Rows[0].Labels, []string{"good", "hard"}) || !p.Rows[0].Noted || p.Rows[1].Noted {
		t.Errorf("label=good rows' annotations: %+v", p.Rows)
	}
	if fmt.Sprint(p.Labels) != "[{good 2} {hard 1}]" {
		t.Errorf("label counts %v", p.Labels)
	}
	get(t, h, "/api/rows?label=hard&label=good&teacher="+rows[7].Teacher, &p)
	if wantN := map[bool]int{true: 2, false: 1}[rows[3].Teacher == rows[7].Teacher]; p.Total != wantN {
		t.Errorf("label=hard|good and teacher %s: %d rows, want %d", rows[7].Teacher, p.Total, wantN)
	}
	var charts ChartsPage
	get(t, h, "/api/charts?label=good", &charts)
	if charts.Total != 2 {
		t.Errorf("charts of label=good: %d rows", charts.Total)
	}
	get(t, h, "/api/rows?label=nothing", &p)
	if p.Total != 0 {
		t.Errorf("label=nothing: %d rows", p.Total)
	}
	// Rows 3 and 9 have a note, 3 and 7 labels.
	ids := func(query string) string {
		t.Helper()
		get(t, h, "/api/rows?limit=500&"+query, &p)
		var out []string
		for _, r := range p.Rows {
			out = append(out, fmt.Sprint(r.ID))
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct{ query, want string }{
		{"noted=1", "3,9"}, {"labelled=1", "3,7"}, {"noted=1&labelled=0", "9"}, {"noted=0&labelled=1", "7"},
		{"noted=1&label=good", "3"}, {"label=good&labelled=0", ""},
	} {
		if got := ids(c.query); got != c.want {
			t.Errorf("%s: rows %s, want %s", c.query, got, c.want)
		}
	}
	if got := ids("labelled=0"); p.Total != len(rows)-2 || strings.Contains(","+got+",", ",3,") || strings.Contains(","+got+",", ",7,") {
		t.Errorf("labelled=0: %d rows (%s), want the %d without a label", p.Total, got, len(rows)-2)
	}
	// The label counts keep the note filter: of the noted rows, only 3 has labels.
	if ids("noted=1"); fmt.Sprint(p.Labels) != "[{good 1} {hard 1}]" {
		t.Errorf("label counts of noted=1: %v", p.Labels)
	}
	if _, err := ParseQuery(url.Values{"noted": {"maybe"}}); err == nil || !strings.Contains(err.Error(), "noted") {
		t.Errorf("noted=maybe: %v", err)
	}

	// The export has the two columns, in JSONL and in Parquet.
	req, _ := http.NewRequest("GET", ts.URL+"/api/export?format=jsonl&label=good", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got []AnnotatedRow
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		var r AnnotatedRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[0].Key != rows[3].Key || !slices.Equal(got[0].Labels, []string{"good", "hard"}) || got[0].Note != "  looks right\n" ||
		got[1].Key != rows[7].Key || got[1].Note != "" || len(got[0].Messages) != len(rows[3].Messages) {
		t.Errorf("JSONL export of label=good: %d rows %+v", len(got), got)
	}
	resp, err = http.Get(ts.URL + "/api/export?format=parquet")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	f, err := parquet.OpenFile(bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	if !parquet.SameNodes(f.Schema(), parquet.SchemaOf(AnnotatedRow{})) {
		t.Errorf("annotated Parquet schema %v", f.Schema())
	}
	pr := parquet.NewGenericReader[AnnotatedRow](bytes.NewReader(body))
	all := make([]AnnotatedRow, pr.NumRows())
	if n, err := pr.Read(all); n != len(rows) || (err != nil && err != io.EOF) {
		t.Fatalf("annotated Parquet: %d of %d rows, %v", n, len(rows), err)
	}
	pr.Close()
	for i, r := range all {
		wantLabels, _ := map[int][]string{3: {"good", "hard"}, 7: {"good"}}[i]
		wantNote := map[int]string{3: "  looks right\n", 9: "a note only"}[i]
		if r.Key != rows[i].Key || !slices.Equal(r.Labels, wantLabels) && len(r.Labels)+len(wantLabels) > 0 || r.Note != wantNote {
			t.Errorf("Parquet row %d: %s %q %q", i, r.Key, r.Labels, r.Note)
		}
	}

	// Clearing a row's labels and note takes its line out; a reopened server reads the rest.
	if code, an := save(7, 1, "   "); code != 200 || an.Rev != 0 {
		t.Errorf("clearing row 7: %d %+v", code, an)
	}
	s2 := openServer(t, nil, dir)
	get(t, s2.Handler(), "/api/rows?label=good", &p)
	if p.Total != 1 || p.Rows[0].ID != 3 {
		t.Errorf("reopened, label=good: %d rows", p.Total)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, AnnotationsFile)); strings.Count(string(data), "\n") != 2 {
		t.Errorf("sidecar after clearing row 7:\n%s", data)
	}
	if code, an := save(7, 0, "", "again"); code != 200 || an.Rev != 1 {
		t.Errorf("a save after clearing row 7: %d %+v", code, an)
	}
	if code, _ := save(7, 1, ""); code != 200 {
		t.Errorf("clearing row 7 again: %d", code)
	}

	// The guard, as curate view runs it, and bad bodies.
	for _, c := range []struct {
		name, host, ctype, body string
		hdr                     []string
		want                    int
	}{
		{"foreign Host", "evil.example", "application/json", `{"id":1,"labels":["x"]}`, nil, 403},
		{"other origin", "", "application/json", `{"id":1,"labels":["x"]}`, []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example"}, 403},
		{"text/plain", "", "text/plain", `{"id":1,"labels":["x"]}`, nil, 415},
		{"no id", "", "application/json", `{"labels":["x"]}`, nil, 400},
		{"unknown field", "", "application/json", `{"id":1,"label":"x"}`, nil, 400},
		{"no such row", "", "application/json", `{"id":100000,"labels":["x"]}`, nil, 404},
		{"control character", "", "application/json", `{"id":1,"labels":["a\u0007"]}`, nil, 400},
		{"too many labels", "", "application/json", `{"id":1,"labels":[` + labelsJSON(MaxLabels+1) + `]}`, nil, 400},
	} {
		if code, b := post(t, ts.URL, "/api/annotate", c.host, c.ctype, c.body, c.hdr...); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, b, c.want)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(dir, AnnotationsFile)); strings.Contains(string(data), `"x"`) {
		t.Errorf("a refused save was written:\n%s", data)
	}

	// A run dir takes none.
	rs := openServer(t, nil, getFixture(t).run)
	rts := serveGuarded(t, rs)
	if code, b := post(t, rts.URL, "/api/annotate", "", "application/json", `{"id":0,"labels":["x"]}`); code != 400 || !strings.Contains(string(b), "curate build") {
		t.Errorf("run dir: %d %s", code, b)
	}
}

func labelsJSON(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf("%q", fmt.Sprint("l", i)))
	}
	return strings.Join(parts, ",")
}

// TestAnnotationsConcurrent: saves from many goroutines (tabs) on different rows all land, and
// of the saves on one row from the same revision exactly one wins; the file stays whole.
func TestAnnotationsConcurrent(t *testing.T) {
	dir := annotatedCopy(t)
	s := openServer(t, nil, dir)
	ts := serveGuarded(t, s)
	const tabs, saves = 6, 8
	var wg sync.WaitGroup
	wins := make([]int, saves)
	var mu sync.Mutex
	for tab := range tabs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rev := 0
			for k := range saves {
				// Own row: every save lands.
				body := fmt.Sprintf(`{"id":%d,"labels":["tab%d"],"note":"save %d","rev":%d}`, 10+tab, tab, k, rev)
				if code, b := post(t, ts.URL, "/api/annotate", "", "application/json", body); code != 200 {
					t.Errorf("tab %d save %d: %d %s", tab, k, code, b)
					return
				} else {
					var an Annotation
					json.Unmarshal(b, &an)
					rev = an.Rev
				}
				// Shared row 1, from revision k: one tab wins each round at most.
				body = fmt.Sprintf(`{"id":1,"labels":["shared"],"note":"tab %d","rev":%d}`, tab, k)
				if code, _ := post(t, ts.URL, "/api/annotate", "", "application/json", body); code == 200 {
					mu.Lock()
					wins[k]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	a, err := loadAnnotations(dir)
	if err != nil {
		t.Fatalf("sidecar after concurrent saves: %v", err)
	}
	rows, _ := a.snapshot()
	for tab := range tabs {
		var d Detail
		get(t, s.Handler(), fmt.Sprintf("/api/row?id=%d", 10+tab), &d)
		if an := rows[d.Key]; an.Rev != saves || an.Note != fmt.Sprint("save ", saves-1) {
			t.Errorf("tab %d's row: %+v", tab, an)
		}
	}
	total := 0
	for k, n := range wins {
		if n > 1 {
			t.Errorf("round %d: %d saves from the same revision won", k, n)
		}
		total += n
	}
	var d Detail
	get(t, s.Handler(), "/api/row?id=1", &d)
	if d.Annotation.Rev != total || total == 0 {
		t.Errorf("shared row at revision %d after %d winning saves", d.Annotation.Rev, total)
	}
}

// TestAnnotationsBadFile: a damaged sidecar file stops Open with its name and line.
func TestAnnotationsBadFile(t *testing.T) {
	dir := annotatedCopy(t)
	for content, want := range map[string]string{
		"{\"key\":\"a\",\"labels\":[],\"note\":\"x\",\"rev\":1}\nnot json\n": AnnotationsFile + ":2",
		"{\"key\":\"a\",\"rev\":1}\n{\"key\":\"a\",\"rev\":2}\n":             "twice",
		"{\"labels\":[\"x\"]}\n": "no key",
	} {
		os.WriteFile(filepath.Join(dir, AnnotationsFile), []byte(content), 0o644)
		if s, err := Open(t.Context(), Options{Paths: []string{dir}, NoFullText: true}); err == nil || !strings.Contains(err.Error(), want) {
			if s != nil {
				s.Close()
			}
			t.Errorf("sidecar %q: %v, want an error with %q", content, err, want)
		}
	}
}
