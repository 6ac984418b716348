package datasets

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		in         string
		kind, path string
	}{
		{"sample", SpecSample, ""},
		{" Sample ", SpecSample, ""},
		{"bird:/data/bird/dev.json", SpecBIRD, "/data/bird/dev.json"},
		{"minidev:../MINIDEV", SpecMiniDev, "../MINIDEV"},
		{"spider:C:/spider/dev.json", SpecSpider, "C:/spider/dev.json"},
	} {
		s, err := ParseSpec(c.in)
		if err != nil || s.Kind != c.kind || s.Path != c.path {
			t.Errorf("ParseSpec(%q) = %+v, %v", c.in, s, err)
		}
		if err == nil && s.String() != strings.TrimSpace(strings.Replace(c.in, "Sample", "sample", 1)) {
			t.Errorf("String() = %q", s.String())
		}
	}
	for _, bad := range []string{"", "bird", "bird:", "spider: ", "sample:x", "wikisql:/x", "BIRDS:/x"} {
		_, err := ParseSpec(bad)
		if err == nil {
			t.Errorf("ParseSpec(%q): no error", bad)
			continue
		}
		if !strings.Contains(err.Error(), "bird:PATH") || !strings.Contains(err.Error(), "spider:PATH") {
			t.Errorf("ParseSpec(%q): error does not list the valid forms: %v", bad, err)
		}
	}
	if _, err := LoadTasks("wikisql:/x", ""); err == nil || !strings.Contains(err.Error(), `unknown task spec "wikisql:/x"`) {
		t.Errorf("LoadTasks unknown spec: %v", err)
	}
}

