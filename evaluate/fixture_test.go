package evaluate_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
)

// birdEntry is one dev.json record of BIRD's layout.
type birdEntry struct {
	QuestionID int    `json:"question_id"`
	DBID       string `json:"db_id"`
	Question   string `json:"question"`
	Evidence   string `json:"evidence"`
	SQL        string `json:"SQL"`
	Difficulty string `json:"difficulty"`
}

var fixtureDBs = map[string][]string{
	"shop": {
		`CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, cat TEXT, added DATE)`,
		`INSERT INTO items VALUES (1, 'apple', 1.5, 'fruit', '2020-01-01'), (2, 'pear', 2.0, 'fruit', '2020-02-01'),
			(3, 'bread', 3.25, 'bakery', '2020-03-15'), (4, 'milk', NULL, 'dairy', '2021-01-01'), (5, 'apple', 1.5, 'fruit', '2021-06-01')`,
		// Years in a DATE column: go-sqlite3 can not parse them as times.
		`CREATE TABLE events (id INTEGER PRIMARY KEY, year DATE, at DATETIME)`,
		`INSERT INTO events VALUES (1, 'circa 1998', '2020-01-01 10:00:00'), (2, 'circa 1999', 1577872800)`,
	},
	"school": {
		`CREATE TABLE students (id INTEGER PRIMARY KEY, name TEXT, grade INTEGER, class TEXT)`,
		`INSERT INTO students VALUES (1, 'Ann', 90, 'A'), (2, 'Bob', 70, 'B'), (3, 'Cid', 85, 'A'), (4, 'Dee', 60, 'B')`,
	},
}

// evalEntries are ten tasks: five simple, three moderate, two challenging.
var evalEntries = []birdEntry{
	{0, "shop", "How many items are there?", "", "SELECT COUNT(*) FROM items", "simple"},
	{1, "shop", "Which items are fruit?", "fruit refers to cat = 'fruit'", "SELECT name FROM items WHERE cat = 'fruit'", "simple"},
	{2, "school", "How many students are there?", "", "SELECT COUNT(*) FROM students", "simple"},
	{3, "school", "Who is in class A?", "", "SELECT name FROM students WHERE class = 'A'", "simple"},
	{4, "shop", "What is the highest price?", "", "SELECT MAX(price) FROM items", "simple"},
	{5, "shop", "What is the average price per category?", "", "SELECT cat, AVG(price) FROM items GROUP BY cat", "moderate"},
	{6, "school", "What is the best grade of each class?", "", "SELECT class, MAX(grade) FROM students GROUP BY class", "moderate"},
	{7, "shop", "Which items have no price?", "", "SELECT name FROM items WHERE price IS NULL", "moderate"},
	{8, "school", "Who is above the average grade?", "", "SELECT name FROM students WHERE grade > (SELECT AVG(grade) FROM students)", "challenging"},
	{9, "shop", "Which category has the most items?", "", "SELECT cat FROM items GROUP BY cat ORDER BY COUNT(*) DESC LIMIT 1", "challenging"},
}

// writeBIRD builds a BIRD-layout dataset in a temp dir: dev.json and
// dev_databases/<db>/<db>.sqlite. It returns the dev.json path.
func writeBIRD(tb testing.TB, entries []birdEntry) string {
	tb.Helper()
	dir := tb.TempDir()
	used := map[string]bool{}
	for _, e := range entries {
		used[e.DBID] = true
	}
	for db := range used {
		stmts, ok := fixtureDBs[db]
		if !ok {
			tb.Fatalf("fixture has no database %q", db)
		}
		p := filepath.Join(dir, "dev_databases", db, db+".sqlite")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		h, err := sql.Open("sqlite3", p)
		if err != nil {
			tb.Fatal(err)
		}
		for _, s := range stmts {
			if _, err := h.Exec(s); err != nil {
				tb.Fatalf("%s: %s: %v", db, s, err)
			}
		}
		if err := h.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	data, err := json.MarshalIndent(entries, "", " ")
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, "dev.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

func loadBIRD(tb testing.TB, path string) []datasets.Task {
	tb.Helper()
	tasks, err := datasets.LoadTasks("bird:"+path, "")
	if err != nil {
		tb.Fatal(err)
	}
	return tasks
}

// scripted is a policy that answers by question: replies[q][turn-1] (the last one repeats), or
// the question's gold SQL when the question is not scripted. It counts calls and can run a hook
// before each one.
type scripted struct {
	gold    map[string]string
	replies map[string][]string
	mu      sync.Mutex
	calls   int
	before  func(n int)
}

func newScripted(entries []birdEntry, replies map[string][]string) *scripted {
	s := &scripted{gold: map[string]string{}, replies: replies}
	for _, e := range entries {
		s.gold[e.Question] = e.SQL
	}
	return s
}

func question(msgs []chat.Message) string {
	for _, m := range msgs {
		if m.Role == chat.RoleUser {
			for _, line := range strings.Split(m.Content, "\n") {
				if q, ok := strings.CutPrefix(line, "Question: "); ok {
					return strings.TrimSpace(q)
				}
			}
		}
	}
	return ""
}

func sqlReply(s string) string { return "<think>scripted</think>\n<sql>" + s + "</sql>" }

func (s *scripted) Chat(ctx context.Context, msgs []chat.Message, _ chat.Options) (chat.Reply, error) {
	s.mu.Lock()
	s.calls++
	n, hook := s.calls, s.before
	s.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	if err := ctx.Err(); err != nil {
		return chat.Reply{}, err
	}
	q := question(msgs)
	turn := 0
	for _, m := range msgs {
		if m.Role == chat.RoleAssistant {
			turn++
		}
	}
	content := ""
	if rs, ok := s.replies[q]; ok {
		content = rs[min(turn, len(rs)-1)]
	} else if g, ok := s.gold[q]; ok {
		content = sqlReply(g)
	} else {
		return chat.Reply{}, fmt.Errorf("scripted: unknown question %q", q)
	}
	// After the first turn, 6 prompt tokens come from a prefix cache, as the runtime reports.
	u := chat.Usage{PromptTokens: 10, CompletionTokens: 5}
	if turn > 0 {
		u.CachedTokens = 6
	}
	return chat.Reply{Content: content, FinishReason: chat.FinishStop, Usage: u, Attempts: 1}, nil
}

func handle(name string, p chat.Policy) *episode.PolicyHandle {
	return &episode.PolicyHandle{Name: name, Spec: name, Model: name + "-model", Policy: p}
}

func readJSONL(tb testing.TB, path string) []map[string]any {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var out []map[string]any
	for i, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			tb.Fatalf("%s line %d: %v", path, i+1, err)
		}
		out = append(out, m)
	}
	return out
}
