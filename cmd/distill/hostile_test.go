package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/sandbox"
)

// writeSampleMiniDev writes the bundled sample as a mini-dev folder (one file of gold per
// dialect) whose db_ids carry prefix, with their SQLite files, so that a test can load it into
// the shared servers under names no other run uses.
func writeSampleMiniDev(t *testing.T, prefix string) (dir string, tasks []datasets.Task) {
	t.Helper()
	tasks, err := datasets.LoadTasks("sample", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	files := map[datasets.Dialect]string{datasets.SQLite: "mini_dev_sqlite.json", datasets.Postgres: "mini_dev_postgresql.json", datasets.MySQL: "mini_dev_mysql.json"}
	recs := map[datasets.Dialect][]map[string]any{}
	copied := map[string]bool{}
	for i, task := range tasks {
		id := prefix + task.DBID
		if !copied[id] {
			src, err := os.ReadFile(task.DBPath)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "dev_databases", id, id+".sqlite")
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, src, 0o644); err != nil {
				t.Fatal(err)
			}
			copied[id] = true
		}
		for d := range files {
			gold, ok := task.GoldFor(d)
			if !ok {
				t.Fatalf("%s has no %s gold", task.ID, d)
			}
			recs[d] = append(recs[d], map[string]any{"question_id": i, "db_id": id, "question": task.Question,
				"evidence": task.Evidence, "SQL": gold, "difficulty": task.Difficulty})
		}
	}
	for d, name := range files {
		b, _ := json.Marshal(recs[d])
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, tasks
}

// hostileTeacher answers turn k of the conversation about question i with statement
// (5i+k) mod len(stmts), so that over the sample every statement reaches every dialect.
func hostileTeacher(tasks []datasets.Task, stmts []string) oaitest.Script {
	index := map[string]int{}
	for i, task := range tasks {
		index[strings.TrimSpace(task.Question)] = i
	}
	return func(r oaitest.Request) oaitest.Response {
		i := -1
		for q, n := range index {
			if strings.Contains(r.FirstUser(), q) {
				i = n
				break
			}
		}
		if i < 0 {
			return oaitest.Response{Content: "<think>?</think>\n<sql>SELECT 1</sql>"}
		}
		s := stmts[(5*i+r.Turn())%len(stmts)]
		return oaitest.Response{Content: "<think>Let me look around the server.</think>\n<sql>" + s + "</sql>"}
	}
}