// rawBIRD decodes a BIRD file independently of the loader.
func rawBIRD(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestLoadBIRDDev(t *testing.T) {
	path := shared.Path(t, "data/bird/dev.json")
	tasks, err := LoadTasks("bird:"+path, "")
	if err != nil {
		t.Fatal(err)
	}
	raw := rawBIRD(t, path)
	if len(tasks) != len(raw) || len(tasks) != 1534 {
		t.Fatalf("%d tasks, file has %d records", len(tasks), len(raw))
	}
	dir := filepath.Dir(path)
	buckets := map[string]int{}
	for i, task := range tasks {
		r := raw[i]
		want := Task{
			ID: fmt.Sprintf("bird-dev/%v", r["question_id"]), Index: i, DBID: r["db_id"].(string),
			Question: r["question"].(string), Evidence: r["evidence"].(string), Difficulty: r["difficulty"].(string),
			Source: "bird", DBPath: filepath.Join(dir, "dev_databases", r["db_id"].(string), r["db_id"].(string)+".sqlite"),
		}
		gold := task.Gold
		task.Gold = nil
		if fmt.Sprint(task) != fmt.Sprint(want) || len(gold) != 1 || gold[SQLite] != r["SQL"] {
			t.Fatalf("record %d:\n got %+v %v\nwant %+v %v", i, task, gold, want, r["SQL"])
		}
		buckets[task.Difficulty]++
	}
	if tasks[0].ID != "bird-dev/0" || len(buckets) != 3 || buckets[Simple] == 0 || buckets[Moderate] == 0 || buckets[Challenging] == 0 {
		t.Fatalf("first id %s, buckets %v", tasks[0].ID, buckets)
	}
	// A folder means its dev.json; a db root moves the databases; a missing database does not
	// stop loading, opening it fails with the path.
	root := t.TempDir()
	tasks2, err := LoadTasks("bird:"+dir, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks2) != len(tasks) || tasks2[5].DBPath != filepath.Join(root, tasks[5].DBID, tasks[5].DBID+".sqlite") {
		t.Fatalf("db root: %s", tasks2[5].DBPath)
	}
}

// writeJSON writes v as JSON to dir/name and returns the path.
func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadBIRDTrain(t *testing.T) {
	dir := t.TempDir()
	p := writeJSON(t, dir, "train.json", []map[string]any{
		{"db_id": "movie_platform", "question": "How many movies?", "evidence": "", "SQL": "SELECT COUNT(*) FROM movies"},
		{"db_id": "movie_platform", "question": "Name one.", "SQL": "SELECT movie_title FROM movies LIMIT 1"},
	})
	tasks, err := LoadTasks("bird:"+p, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 || tasks[1].ID != "bird-train/1" || tasks[1].Index != 1 || tasks[1].Difficulty != "" || tasks[1].Evidence != "" ||
		tasks[0].DBPath != filepath.Join(dir, "train_databases", "movie_platform", "movie_platform.sqlite") {
		t.Fatalf("%+v", tasks)
	}
}

func TestLoadErrorsNameFileAndRecord(t *testing.T) {
	dir := t.TempDir()
	good := map[string]any{"question_id": 0, "db_id": "db", "question": "q", "evidence": "", "SQL": "SELECT 1", "difficulty": "simple"}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for a, b := range good {
			m[a] = b
		}
		m["question_id"] = 1
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		name string
		rec  any
		want string
	}{
		{"missing SQL", with("SQL", nil), `dev.json: record 1: missing "SQL"`},
		{"empty question", with("question", " "), `dev.json: record 1: empty "question"`},
		{"missing db_id", with("db_id", nil), `dev.json: record 1: missing "db_id"`},
		{"numeric SQL", with("SQL", 7), `dev.json: record 1: field "SQL": want string, got JSON number`},
		{"bad difficulty", with("difficulty", "hard"), `dev.json: record 1: difficulty "hard"`},
		{"duplicate id", with("question_id", 0), `dev.json: record 1: question_id 0 repeats record 0`},
		{"path db_id", with("db_id", "../etc"), `dev.json: record 1: db_id "../etc" is not a plain name`},
		{"not an object", "SELECT 1", `dev.json: record 1:`},
	} {
		p := writeJSON(t, dir, "dev.json", []any{good, c.rec})
		_, err := LoadTasks("bird:"+p, "")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v, want it to contain %q and the path", c.name, err, c.want)
		}
	}
	p := filepath.Join(dir, "dev.json")
	os.WriteFile(p, []byte(`{"db_id": "x"}`), 0o644)
	if _, err := LoadTasks("bird:"+p, ""); err == nil || !strings.Contains(err.Error(), "JSON array") {
		t.Errorf("object file: %v", err)
	}
	if _, err := LoadTasks("bird:"+filepath.Join(dir, "nope.json"), ""); err == nil || !strings.Contains(err.Error(), "nope.json") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := LoadTasks("bird:"+t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "has no dev.json") {
		t.Errorf("empty folder: %v", err)
	}
}

