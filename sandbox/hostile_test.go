package sandbox

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// hostileFor lists statements that must each be refused, fail, or be stopped at the deadline,
// leaving the data and the server as they were, in every engine. tag makes the names of what
// they would create (a replication slot, files, roles) unique to one test run.
func hostileFor(tag string) []string {
	q := []string{
		"DROP TABLE Album", "DELETE FROM Album", "UPDATE Album SET Title = 'x'", "INSERT INTO Album VALUES (9999, 'x', 1)",
		"CREATE TABLE pwned (x int)", "TRUNCATE Album", "ALTER TABLE Album ADD COLUMN x int",
		"ATTACH DATABASE '/tmp/x.db' AS x", "PRAGMA writable_schema=1", "VACUUM INTO '/tmp/x.db'",
		"SELECT 1; DROP TABLE Album", "SELECT 1; DELETE FROM Album;",
		"WITH d AS (DELETE FROM Album RETURNING *) SELECT count(*) FROM d",
		"WITH d AS (SELECT 1) UPDATE Album SET Title = 'x'",
		"SELECT * INTO pwned FROM Album",
		"EXPLAIN ANALYZE DELETE FROM Album",
		"COPY Album TO PROGRAM 'touch /tmp/pwned'", "SET search_path = public", "SET transaction_read_only = off",
		"SELECT set_config('transaction_read_only', 'off', true)",
		"SELECT pg_read_file('/etc/passwd')", `SELECT "pg_read_file"('/etc/passwd')`,
		"SELECT load_file('/etc/passwd')", "SELECT load_extension('/tmp/x.so')",
		"SELECT * FROM Album INTO OUTFILE '/tmp/pwned.txt'", "SELECT 1 /*!, load_file('/etc/passwd') */",
		"SELECT query_to_xml('delete from album', true, true, '')",
		"SELECT pg_sleep(60)", "SELECT SLEEP(60)", "SELECT BENCHMARK(1000000000000, md5('x'))",
		"SELECT count(*) FROM Track a, Track b, Track c",
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
		"LOCK TABLE Album", "CALL nothing()", "GRANT ALL ON Album TO PUBLIC",
		"SELECT rolpassword FROM pg_authid",
		"SELECT query FROM pg_stat_activity", "SELECT * FROM information_schema.processlist",
		"SELECT length(randomblob(1000000000))", "SELECT length(zeroblob(1000000000))",
		// SQLite's list of attached files names the task file's path on this machine.
		"SELECT file FROM pragma_database_list", "SELECT * FROM main.PRAGMA_DATABASE_LIST",
	}
	slot := "cs_slot_" + tag
	file := "/tmp/cs_pwn_" + tag
	q = append(q, pgServerStatements(slot, file, "cs_pwn_"+tag)...)
	q = append(q, mysqlServerStatements(file, "cs_pwn_"+tag)...)
	q = append(q,
		// The PostgreSQL catalog of slots, and the same functions spelled otherwise.
		"SELECT slot_name FROM pg_replication_slots",
		`SELECT "pg_create_physical_replication_slot"('`+slot+`_q')`,
		"SELECT pg_catalog.pg_switch_wal()", "SELECT pg_catalog . PG_SWITCH_WAL ()",
		"SELECT * FROM pg_settings WHERE name = 'data_directory'",
		"SELECT setting FROM pg_catalog.pg_settings WHERE setting LIKE '/%'",
		"SELECT current_setting('ssl_cert_file')",
		// Dynamic SQL would carry any name past the screen: refused itself.
		"SELECT * FROM ts_stat('SELECT to_tsvector(set_config(''role'', ''postgres'', false))')",
		"SELECT * FROM ts_stat('SELECT to_tsvector(pg_create_physical_replication_slot(''"+slot+"_d'')::text)')",
		// MySQL's credentials table however the reference is spelled.
		"SELECT user, plugin FROM mysql .user", "SELECT user, plugin FROM mysql/**/.user",
		"SELECT user, plugin FROM `mysql` .`user`", "SELECT user FROM `mysql`/* x */.`user`",
		"SELECT user FROM mysql -- x\n.user", "SELECT user FROM mysql # x\n.user", "SELECT User FROM MySQL.USER",
		"SELECT user FROM mysql\n\t.\nuser", `SELECT user FROM "mysql"."user"`,
		"SELECT * FROM mysql.user", "SELECT * FROM `mysql`.`user`",
		"SELECT user, host FROM mysql.global_priv", "SELECT * FROM mysql.db",
		// MySQL server variables hold its paths; any user may read them.
		"SELECT @@datadir", "SELECT @@GLOBAL.basedir, @@plugin_dir", "SELECT @@log_error",
		"SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES WHERE VARIABLE_NAME = 'DATADIR'",
		"SELECT GLOBAL_VALUE FROM information_schema.SYSTEM_VARIABLES WHERE VARIABLE_NAME = 'DATADIR'",
		"SELECT * FROM information_schema.SESSION_VARIABLES",
	)
	return q
}

