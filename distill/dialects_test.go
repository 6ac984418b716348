package distill_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // dropping the test databases
	_ "github.com/jackc/pgx/v5/stdlib" // dropping the test schemas

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/sandbox"
)

var allDialects = []datasets.Dialect{datasets.SQLite, datasets.Postgres, datasets.MySQL}

// loadServers copies the SQLite database of every task into PostgreSQL (a schema) and MariaDB (a
// database) under a name unique to this test process, renames the tasks' db_id to it, creates a
// reader of its own granted the copies (returned as the Access to execute with), and drops the
// copies and the reader when the test ends.
func loadServers(t *testing.T, tasks []datasets.Task) ([]datasets.Task, sandbox.Access) {
	t.Helper()
	shared.SkipServers(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("cs_dt%d_%d_", os.Getpid(), time.Now().UnixNano()%1e6)
	pg, err := sql.Open("pgx", shared.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	my, err := sql.Open("mysql", shared.MySQLDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { my.Close() })
	done := map[string]string{}
	out := make([]datasets.Task, len(tasks))
	for i, task := range tasks {
		name, ok := done[task.DBID]
		if !ok {
			name = prefix + strings.ToLower(task.DBID)
			for _, d := range []datasets.Dialect{datasets.Postgres, datasets.MySQL} {
				dsn := shared.PostgresDSN()
				if d == datasets.MySQL {
					dsn = shared.MySQLDSN()
				}
				if _, err := sandbox.CopySQLite(ctx, task.DBPath, d, dsn, name); err != nil {
					t.Fatalf("copy %s into %s: %v (is the server up? set CHAINEDSQL_NO_SERVERS=1 to skip)", task.DBID, d, err)
				}
			}
			t.Cleanup(func() {
				pg.Exec("DROP SCHEMA IF EXISTS " + name + " CASCADE")
				my.Exec("DROP DATABASE IF EXISTS " + name)
			})
			done[task.DBID] = name
		}
		task.DBID = name
		out[i] = task
	}
	reader := fmt.Sprintf("cs_rd_dt%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	names := make([]string, 0, len(done))
	for _, n := range done {
		names = append(names, n)
	}
	for _, d := range []datasets.Dialect{datasets.Postgres, datasets.MySQL} {
		dsn := shared.PostgresDSN()
		if d == datasets.MySQL {
			dsn = shared.MySQLDSN()
		}
		t.Cleanup(func() {
			if err := sandbox.DropReader(context.Background(), d, dsn, reader); err != nil {
				t.Errorf("drop reader: %v", err)
			}
		})
		if _, err := sandbox.EnsureReader(ctx, d, dsn, sandbox.ReaderSetup{Name: reader}, names); err != nil {
			t.Fatal(err)
		}
	}
	return out, sandbox.Access{Reader: reader}
}

// dialectOf tells which engine a conversation's system prompt names.
func dialectOf(r oaitest.Request) datasets.Dialect {
	if len(r.Messages) == 0 {
		return datasets.SQLite
	}
	sys := r.Messages[0].Content
	switch {
	case strings.Contains(sys, "PostgreSQL"):
		return datasets.Postgres
	case strings.Contains(sys, "MySQL"), strings.Contains(sys, "MariaDB"):
		return datasets.MySQL
	}
	return datasets.SQLite
}

// dialectTeacher is teacherScript with each dialect's own gold: wrong, tagless or cut first, then
// the gold of the engine the system prompt names, then the same again.
func dialectTeacher(tasks []datasets.Task) oaitest.Script {
	gold := map[datasets.Dialect]map[string]string{}
	for _, d := range allDialects {
		gold[d] = map[string]string{}
		for _, task := range tasks {
			g, _ := task.GoldFor(d)
			gold[d][strings.TrimSpace(task.Question)] = g
		}
	}
	return func(r oaitest.Request) oaitest.Response {
		return teacherScript(gold[dialectOf(r)])(r)
	}
}

// TestRunSampleAllDialects runs the bundled sample in SQLite, PostgreSQL and MariaDB with a
// scripted teacher and the oracle, and checks every trajectory turn by turn.
func TestRunSampleAllDialects(t *testing.T) {
	tasks, err := datasets.LoadTasks("sample", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tasks, access := loadServers(t, tasks)
	srv := oaitest.NewServer(t, dialectTeacher(tasks))
	conn := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN(), datasets.MySQL: shared.MySQLDSN()}, Access: access}
	defer conn.Close()
	dir := t.TempDir()
	cfg := distill.RunConfig{Dir: dir, Tasks: tasks, TaskSpec: "sample", Dialects: allDialects,
		Policies: []*episode.PolicyHandle{{Name: "oracle", Spec: "oracle", Policy: episode.Oracle{}}, fakeTeacher(t, "fake", srv, nil)},
		Opener:   conn, Schemas: episode.NewSchemaCache(3)}
	res, err := distill.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := len(tasks) * 2 * len(allDialects)
	got := committed(t, dir)
	if res.Done != want || len(got) != want {
		t.Fatalf("%d done, %d committed, want %d (failed %d)", res.Done, len(got), want, res.Failed)
	}
	byDialect := map[datasets.Dialect]int{}
	for _, tr := range got {
		byDialect[tr.Dialect]++
		sys := tr.Conversation()[0].Content
		if !strings.Contains(sys, protocol.EngineName(tr.Dialect)) || !strings.Contains(strings.ToUpper(sys), "CREATE TABLE") {
			t.Fatalf("%s: system prompt does not name %s or carry the schema:\n%s", tr.Key, protocol.EngineName(tr.Dialect), sys)
		}
		if !tr.Correct || !tr.Repeated || !tr.ExecOK {
			t.Fatalf("%s: correct %v converged %v exec_ok %v, final %q", tr.Key, tr.Correct, tr.Repeated, tr.ExecOK, tr.FinalSQL)
		}
		switch tr.Teacher {
		case "oracle":
			if len(tr.Turns) != 2 {
				t.Fatalf("%s: oracle took %d turns, want 2", tr.Key, len(tr.Turns))
			}
		case "fake":
			// Turn 1 fails (an engine error, no tags, or cut by length); turns 2 and 3 are the gold.
			if len(tr.Turns) != 3 {
				t.Fatalf("%s: %d turns, want 3", tr.Key, len(tr.Turns))
			}
			first := tr.Turns[0]
			if first.Exec != nil && first.Exec.Outcome == sandbox.OutcomeOK {
				t.Fatalf("%s: the wrong first turn ran: %+v", tr.Key, first)
			}
			for _, turn := range tr.Turns[1:] {
				if turn.Exec == nil || turn.Exec.Outcome != sandbox.OutcomeOK {
					t.Fatalf("%s: gold turn did not run: %+v", tr.Key, turn)
				}
			}
		}
		last := tr.Conversation()[len(tr.Conversation())-1]
		if last.Role != "assistant" {
			t.Fatalf("%s: conversation ends with %s", tr.Key, last.Role)
		}
		for i, m := range tr.Conversation()[2:] {
			wantRole := "assistant"
			if i%2 == 1 {
				wantRole = "user"
				if !strings.HasPrefix(m.Content, "<observation>") {
					t.Fatalf("%s: user turn %d is not an observation: %q", tr.Key, i, m.Content)
				}
			}
			if m.Role != wantRole {
				t.Fatalf("%s: message %d is %s, want %s", tr.Key, i+2, m.Role, wantRole)
			}
		}
	}
	for _, d := range allDialects {
		if byDialect[d] != len(tasks)*2 {
			t.Fatalf("%s: %d trajectories, want %d", d, byDialect[d], len(tasks)*2)
		}
	}
}

// TestRunSpiderServers runs the oracle over Spider dev questions in PostgreSQL and MariaDB on
// copies of their SQLite databases. Spider's gold is written for SQLite, so some of it is not
// valid in the other engines; every trajectory must still be complete and judged, and a gold that
// runs must be judged correct against itself (ties under LIMIT aside).
func TestRunSpiderServers(t *testing.T) {
	tasks := spiderTasks(t, 40)
	tasks, access := loadServers(t, tasks)
	conn := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN(), datasets.MySQL: shared.MySQLDSN()}, Access: access}
	defer conn.Close()
	dir := t.TempDir()
	cfg := distill.RunConfig{Dir: dir, Tasks: tasks, TaskSpec: "spider:dev", Dialects: allDialects,
		Policies: []*episode.PolicyHandle{{Name: "oracle", Spec: "oracle", Policy: episode.Oracle{}}},
		Opener:   conn, Schemas: episode.NewSchemaCache(3)}
	res, err := distill.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := committed(t, dir)
	if want := len(tasks) * len(allDialects); len(got) != want {
		b, _ := os.ReadFile(filepath.Join(dir, "failures.jsonl"))
		t.Fatalf("%d trajectories, want %d (failed %d): %s", len(got), want, res.Failed, b)
	}
	ok, ran := map[datasets.Dialect]int{}, map[datasets.Dialect]int{}
	for _, tr := range got {
		if tr.Correct && !tr.ExecOK {
			t.Fatalf("%s: correct but not exec_ok", tr.Key)
		}
		// Spider has SQLite gold only: where it fails on a server (the oracle's SQL did not
		// run), the episode is judged against its answer on the task's SQLite file
		// (datasets.Task.GoldReference), so none is unjudged.
		if fellBack := tr.GoldDialect == datasets.SQLite; fellBack != (tr.Dialect != datasets.SQLite && !tr.ExecOK) || tr.GoldError != "" {
			t.Fatalf("%s: exec ok %v, judged against %q, gold error %q", tr.Key, tr.ExecOK, tr.GoldDialect, tr.GoldError)
		}
		if tr.ExecOK {
			ran[tr.Dialect]++
		}
		if tr.Correct {
			ok[tr.Dialect]++
		}
	}
	// A gold that runs is judged against itself; only a LIMIT over ties (e.g. ORDER BY count(*)
	// LIMIT 1) may pick other rows in a second execution on a server.
	for d, n := range ran {
		if ok[d] < n*95/100 {
			t.Fatalf("%s: %d gold queries ran but only %d judged correct against themselves", d, n, ok[d])
		}
	}
	if ok[datasets.SQLite] != len(tasks) {
		t.Fatalf("sqlite: %d of %d gold queries correct", ok[datasets.SQLite], len(tasks))
	}
	for _, d := range []datasets.Dialect{datasets.Postgres, datasets.MySQL} {
		if ok[d] < len(tasks)*6/10 {
			t.Fatalf("%s: only %d of %d SQLite gold queries ran: the copy or the executor is broken", d, ok[d], len(tasks))
		}
	}
	t.Logf("SQLite gold that runs unchanged: postgres %d/%d, mysql %d/%d", ok[datasets.Postgres], len(tasks), ok[datasets.MySQL], len(tasks))
}