func TestLoadMiniDev(t *testing.T) {
	path := shared.Path(t, "data/bird/mini_dev_sqlite.json")
	for _, spec := range []string{"minidev:" + path, "minidev:" + filepath.Dir(path)} {
		tasks, err := LoadTasks(spec, "")
		if err != nil {
			t.Fatal(err)
		}
		raw := rawBIRD(t, path)
		if len(tasks) != len(raw) {
			t.Fatalf("%d tasks, %d records", len(tasks), len(raw))
		}
		for i, task := range tasks {
			r := raw[i]
			if task.ID != fmt.Sprintf("minidev/%v", r["question_id"]) || task.Index != i || task.Source != "minidev" ||
				task.Difficulty != r["difficulty"] || task.Gold[SQLite] != r["SQL"] || len(task.Gold) != 1 ||
				task.DBPath != filepath.Join(filepath.Dir(path), "dev_databases", task.DBID, task.DBID+".sqlite") {
				t.Fatalf("%s: record %d: %+v", spec, i, task)
			}
		}
	}

	// A folder with the three dialect files: gold from each, matched by question_id.
	dir := t.TempDir()
	recs := rawBIRD(t, path)[:20]
	writeJSON(t, dir, "mini_dev_sqlite.json", recs)
	var pg, my []map[string]any
	for i := len(recs) - 1; i >= 0; i-- { // another order than the sqlite file
		r := recs[i]
		p, m := map[string]any{}, map[string]any{}
		for k, v := range r {
			p[k], m[k] = v, v
		}
		p["SQL"] = "/* pg */ " + r["SQL"].(string)
		m["SQL"] = "/* my */ " + r["SQL"].(string)
		pg = append(pg, p)
		if i%2 == 0 {
			my = append(my, m) // mysql gold for half of them
		}
	}
	writeJSON(t, dir, "mini_dev_postgresql.json", pg)
	writeJSON(t, dir, "mini_dev_mysql.json", my)
	tasks, err := LoadTasks("minidev:"+dir, "/dbs")
	if err != nil {
		t.Fatal(err)
	}
	for i, task := range tasks {
		if task.Gold[SQLite] != recs[i]["SQL"] || task.Gold[Postgres] != "/* pg */ "+recs[i]["SQL"].(string) ||
			(i%2 == 0) != (task.Gold[MySQL] != "") || task.DBPath != filepath.Join("/dbs", task.DBID, task.DBID+".sqlite") {
			t.Fatalf("task %d: %+v", i, task)
		}
	}
	// Naming the PostgreSQL file makes it the primary: its order, its tasks.
	tasks, err = LoadTasks("minidev:"+filepath.Join(dir, "mini_dev_postgresql.json"), "")
	if err != nil {
		t.Fatal(err)
	}
	if tasks[0].ID != fmt.Sprintf("minidev/%v", recs[19]["question_id"]) || tasks[0].Gold[SQLite] != recs[19]["SQL"] {
		t.Fatalf("pg primary: %+v", tasks[0])
	}
	// Disagreeing files are refused with the file, record and question_id.
	my[0]["db_id"] = "other_db"
	mf := writeJSON(t, dir, "mini_dev_mysql.json", my)
	if _, err := LoadTasks("minidev:"+dir, ""); err == nil || !strings.Contains(err.Error(), mf+": record 0: question_id") {
		t.Fatalf("db_id mismatch: %v", err)
	}
	writeJSON(t, dir, "mini_dev_mysql.json", []map[string]any{{"question_id": 99999, "db_id": "x", "question": "q", "SQL": "SELECT 1"}})
	if _, err := LoadTasks("minidev:"+dir, ""); err == nil || !strings.Contains(err.Error(), "question_id 99999 is not in") {
		t.Fatalf("unknown question: %v", err)
	}
	if _, err := LoadTasks("minidev:"+filepath.Join(filepath.Dir(path), "dev.json"), ""); err == nil || !strings.Contains(err.Error(), "not a mini-dev file") {
		t.Fatalf("dev.json as mini-dev: %v", err)
	}
	if _, err := LoadTasks("minidev:"+t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "has none of mini_dev_sqlite.json") {
		t.Fatalf("empty folder: %v", err)
	}
}