// pgServerStatements reach the PostgreSQL server beyond the database (replication slots, WAL,
// logs, backends, settings, files, roles): run unscreened as the reader, each must fail with a
// permission error (or a read-only transaction's refusal) and change nothing.
func pgServerStatements(slot, file, role string) []string {
	return []string{
		"SELECT pg_create_physical_replication_slot('" + slot + "')",
		"SELECT pg_create_physical_replication_slot('" + slot + "_r', true)",
		"SELECT * FROM pg_create_logical_replication_slot('" + slot + "_l', 'test_decoding')",
		"SELECT pg_drop_replication_slot('" + slot + "')",
		"SELECT pg_switch_wal()",
		"SELECT * FROM pg_ls_waldir()",
		"SELECT pg_create_restore_point('" + slot + "')",
		"SELECT pg_backup_start('" + slot + "')",
		"SELECT current_setting('data_directory')",
		"SELECT current_setting('config_file'), current_setting('hba_file')",
		"SELECT * FROM pg_file_settings",
		"SELECT * FROM pg_hba_file_rules",
		"SELECT * FROM pg_ls_logdir()",
		"SELECT pg_current_logfile()",
		"SELECT pg_rotate_logfile()",
		"SELECT pg_reload_conf()",
		"SELECT pg_read_file('postgresql.auto.conf')",
		"SELECT * FROM pg_ls_dir('.')",
		"SELECT pg_stat_file('pg_hba.conf')",
		"SELECT pg_log_backend_memory_contexts(pg_backend_pid())",
		"SELECT pg_replication_origin_create('" + slot + "')",
		"SELECT lo_import('/etc/passwd')",
		"SELECT lo_export(1, '" + file + "')",
		"COPY (SELECT 1) TO '" + file + "'",
		"COPY (SELECT 1) TO PROGRAM 'touch " + file + "'",
		"SELECT * INTO " + role + " FROM Album",
		"CREATE ROLE " + role + " SUPERUSER",
		"ALTER ROLE CURRENT_USER SUPERUSER",
		"ALTER ROLE CURRENT_USER PASSWORD 'x'",
		"ALTER ROLE CURRENT_USER SET default_transaction_read_only = off",
		"SET ROLE postgres",
		"SET SESSION AUTHORIZATION postgres",
		"SELECT set_config('role', 'postgres', false)",
		"SELECT set_config('session_authorization', 'postgres', false)",
		"SELECT * FROM ts_stat('SELECT to_tsvector(set_config(''role'', ''postgres'', false))')",
		"SELECT rolpassword FROM pg_authid",
		"SELECT * FROM " + ReaderMeta + ".readers",
		// The task role is not the login's: the reader's other sessions (another run's
		// episodes, this one's own backend) are out of its reach.
		"SELECT pg_cancel_backend(pg_backend_pid())",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = session_user",
	}
}

// sqliteServerStatements reach past the SQLite file (other files, extensions, the file's path,
// settings): run unscreened, SQLite's authorizer must refuse each.
func sqliteServerStatements(file string) []string {
	return []string{
		"ATTACH DATABASE '" + file + ".db' AS x", "ATTACH DATABASE ':memory:' AS m", "VACUUM INTO '" + file + ".db'",
		"PRAGMA writable_schema = 1", "PRAGMA query_only = 0", "PRAGMA temp_store_directory = '/tmp'",
		"SELECT load_extension('/usr/lib/x86_64-linux-gnu/libc.so.6')", "SELECT fts3_tokenizer('simple')",
		"SELECT file FROM pragma_database_list", "CREATE TEMP TABLE pwned (x)", "DELETE FROM Album", "BEGIN IMMEDIATE",
	}
}