// TestServerJudgedAgainstSQLite: a task with SQLite gold only, whose gold fails on PostgreSQL
// (ifnull is SQLite's and MySQL's), is judged on PostgreSQL against the gold's answer on the
// task's SQLite file (judge.Judge.Reference): a PostgreSQL query with that answer is correct,
// one with another answer is not, and neither is unjudged.
func TestServerJudgedAgainstSQLite(t *testing.T) {
	path, shop := makeShopDB(t)
	mk := func(i int, q, gold string) datasets.Task {
		task := shop[0]
		task.ID, task.Index, task.Question, task.Gold, task.DBPath = fmt.Sprintf("shop/city%d", i), i, q, map[datasets.Dialect]string{datasets.SQLite: gold}, path
		return task
	}
	tasks, access := loadServers(t, []datasets.Task{
		mk(0, "Which city does customer 7 live in?", "SELECT ifnull(city, '?') FROM customer WHERE id = 7"),
		mk(1, "Which city does customer 9 live in?", "SELECT ifnull(city, '?') FROM customer WHERE id = 9"),
	})
	answer := map[string]string{ // the second is wrong: customer 8 lives elsewhere
		tasks[0].Question: "SELECT coalesce(city, '?') FROM customer WHERE id = 7",
		tasks[1].Question: "SELECT coalesce(city, '?') FROM customer WHERE id = 8",
	}
	policy := chat.PolicyFunc(func(_ context.Context, msgs []chat.Message, _ chat.Options) (chat.Reply, error) {
		q := strings.TrimPrefix(strings.SplitN(msgs[1].Content, "\n", 2)[0], "Question: ")
		return chat.Reply{Content: "<think>t</think>\n<sql>" + answer[q] + "</sql>", FinishReason: chat.FinishStop}, nil
	})
	conn := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN()}, Access: access}
	defer conn.Close()
	dir := t.TempDir()
	cfg := distill.RunConfig{Dir: dir, Tasks: tasks, TaskSpec: "test:shop", Dialects: []datasets.Dialect{datasets.Postgres},
		Policies: []*episode.PolicyHandle{{Name: "pg", Spec: "pg", Policy: policy}}, Opener: conn, Schemas: episode.NewSchemaCache(3)}
	if _, err := distill.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	got := committed(t, dir)
	if len(got) != 2 {
		t.Fatalf("%d trajectories", len(got))
	}
	for _, tr := range got {
		want := tr.TaskIndex == 0
		if !tr.ExecOK || tr.Correct != want || tr.GoldDialect != datasets.SQLite || tr.GoldError != "" {
			t.Errorf("%s: exec ok %v, correct %v (want %v), gold from %q, gold error %q", tr.Key, tr.ExecOK, tr.Correct, want, tr.GoldDialect, tr.GoldError)
		}
	}
}