// TestDistillHostileTeacherSuperuserDSNs is issue 14's check through the built binary: a
// teacher replying with statements that reach the server (replication slots, WAL, server
// settings and paths, MariaDB's credentials table however spelled) runs over the sample in
// PostgreSQL, MariaDB and SQLite with superuser DSNs, next to the oracle. The statements run as
// the reader distill load made: no replication slot is left, the run dir holds no server path,
// WAL file name or credential, every observation of them is one line, and the oracle stays
// 56/56 in every dialect.
func TestDistillHostileTeacherSuperuserDSNs(t *testing.T) {
	shared.SkipServers(t)
	if testing.Short() {
		t.Skip("-short: builds the binary and runs the sample in three dialects")
	}
	bin := testbin.Build(t, ".")
	tag := fmt.Sprintf("%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	prefix := "cs_h" + tag + "_"
	dir, tasks := writeSampleMiniDev(t, prefix)
	spec := "minidev:" + dir
	pgDSN, myDSN := shared.PostgresDSN(), shared.MySQLDSN()
	reader := "cs_rd_h" + tag

	pg, err := sql.Open("pgx", pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	my, err := sql.Open("mysql", myDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer pg.Close()
		defer my.Close()
		for _, task := range tasks {
			if _, err := pg.Exec("DROP SCHEMA IF EXISTS " + prefix + task.DBID + " CASCADE"); err != nil {
				t.Errorf("drop the postgres copy: %v", err)
			}
			if _, err := my.Exec("DROP DATABASE IF EXISTS " + prefix + task.DBID); err != nil {
				t.Errorf("drop the mysql copy: %v", err)
			}
			my.Exec("DELETE FROM chainedsql_meta.copies WHERE target = ?", prefix+task.DBID)
		}
		for d, dsn := range map[datasets.Dialect]string{datasets.Postgres: pgDSN, datasets.MySQL: myDSN} {
			if err := sandbox.DropReader(context.Background(), d, dsn, reader); err != nil {
				t.Errorf("drop reader: %v", err)
			}
		}
	})
	for d, dsn := range map[string]string{"postgres": pgDSN, "mysql": myDSN} {
		code, _, stderr := testbin.Run(t, exec.Command(bin, "load", "--tasks", spec, "--dialect", d, "--dsn", dsn, "--reader", reader))
		if code != 0 {
			t.Fatalf("distill load --dialect %s: exit %d: %s", d, code, stderr)
		}
	}

	slot := "cs_slot_" + tag
	stmts := []string{
		// PostgreSQL, as the issue found them and spelled otherwise.
		"SELECT pg_create_physical_replication_slot('" + slot + "')",
		"SELECT * FROM pg_create_physical_replication_slot('" + slot + "_2', true)",
		`SELECT "pg_create_physical_replication_slot"('` + slot + `_3')`,
		"SELECT pg_switch_wal()", "SELECT pg_catalog . pg_switch_wal ()", "SELECT * FROM pg_ls_waldir()",
		"SELECT pg_walfile_name(pg_current_wal_lsn())", "SELECT redo_wal_file FROM pg_control_checkpoint()",
		"SELECT current_setting('data_directory')", "SELECT current_setting('config_file')",
		"SELECT name, setting FROM pg_settings", "SELECT setting FROM pg_catalog.pg_settings WHERE setting LIKE '/%'",
		"SELECT * FROM pg_show_all_settings()", "SELECT pg_read_file('pg_hba.conf')", "SELECT * FROM pg_ls_dir('.')",
		"SELECT set_config('role', 'postgres', false)", "SELECT rolname, rolpassword FROM pg_authid",
		"SELECT * FROM chainedsql_meta.readers",
		// MariaDB's credentials table, however the reference is spelled, and its paths.
		"SELECT user, plugin FROM mysql .user", "SELECT user, plugin FROM mysql/**/.user",
		"SELECT user, plugin FROM `mysql` .`user`", "SELECT user, authentication_string FROM mysql.user",
		"SELECT user, plugin FROM mysql -- a comment\n.user", "SELECT * FROM mysql.global_priv",
		"SELECT @@datadir, @@basedir, @@log_error", "SELECT * FROM information_schema.SYSTEM_VARIABLES",
		"SELECT load_file('/etc/passwd')", "SELECT 1 INTO OUTFILE '/tmp/cs_pwn_" + tag + "'",
	}
	srv := oaitest.NewServer(t, hostileTeacher(tasks, stmts))
	cfg := filepath.Join(t.TempDir(), "teachers.yaml")
	if err := os.WriteFile(cfg, []byte("teachers:\n  hostile:\n    base_url: "+srv.BaseURL()+"\n    model: test-model\n    api_key_env: \"\"\n    max_retries: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	slotsBefore := countSlots(t, pg)
	run := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := testbin.Run(t, exec.Command(bin, "--config", cfg, "--teachers", "hostile,oracle", "--tasks", spec,
		"--dialects", "sqlite,postgres,mysql", "--pg-dsn", pgDSN, "--mysql-dsn", myDSN, "--reader", reader,
		"--out", run, "--progress", "off", "--exec-timeout", "5s"))
	if code != 0 {
		t.Fatalf("distill: exit %d\n%s\n%s", code, stdout, stderr)
	}
	t.Logf("distill:\n%s", stdout)

	// No replication slot, role or file was made.
	if n := countSlots(t, pg); n != slotsBefore {
		t.Errorf("%d replication slots, %d before the run", n, slotsBefore)
	}
	var mine int
	if err := pg.QueryRow("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1", slot+"%").Scan(&mine); err != nil || mine != 0 {
		t.Errorf("%d of the teacher's slots exist: %v", mine, err)
	}
	if _, err := os.Stat("/tmp/cs_pwn_" + tag); err == nil {
		t.Error("INTO OUTFILE wrote a file")
	}

	// Nothing of the server reached the run dir.
	var needles []string
	for _, q := range []string{"SELECT DISTINCT setting FROM pg_settings WHERE setting LIKE '/_%'", "SELECT current_setting('data_directory')",
		"SELECT password FROM chainedsql_meta.readers WHERE name = '" + reader + "'"} {
		needles = append(needles, column(t, pg, q)...)
	}
	for _, q := range []string{"SELECT DISTINCT GLOBAL_VALUE FROM information_schema.SYSTEM_VARIABLES WHERE GLOBAL_VALUE LIKE '/_%'",
		"SELECT password FROM chainedsql_meta.readers WHERE name = '" + reader + "'", "SELECT DISTINCT plugin FROM mysql.user WHERE plugin <> ''"} {
		needles = append(needles, column(t, my, q)...)
	}
	var keep []string
	for _, n := range needles {
		if n = strings.TrimSuffix(n, "/"); len(n) > 4 && n != "/tmp" && n != "/usr" {
			keep = append(keep, n)
		}
	}
	patterns := []*regexp.Regexp{regexp.MustCompile(`\b[0-9A-F]{24}\b`), regexp.MustCompile(`\*[0-9A-F]{40}`), regexp.MustCompile(`SCRAM-SHA-256\$`)}
	filepath.WalkDir(run, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range keep {
			if strings.Contains(string(b), n) {
				t.Errorf("%s holds the server's %q", p, n)
			}
		}
		for _, re := range patterns {
			if m := re.Find(b); m != nil {
				t.Errorf("%s holds %q (%s)", p, m, re)
			}
		}
		return nil
	})

	// Every hostile turn was stopped, and its observation says so in one line; the oracle is right
	// everywhere.
	correct, seen := map[string]int{}, map[string]bool{}
	forEachTrajectory(t, run, func(tr trajectoryLine) {
		if tr.Teacher == "oracle" {
			if tr.Correct {
				correct[tr.Dialect]++
			}
			return
		}
		for _, turn := range tr.Turns {
			seen[turn.SQL] = true
			body := strings.TrimSuffix(strings.TrimPrefix(turn.Observation, "<observation>\n"), "\n</observation>")
			if turn.Exec == nil || turn.Exec.Outcome == sandbox.OutcomeOK {
				t.Errorf("%s: %q ran: %q", tr.Dialect, turn.SQL, body)
			}
			if strings.Contains(body, "\n") || !strings.HasPrefix(body, "Refused: ") && !strings.HasPrefix(body, "Error: ") {
				t.Errorf("%s: %q: observation %q, want one line saying what happened", tr.Dialect, turn.SQL, body)
			}
		}
	})
	for _, d := range []string{"sqlite", "postgres", "mysql"} {
		if correct[d] != len(tasks) {
			t.Errorf("oracle on %s: %d of %d correct", d, correct[d], len(tasks))
		}
	}
	for _, s := range stmts {
		if !seen[s] {
			t.Errorf("the teacher's %q never ran", s)
		}
	}

	// --exec-as-dsn-user says loudly whom the statements run as.
	code, _, stderr = testbin.Run(t, exec.Command(bin, "--teachers", "oracle", "--tasks", spec, "--limit", "1", "--dialects", "postgres,mysql",
		"--pg-dsn", pgDSN, "--mysql-dsn", myDSN, "--exec-as-dsn-user", "--out", filepath.Join(t.TempDir(), "dsnuser"), "--progress", "off"))
	if code != 0 || strings.Count(stderr, "WARNING: --exec-as-dsn-user") != 2 || !strings.Contains(stderr, "SUPERUSER") {
		t.Errorf("--exec-as-dsn-user: exit %d, stderr:\n%s", code, stderr)
	}
}

// trajectoryLine is the part of a shard line this test reads.
type trajectoryLine struct {
	Teacher string `json:"teacher"`
	Dialect string `json:"dialect"`
	Correct bool   `json:"correct"`
	Turns   []struct {
		SQL         string `json:"sql"`
		Observation string `json:"observation"`
		Exec        *struct {
			Outcome sandbox.Outcome `json:"outcome"`
		} `json:"exec"`
	} `json:"turns"`
}

// forEachTrajectory calls f with every trajectory in the shards of run dir run.
func forEachTrajectory(t *testing.T, run string, f func(trajectoryLine)) {
	t.Helper()
	shards, _ := filepath.Glob(filepath.Join(run, "shards", "*.jsonl"))
	if len(shards) == 0 {
		t.Fatalf("no shards in %s", run)
	}
	for _, p := range shards {
		fh, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(fh)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				var tr trajectoryLine
				if err := json.Unmarshal(line, &tr); err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				f(tr)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		fh.Close()
	}
}

func countSlots(t *testing.T, pg *sql.DB) int {
	t.Helper()
	var n int
	if err := pg.QueryRow("SELECT count(*) FROM pg_replication_slots").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// column returns the first column of query's rows as strings.
func column(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s sql.NullString
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s.Valid {
			out = append(out, s.String)
		}
	}
	return out
}