// mysqlServerStatements are pgServerStatements for MySQL/MariaDB.
func mysqlServerStatements(file, user string) []string {
	return []string{
		"SELECT user, plugin, authentication_string FROM mysql.user",
		"SELECT user, plugin FROM mysql .user",
		"SELECT * FROM mysql.global_priv",
		"SELECT * FROM " + ReaderMeta + ".readers",
		"SELECT load_file('/etc/passwd')",
		"SELECT 1 INTO OUTFILE '" + file + "'",
		"SELECT 1 INTO DUMPFILE '" + file + "_d'",
		"SELECT * FROM performance_schema.threads",
		"CREATE USER '" + user + "'@'localhost'",
		"CREATE TABLE " + user + " (x INT)",
		"GRANT ALL ON *.* TO CURRENT_USER",
		"SET GLOBAL max_connections = 1",
	}
}

// screenOnly are statements a reader's permissions allow and a read-only transaction does not
// stop, which therefore only the screen refuses; they are never run unscreened on the shared
// test servers. PostgreSQL: every role may write a WAL message, even read-only, and signal its
// own role's other sessions (another run's episodes). MariaDB: every user may change its own
// password and kill its own other connections.
var screenOnly = map[datasets.Dialect][]string{
	datasets.Postgres: {
		"SELECT pg_logical_emit_message(false, 'x', repeat('x', 1000000))",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = current_user",
		"SELECT pg_cancel_backend(1)",
		"SELECT pg_advisory_lock(1)",
	},
	datasets.MySQL: {
		"SET PASSWORD = PASSWORD('x')", "ALTER USER CURRENT_USER IDENTIFIED BY 'x'", "KILL 1", "KILL QUERY 1",
		"SELECT GET_LOCK('chainedsql-copy:x', 0)",
	},
}

// rolledBack are statements a reader may run that write only inside its transaction, which
// every execution rolls back: after the suite, nothing of them remains.
var rolledBack = map[datasets.Dialect][]string{
	datasets.Postgres: {"SELECT lo_from_bytea(0, 'x')", "SELECT lo_create(0)"},
}

// hostileQueries is hostileFor with a fixed tag, for fuzz seeds.
var hostileQueries = hostileFor("seed")

// rawRunner runs a statement without the screen: the server's permissions are all that stands
// in its way.
type rawRunner interface {
	run(ctx context.Context, start time.Time, stmt string, timeout time.Duration, maxRows int) (*Result, error)
}