func TestLoadSpiderDev(t *testing.T) {
	path := shared.Path(t, "data/spider/dev.json")
	tasks, err := LoadTasks("spider:"+filepath.Dir(path), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1034 {
		t.Fatalf("%d tasks", len(tasks))
	}
	hardness := map[string]int{}
	present := 0
	for i, task := range tasks {
		if task.ID != fmt.Sprintf("spider-dev/%d", i) || task.Index != i || task.Source != "spider" || task.Gold[SQLite] == "" ||
			task.DBPath != filepath.Join(filepath.Dir(path), "database", task.DBID, task.DBID+".sqlite") {
			t.Fatalf("task %d: %+v", i, task)
		}
		hardness[task.Difficulty]++
		if _, err := os.Stat(task.DBPath); err == nil {
			present++
		}
	}
	// The official Spider dev hardness split (evaluation.py), as published with the benchmark.
	want := map[string]int{SpiderEasy: 248, SpiderMedium: 446, SpiderHard: 174, SpiderExtra: 166}
	if fmt.Sprint(hardness) != fmt.Sprint(want) {
		t.Fatalf("hardness %v, want %v", hardness, want)
	}
	if present == 0 {
		t.Fatal("no Spider database file found at the task paths")
	}
	if tasks[0].Question != "How many singers do we have?" || tasks[0].Difficulty != SpiderEasy || tasks[0].DBID != "concert_singer" {
		t.Fatalf("first task %+v", tasks[0])
	}

	dir := t.TempDir()
	writeJSON(t, dir, "tables.json", []map[string]any{{"db_id": "a"}})
	p := writeJSON(t, dir, "dev.json", []map[string]any{
		{"db_id": "a", "question": "q", "query": "SELECT 1"},
		{"db_id": "b", "question": "q", "query": "SELECT 1"},
	})
	if _, err := LoadTasks("spider:"+p, ""); err == nil || !strings.Contains(err.Error(), p+`: record 1: db_id "b" is not in tables.json`) {
		t.Fatalf("unknown db: %v", err)
	}
	writeJSON(t, dir, "dev.json", []map[string]any{{"db_id": "a", "question": "q", "query": "SELECT 1", "sql": map[string]any{"select": 3}}})
	if _, err := LoadTasks("spider:"+p, ""); err == nil || !strings.Contains(err.Error(), p+`: record 0: field "sql"`) {
		t.Fatalf("bad sql: %v", err)
	}
	writeJSON(t, dir, "dev.json", []map[string]any{{"db_id": "a", "question": "q"}})
	if _, err := LoadTasks("spider:"+p, ""); err == nil || !strings.Contains(err.Error(), p+`: record 0: missing "query"`) {
		t.Fatalf("missing query: %v", err)
	}
}

func TestSpiderHardnessCases(t *testing.T) {
	// Hand-built units in Spider's JSON form, hardness as evaluation.py decides it.
	base := func() map[string]any {
		return map[string]any{
			"from":   map[string]any{"table_units": []any{[]any{"table_unit", 0}}, "conds": []any{}},
			"select": []any{false, []any{[]any{0, []any{0, []any{0, 1, false}, nil}}}},
			"where":  []any{}, "groupBy": []any{}, "having": []any{}, "orderBy": []any{},
			"limit": nil, "intersect": nil, "union": nil, "except": nil,
		}
	}
	cond := func(op int, val any) []any { return []any{false, op, []any{0, []any{0, 1, false}, nil}, val, nil} }
	hard := func(m map[string]any) string {
		b, _ := json.Marshal(m)
		h, err := SpiderHardness(b)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	m := base()
	if h := hard(m); h != SpiderEasy {
		t.Errorf("plain select: %s", h)
	}
	m["where"] = []any{cond(2, "\"x\"")}
	if h := hard(m); h != SpiderEasy {
		t.Errorf("one where: %s", h)
	}
	m["orderBy"] = []any{"desc", []any{[]any{0, []any{0, 1, false}, nil}}}
	if h := hard(m); h != SpiderMedium {
		t.Errorf("where+order: %s", h)
	}
	m["limit"] = 1
	m["where"] = []any{cond(9, "\"%a%\""), "or", cond(2, "\"y\"")}
	if h := hard(m); h != SpiderExtra { // where, order, limit, or, like = 5 components
		t.Errorf("five components: %s", h)
	}
	m = base()
	m["where"] = []any{cond(8, base())}
	if h := hard(m); h != SpiderHard { // one nested query, nothing else
		t.Errorf("nested: %s", h)
	}
	m["union"] = base()
	if h := hard(m); h != SpiderExtra {
		t.Errorf("nested+union: %s", h)
	}
	if _, err := SpiderHardness([]byte(`{"select": [false]}`)); err == nil {
		t.Error("malformed select accepted")
	}
}