// permissionError reports whether an engine error says the statement lacked a privilege or
// was refused by the read-only transaction.
func permissionError(d datasets.Dialect, msg string) bool {
	m := strings.ToLower(msg)
	switch d {
	case datasets.Postgres:
		return strings.Contains(m, "sqlstate 42501") || strings.Contains(m, "sqlstate 25006")
	case datasets.SQLite:
		return strings.Contains(m, "not authorized") || strings.Contains(m, "authorization denied")
	}
	for _, s := range []string{"denied", "read only", "read-only", "you need"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// TestHostileStatements runs the hostile suite on Chinook in SQLite, and in PostgreSQL and
// MariaDB as a reader: every statement is refused, fails or stops at its deadline, in one line;
// the statements that reach the server (on SQLite: past the file) fail with a permission error
// even unscreened; no
// replication slot, role, user or file appears; the reader stays a reader; the data is intact.
func TestHostileStatements(t *testing.T) {
	const deadline = 2 * time.Second
	ctx := context.Background()
	src := shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite")
	before := sum(t, src)
	lite, err := OpenSQLite(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	schema, err := Introspect(ctx, lite, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := serverCounts(t, lite, schema.Tables)
	tag := fmt.Sprintf("%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	file := "/tmp/cs_pwn_" + tag
	hostile := hostileFor(tag)
	dbs := []DB{lite}
	if os.Getenv("CHAINEDSQL_NO_SERVERS") == "" {
		pg, _ := copyChinook(t, datasets.Postgres)
		my, _ := copyChinook(t, datasets.MySQL)
		dbs = append(dbs, pg, my)
	}
	for _, db := range dbs {
		t.Run(string(db.Dialect()), func(t *testing.T) {
			t.Parallel()
			d := db.Dialect()
			for _, q := range hostile {
				start := time.Now()
				r := mustExec(t, db, q, ExecOptions{Timeout: deadline, MaxRows: 10})
				took := time.Since(start)
				t.Logf("%-70.70q %-8s %5dms %.90s", q, r.Outcome, took.Milliseconds(), r.Error)
				// MariaDB ends recursion itself at max_recursive_iterations (1000), with a result.
				bounded := d == datasets.MySQL && strings.HasPrefix(q, "WITH RECURSIVE") && r.OK() && r.Rows[0][0] == int64(1001)
				if r.Outcome == OutcomeOK && !bounded {
					t.Errorf("%q: ran (%v)", q, r.Rows)
				}
				if !r.OK() && (r.Error == "" || strings.ContainsAny(r.Error, "\r\n")) {
					t.Errorf("%q: %s %q: want what happened in one line", q, r.Outcome, r.Error)
				}
				if took > deadline+time.Second {
					t.Errorf("%q: %s after %s, past the %s deadline", q, r.Outcome, took, deadline)
				}
			}
			// The layer below the screen: the reader's own permissions.
			var server []string
			switch d {
			case datasets.Postgres:
				server = pgServerStatements("cs_slot_"+tag, file, "cs_pwn_"+tag)
			case datasets.MySQL:
				server = mysqlServerStatements(file, "cs_pwn_"+tag)
			case datasets.SQLite:
				server = sqliteServerStatements(file)
			}
			for _, q := range server {
				r, err := db.(rawRunner).run(ctx, time.Now(), q, deadline, 10)
				if err != nil {
					t.Fatalf("%q unscreened: %v", q, err)
				}
				// MariaDB's LOAD_FILE without the FILE privilege reads nothing: NULL.
				nothing := r.OK() && len(r.Rows) == 1 && r.Rows[0][0] == nil && strings.Contains(strings.ToLower(q), "load_file")
				if !nothing && (r.Outcome != OutcomeError || !permissionError(d, r.Error)) {
					t.Errorf("%q unscreened as the reader: %s %q %v, want a permission error", q, r.Outcome, r.Error, r.Rows)
				}
			}
			for _, q := range screenOnly[d] {
				if r := mustExec(t, db, q, ExecOptions{}); r.Outcome != OutcomeRefused {
					t.Errorf("%q: %s %q, want it refused by the screen", q, r.Outcome, r.Error)
				}
			}
			for _, q := range rolledBack[d] {
				if r := mustExec(t, db, q, ExecOptions{}); r.Outcome != OutcomeRefused {
					t.Errorf("%q: %s %q, want it refused by the screen", q, r.Outcome, r.Error)
				}
				if r, err := db.(rawRunner).run(ctx, time.Now(), q, deadline, 10); err != nil || !r.OK() && !permissionError(d, r.Error) {
					t.Errorf("%q unscreened: %v %+v", q, err, r)
				}
			}
			if d == datasets.Postgres {
				// Logged in as the reader, there is no other role to go back to; the statement
				// runs as the task's own role.
				r, _ := db.(rawRunner).run(ctx, time.Now(), "SELECT session_user, current_user, set_config('role', 'none', false), (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)", deadline, 10)
				if !r.OK() || r.Rows[0][0] == "postgres" || r.Rows[0][1] != pgTaskRole(fmt.Sprint(r.Rows[0][0]), db.(*pgDB).schema) || r.Rows[0][3] != false {
					t.Errorf("reset role: %+v", r)
				}
			}
			if got := serverCounts(t, db, schema.Tables); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("row counts changed: %v, want %v", got, want)
			}
			if r := mustExec(t, db, "SELECT count(*) FROM pwned", ExecOptions{}); r.OK() {
				t.Error("a table was created")
			}
			if r := mustExec(t, db, "SELECT Title FROM Album WHERE AlbumId = 1", ExecOptions{}); !r.OK() || r.Rows[0][0] != "For Those About To Rock We Salute You" {
				t.Errorf("album 1: %+v", r)
			}
		})
	}
	t.Cleanup(func() {
		if sum(t, src) != before {
			t.Error("the SQLite file changed")
		}
		for _, p := range []string{"/tmp/pwned.txt", "/tmp/pwned", file, file + "_d", file + ".db"} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%s was written", p)
			}
		}
		if os.Getenv("CHAINEDSQL_NO_SERVERS") != "" {
			return
		}
		pg := pgAdmin(t)
		var slots, roles int
		if err := pg.QueryRow("SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1), (SELECT count(*) FROM pg_roles WHERE rolname LIKE $1)", "cs_%"+tag+"%").Scan(&slots, &roles); err != nil {
			t.Fatal(err)
		}
		if slots != 0 || roles != 0 {
			t.Errorf("%d replication slots, %d roles created", slots, roles)
		}
		var slotFiles int
		if err := pg.QueryRow("SELECT count(*) FROM pg_ls_dir('pg_replslot') f WHERE f LIKE $1", "%"+tag+"%").Scan(&slotFiles); err != nil || slotFiles != 0 {
			t.Errorf("%d slot directories in pg_replslot: %v", slotFiles, err)
		}
		var largeObjects int
		if err := pg.QueryRow("SELECT count(*) FROM pg_largeobject_metadata m JOIN pg_roles r ON r.oid = m.lomowner WHERE r.rolname LIKE 'cs_rd_%'").Scan(&largeObjects); err != nil || largeObjects != 0 {
			t.Errorf("%d large objects left by readers: %v", largeObjects, err)
		}
		var users int
		if err := myAdmin(t).QueryRow("SELECT count(*) FROM mysql.user WHERE User LIKE ?", "%"+tag+"%").Scan(&users); err != nil || users != 0 {
			t.Errorf("%d MySQL users created: %v", users, err)
		}
	})
}

// walName matches a PostgreSQL WAL segment file name (timeline, log, segment: 24 hex digits).
var walName = regexp.MustCompile(`\b[0-9A-F]{24}\b`)

// mysqlHash matches a mysql_native_password hash.
var mysqlHash = regexp.MustCompile(`\*[0-9A-F]{40}`)

// leaks returns the first of needles found in any cell of r, or "".
func leaks(r *Result, needles []string, patterns ...*regexp.Regexp) string {
	for _, row := range r.Rows {
		for _, v := range row {
			s := fmt.Sprint(v)
			if b, ok := v.([]byte); ok {
				s = string(b)
			}
			for _, n := range needles {
				if strings.Contains(s, n) {
					return n
				}
			}
			for _, p := range patterns {
				if m := p.FindString(s); m != "" {
					return m
				}
			}
		}
	}
	return ""
}

// TestPostgresReaderSeesNoServer reads, as the reader and unscreened, every catalog relation
// the screen lets through and checks that none shows a server path, a WAL file name or a
// password hash; and checks that every function the reader may execute whose name touches
// WAL, slots, logs, backends, settings or files is either refused by the screen or harmless.
func TestPostgresReaderSeesNoServer(t *testing.T) {
	admin := pgAdmin(t)
	ctx := context.Background()
	schema := pgSchema(t, admin, "CREATE TABLE t (x int)")
	acc := testReader(t, datasets.Postgres, schema)
	db, err := OpenPostgres(ctx, shared.PostgresDSN(), schema, acc)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var paths []string
	rows, err := admin.Query("SELECT DISTINCT setting FROM pg_settings WHERE setting LIKE '/_%' UNION SELECT current_setting('data_directory')")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		rows.Scan(&p)
		for _, part := range strings.Split(p, ",") { // unix_socket_directories is a list
			if part = strings.TrimSpace(part); len(part) > 4 && part != "/tmp" {
				paths = append(paths, part)
			}
		}
	}
	rows.Close()
	if len(paths) < 3 {
		t.Fatalf("too few server paths to look for: %v", paths)
	}
	rels, err := QueryStrings(ctx, admin, `SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname IN ('pg_catalog', 'information_schema') AND c.relkind IN ('r', 'v', 'm') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	scanRelations(t, db, rels, paths, walName, regexp.MustCompile(`SCRAM-SHA-256\$|md5[0-9a-f]{32}`))

	risky := regexp.MustCompile(`wal|xlog|slot|replication|logfile|backend|setting|_file|_dir|tablespace|backup|restore_point|promote|checkpoint|control|advisory|signal|terminate|cancel|reload|rotate|logical|origin|snapshot|^lo_|^lo(read|write)$|xact_id|txid_current|config$|filepath|blocking`)
	harmless := map[string]bool{ // executable, and nothing beyond the transaction's own data
		"pg_backend_pid": true, "pg_tablespace_size": true, "pg_tablespace_databases": true, "has_tablespace_privilege": true,
		"pg_current_snapshot": true, "pg_snapshot_xip": true, "pg_snapshot_xmax": true, "pg_snapshot_xmin": true, "pg_visible_in_snapshot": true,
		"txid_current_snapshot": true, "txid_snapshot_xip": true, "txid_snapshot_xmax": true, "txid_snapshot_xmin": true, "txid_visible_in_snapshot": true,
		"pg_stat_clear_snapshot": true, "get_current_ts_config": true, "pg_ts_config_is_visible": true, "pg_settings_get_flags": true,
		"lo_close": true, "lo_lseek": true, "lo_lseek64": true, "lo_tell": true, "lo_tell64": true, "loread": true,
		"pg_extension_config_dump": true, "pg_isolation_test_session_is_blocked": true, "inet_spg_config": true, "pg_relation_filenode": true,
	}
	fns, err := QueryStrings(ctx, admin, `SELECT DISTINCT proname::text FROM pg_proc
		WHERE has_function_privilege($1, oid, 'EXECUTE') AND prorettype <> 'internal'::regtype AND proname !~ '(in|out|recv|send)$' AND proname !~ '^(spg_|binary_upgrade_|brin_|gist_|gin_|regconfig)' ORDER BY 1`, acc.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var open []string
	for _, f := range fns {
		if !risky.MatchString(f) || harmless[f] {
			continue
		}
		if _, reason := screen("SELECT "+f+"()", datasets.Postgres); reason == "" {
			open = append(open, f)
		}
	}
	if len(open) > 0 {
		t.Errorf("functions the reader may execute that touch the server and the screen lets through: %v", open)
	}
}

// TestMySQLReaderSeesNoServer reads, as the reader and unscreened, every information_schema
// table the screen lets through and checks that none shows a server path or a password hash.
func TestMySQLReaderSeesNoServer(t *testing.T) {
	admin := myAdmin(t)
	ctx := context.Background()
	name := myDatabase(t, admin, "CREATE TABLE t (x INT)")
	db, err := OpenMySQL(ctx, shared.MySQLDSN(), name, testReader(t, datasets.MySQL, name))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var paths []string
	vals, err := QueryStrings(ctx, admin, "SELECT DISTINCT GLOBAL_VALUE FROM information_schema.SYSTEM_VARIABLES WHERE GLOBAL_VALUE LIKE '/_%'")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vals {
		v = strings.TrimSuffix(v, "/")
		if len(v) > 4 && v != "/tmp" && v != "/usr" {
			paths = append(paths, v)
		}
	}
	if len(paths) < 3 {
		t.Fatalf("too few server paths to look for: %v", paths)
	}
	tables, err := QueryStrings(ctx, admin, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'information_schema' ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for i, tb := range tables {
		tables[i] = "information_schema." + tb
	}
	scanRelations(t, db, tables, paths, mysqlHash)
}

// scanRelations reads each of rels (qualified names) as db's reader, unscreened, unless the
// screen refuses it, and fails the test for any cell holding one of needles or patterns.
func scanRelations(t *testing.T, db DB, rels, needles []string, patterns ...*regexp.Regexp) {
	t.Helper()
	read, screened := 0, 0
	for _, rel := range rels {
		q := "SELECT * FROM " + rel + " LIMIT 5000"
		if _, reason := screen(q, db.Dialect()); reason != "" {
			screened++
			continue
		}
		if rel == "information_schema.element_types" {
			continue // array element types only, and it takes over 10 s on a server with many schemas
		}
		r, err := db.(rawRunner).run(context.Background(), time.Now(), q, 10*time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Outcome == OutcomeTimeout {
			t.Errorf("%s: timed out, so it was not checked", rel)
		}
		if !r.OK() {
			continue // not readable by the reader
		}
		read++
		if leak := leaks(r, needles, patterns...); leak != "" {
			t.Errorf("%s shows %q to the reader", rel, leak)
		}
	}
	t.Logf("%d catalog relations read by the reader, %d refused by the screen", read, screened)
}

// TestCrossTaskIsolation: one reader granted two tasks' databases (as distill load leaves it
// after loading a benchmark), executing for task A in a Connector that also serves task B.
// Statements of A, run unscreened, cannot read B's rows (directly, quoted, or through a regclass
// built at run time), see B's statement text while it runs, or leave session state (user
// variables, LAST_INSERT_ID, named and advisory locks) that a later execution on the pooled
// connection sees.
func TestCrossTaskIsolation(t *testing.T) {
	ctx := context.Background()
	for _, d := range []datasets.Dialect{datasets.Postgres, datasets.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			var a, b string
			if d == datasets.Postgres {
				admin := pgAdmin(t)
				a = pgSchema(t, admin, "CREATE TABLE t (x int)", "INSERT INTO t VALUES (1)")
				b = pgSchema(t, admin, "CREATE TABLE secret (x int)", "INSERT INTO secret VALUES (4242)")
			} else {
				admin := myAdmin(t)
				a = myDatabase(t, admin, "CREATE TABLE t (x INT)", "INSERT INTO t VALUES (1)")
				b = myDatabase(t, admin, "CREATE TABLE secret (x INT)", "INSERT INTO secret VALUES (4242)")
			}
			acc := testReader(t, d, a, b)
			c := &Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN(), datasets.MySQL: shared.MySQLDSN()}, Access: acc}
			defer c.Close()
			dbA, err := c.Open(ctx, d, datasets.Task{ID: "a", DBID: a})
			if err != nil {
				t.Fatal(err)
			}
			dbB, err := c.Open(ctx, d, datasets.Task{ID: "b", DBID: b})
			if err != nil {
				t.Fatal(err)
			}
			raw := func(db DB, q string) *Result {
				t.Helper()
				r, err := db.(rawRunner).run(ctx, time.Now(), q, 5*time.Second, 10)
				if err != nil {
					t.Fatalf("%q: %v", q, err)
				}
				return r
			}
			if r := raw(dbB, "SELECT x FROM secret"); !r.OK() || r.Rows[0][0] != int64(4242) {
				t.Fatalf("task B reads its own table: %+v", r)
			}
			if r := raw(dbA, "SELECT x FROM t"); !r.OK() {
				t.Fatalf("task A reads its own table: %+v", r)
			}
			q := QuoteIdent(d, b)
			reads := []string{"SELECT x FROM " + b + ".secret", "SELECT x FROM " + q + "." + QuoteIdent(d, "secret"),
				"SELECT * FROM (SELECT x FROM " + b + ".secret) s"}
			if d == datasets.Postgres {
				reads = append(reads,
					"SELECT table_to_xml('"+b+".secret'::regclass, true, true, '')",
					"SELECT table_to_xml((SELECT oid FROM pg_class WHERE relname = 'secret' AND relnamespace = '"+b+"'::regnamespace)::regclass, true, true, '')",
					"SELECT table_to_xml((SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = concat('"+b[:4]+"', '"+b[4:]+"') AND c.relname = 'secret')::regclass, true, true, '')")
			}
			for _, s := range reads {
				r := raw(dbA, s)
				if r.Outcome != OutcomeError || !permissionError(d, r.Error) {
					t.Errorf("task A, unscreened: %q: %s %q %v, want a permission error", s, r.Outcome, r.Error, r.Rows)
				}
				if r := mustExec(t, dbA, s, ExecOptions{}); r.OK() {
					t.Errorf("task A: %q ran: %v", s, r.Rows)
				}
			}

			// B's statement text, while it runs, is not visible to A.
			marker := fmt.Sprintf("cs_marker_%d", time.Now().UnixNano())
			sleep := map[datasets.Dialect]string{datasets.Postgres: "SELECT pg_sleep(60), '" + marker + "'", datasets.MySQL: "SELECT SLEEP(60), '" + marker + "'"}[d]
			bctx, stopB := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); dbB.Exec(bctx, sleep, ExecOptions{Timeout: time.Minute}) }()
			running := map[datasets.Dialect]string{datasets.Postgres: "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()",
				datasets.MySQL: "SELECT count(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE CONCAT('%', ?, '%') AND ID <> CONNECTION_ID()"}[d]
			admin := map[datasets.Dialect]func(testing.TB) *sql.DB{datasets.Postgres: pgAdmin, datasets.MySQL: myAdmin}[d](t)
			for n := 0; n == 0; time.Sleep(50 * time.Millisecond) {
				if err := admin.QueryRow(running, marker).Scan(&n); err != nil {
					t.Fatal(err)
				}
			}
			var rels []string
			if d == datasets.Postgres {
				rels, err = QueryStrings(ctx, pgAdmin(t), `SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
					WHERE n.nspname IN ('pg_catalog', 'information_schema') AND c.relkind IN ('r', 'v', 'm') AND c.relname <> 'element_types' ORDER BY 1`)
				rels = append(rels, "pg_stat_get_activity(NULL)")
			} else {
				rels, err = QueryStrings(ctx, myAdmin(t), "SELECT CONCAT('information_schema.', TABLE_NAME) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'information_schema'")
			}
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for _, rel := range rels {
				s := "SELECT * FROM " + rel
				var r *Result
				if d == datasets.Postgres {
					r = raw(dbA, s) // PostgreSQL: the privileges alone
				} else {
					r = mustExec(t, dbA, s, ExecOptions{Timeout: 5 * time.Second}) // MariaDB shows a user its own threads: the screen
				}
				if r.OK() {
					seen++
					if leak := leaks(r, []string{marker}); leak != "" {
						t.Errorf("task A sees task B's running statement in %s", rel)
					}
				}
			}
			stopB()
			<-done
			t.Logf("%d catalog relations read by task A while task B ran", seen)

			// Session state set by one execution is gone in the next.
			var set, get []string
			if d == datasets.Postgres {
				set = []string{"SELECT pg_advisory_lock(4242)", "SELECT set_config('work_mem', '1GB', false), set_config('search_path', 'cs_elsewhere', false)"}
				get = []string{"SELECT current_setting('work_mem') <> '1GB' AND current_setting('search_path') <> 'cs_elsewhere', (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND pid = pg_backend_pid()) = 0"}
			} else {
				set = []string{"SELECT 4242 INTO @cs_leak", "SELECT @cs_leak2 := 4242", "SELECT LAST_INSERT_ID(4242)", "SELECT GET_LOCK('" + marker + "', 0)"}
				get = []string{"SELECT @cs_leak IS NULL AND @cs_leak2 IS NULL AND LAST_INSERT_ID() = 0, IS_USED_LOCK('" + marker + "') IS NULL"}
			}
			for _, db := range []DB{dbA, dbB} {
				for i := 0; i < 8; i++ { // over the pool's connections
					for _, s := range set {
						raw(db, s)
					}
					for _, s := range get {
						// A closed MySQL connection's locks go as the server reaps it: allow it a moment.
						r := raw(db, s)
						for try := 0; try < 20 && r.OK() && fmt.Sprint(r.Rows[0][1]) == "0"; try++ {
							time.Sleep(50 * time.Millisecond)
							r = raw(db, s)
						}
						truth := func(v any) bool { return v == true || v == int64(1) }
						if !r.OK() || !truth(r.Rows[0][0]) || !truth(r.Rows[0][1]) {
							t.Fatalf("after %q, %q: %+v: the state of one execution reached the next", set, s, r)
						}
					}
				}
			}
		})
	}
}

// TestHostileResultSize: a statement whose result would bring more than maxResultBytes into
// the process (many rows, as a judged prediction keeps them all, or one huge row) gets an
// error saying so, in one line, instead of the memory; the database still answers after.
func TestHostileResultSize(t *testing.T) {
	ctx := context.Background()
	src := shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite")
	lite, err := OpenSQLite(src)
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	dbs := []DB{lite}
	if os.Getenv("CHAINEDSQL_NO_SERVERS") == "" {
		pgs := pgSchema(t, pgAdmin(t), "CREATE TABLE t (x int)", "INSERT INTO t VALUES (1)")
		pg, err := OpenPostgres(ctx, shared.PostgresDSN(), pgs, testReader(t, datasets.Postgres, pgs))
		if err != nil {
			t.Fatal(err)
		}
		defer pg.Close()
		mys := myDatabase(t, myAdmin(t), "CREATE TABLE t (x INT)", "INSERT INTO t VALUES (1)")
		my, err := OpenMySQL(ctx, shared.MySQLDSN(), mys, testReader(t, datasets.MySQL, mys))
		if err != nil {
			t.Fatal(err)
		}
		defer my.Close()
		dbs = append(dbs, pg, my)
	}
	rows := "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 300) "
	cols := func(n int, expr string) string {
		c := make([]string, n)
		for i := range c {
			c[i] = fmt.Sprintf(expr, i)
		}
		return strings.Join(c, ", ")
	}
	big := map[datasets.Dialect][]string{
		datasets.SQLite:   {rows + "SELECT zeroblob(1000000) FROM c", "SELECT " + cols(40, "zeroblob(7000000 + %d)")},
		datasets.Postgres: {rows + "SELECT repeat('x', 1000000) FROM c", "SELECT " + cols(3, "repeat('x', 90000000 + %d)")},
		datasets.MySQL:    {rows + "SELECT REPEAT('x', 1000000) FROM c", "SELECT " + cols(20, "REPEAT('x', 16000000 + %d)")},
	}
	for _, db := range dbs {
		d := db.Dialect()
		for _, q := range big[d] {
			start := time.Now()
			r := mustExec(t, db, q, ExecOptions{Timeout: 60 * time.Second})
			if d == datasets.MySQL { // the screen refuses REPEAT (see mysqlDeniedCalls): the cap, unscreened
				var err error
				if r, err = db.(rawRunner).run(ctx, time.Now(), q, 60*time.Second, 0); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%s %.60q: %s in %s: %s", d, q, r.Outcome, time.Since(start).Round(time.Millisecond), r.Error)
			if r.Outcome != OutcomeError || strings.ContainsAny(r.Error, "\r\n") || !strings.Contains(r.Error, "larger than") && !strings.Contains(r.Error, "out of memory") {
				t.Errorf("%s %.60q: %s (%d rows) %q, want an error saying the result is too large", d, q, r.Outcome, len(r.Rows), r.Error)
			}
			if r := mustExec(t, db, "SELECT 1", ExecOptions{}); !r.OK() {
				t.Errorf("%s: after %.60q: %+v", d, q, r)
			}
		}
	}
}
