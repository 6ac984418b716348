package sandbox_test

import (
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestScreenServerReach: the screen refuses, in every dialect, the statements that reach the
// server beyond the task's data however they are spelled, and lets ordinary queries that merely
// look alike through.
func TestScreenServerReach(t *testing.T) {
	dialects := []datasets.Dialect{datasets.SQLite, datasets.Postgres, datasets.MySQL}
	for _, q := range []string{
		"SELECT pg_create_physical_replication_slot('x')",
		"SELECT * FROM pg_create_logical_replication_slot('x', 'test_decoding')", "SELECT pg_catalog.pg_switch_wal()",
		"SELECT pg_catalog . pg_switch_wal ()", "SELECT * FROM pg_ls_waldir()", "SELECT pg_walfile_name(pg_current_wal_lsn())",
		"SELECT redo_wal_file FROM pg_control_checkpoint()", "SELECT current_setting('data_directory')",
		"SELECT * FROM pg_settings", "SELECT * FROM pg_catalog.pg_show_all_settings()", "SELECT pg_tablespace_location(1663)",
		"SELECT pg_logical_emit_message(false, 'a', 'b')", "SELECT pg_relation_filepath('t')", "SELECT * FROM pg_stat_archiver",
		"SELECT pg_advisory_lock(1)", "SELECT pg_try_advisory_lock(1)", "SELECT pg_terminate_backend(1)", "SELECT txid_current()",
		"SELECT * FROM ts_stat('SELECT 1')", "SELECT inet_server_addr()",
		"SELECT user, plugin FROM mysql .user", "SELECT user, plugin FROM mysql/**/.user", "SELECT user, plugin FROM `mysql` .`user`",
		"SELECT user FROM `mysql`/* x */.`user`", "SELECT user FROM mysql -- x\n.user", "SELECT user FROM mysql # x\n.user",
		"SELECT User FROM MySQL.USER", "SELECT user FROM mysql\n\t.\nuser",
		"SELECT a FROM t WHERE b IN (SELECT user FROM mysql.db)",
		"SELECT * FROM information_schema.SYSTEM_VARIABLES", "SELECT * FROM information_schema.global_variables",
		"SELECT GET_LOCK('x', 1)",
		"SELECT dblink_send_query('c', 'SELECT 1')", "SELECT * FROM dblink_get_result('c') AS t(x int)", "SELECT dblink_connect_u('c', 'dbname=x')",
		"SELECT file FROM pragma_database_list",
	} {
		for _, d := range dialects {
			if _, reason := sandbox.Screen(q, d); reason == "" {
				t.Errorf("%s: %q passed the screen", d, q)
			}
		}
	}
	// Quoted identifiers on PostgreSQL and SQLite; on MariaDB strings, and the statements syntax
	// errors (sandbox/mysql's TestMySQLScreenNamesNotText).
	for _, d := range []datasets.Dialect{datasets.SQLite, datasets.Postgres} {
		for _, q := range []string{`SELECT "PG_CREATE_PHYSICAL_REPLICATION_SLOT"('x')`, `SELECT user FROM "mysql"."user"`} {
			if _, reason := sandbox.Screen(q, d); reason == "" {
				t.Errorf("%s: %q passed the screen", d, q)
			}
		}
	}
	for _, q := range []string{"SELECT @@datadir", "SELECT @@GLOBAL.basedir"} {
		if _, reason := sandbox.Screen(q, datasets.MySQL); !strings.Contains(reason, "@@") {
			t.Errorf("mysql: %q: %q", q, reason)
		}
	}
	for _, q := range []string{
		"SELECT lower(name), log(2), upper(x) FROM t", "SELECT * FROM settings", "SELECT mysql_version FROM t",
		"SELECT a.mysql FROM t AS a", "SELECT * FROM mysqlx.t", "SELECT 'mysql' AS engine", "SELECT count(*) FROM wal_entries",
		"SELECT slot FROM parking WHERE lot = 1", "SELECT backend_name FROM services",
		"SELECT name, type FROM pragma_table_info('t')", "SELECT * FROM database_list",
		// column names that share a word with a refused catalog function (Spider's
		// cre_Doc_Template_Mgt, student_transcripts_tracking, dog_kennels)
		"SELECT document_description, course_description FROM documents", "SELECT to_region, to_regular FROM routes",
		"SELECT size_description FROM sizes WHERE has_a_privilege = 1",
	} {
		for _, d := range dialects {
			if _, reason := sandbox.Screen(q, d); reason != "" {
				t.Errorf("%s: %q refused: %s", d, q, reason)
			}
		}
	}
	// PostgreSQL's full-text match operator is @@; only MySQL refuses it.
	if _, reason := sandbox.Screen("SELECT to_tsvector(title) @@ to_tsquery('x') FROM t", datasets.Postgres); reason != "" {
		t.Errorf("postgres @@: %s", reason)
	}
}

// TestScreenTrailingCommentFallback: in a dialect with no ScreenRules.Skip (none registered
// here), text after the ; that holds only whitespace and closed comments as SplitFirst reads them
// (SkipFirst) leaves the statement before the ; as the query's one statement; anything else
// after it, a /* left open or a bare ; included, is a second statement.
func TestScreenTrailingCommentFallback(t *testing.T) {
	d := datasets.Dialect("none")
	for q, want := range map[string]string{
		"SELECT 1; -- x":                 "SELECT 1",
		"SELECT 1; -- a; SELECT 2":       "SELECT 1",
		"SELECT 1; /* ; */ -- x\n\t/**/": "SELECT 1",
		"SELECT 1;--":                    "SELECT 1",
		"SELECT 1; --\nSELECT 2":         "",
		"SELECT 1; /* x */ SELECT 2":     "",
		"SELECT 1; /* x":                 "",
		"SELECT 1; # x":                  "",
		"SELECT 1;;":                     "",
	} {
		stmt, reason := sandbox.Screen(q, d)
		if stmt != want || (want == "") != strings.Contains(reason, "one statement") {
			t.Errorf("Screen(%q) = %q, %q; want %q", q, stmt, reason, want)
		}
	}
	if stmt, reason := sandbox.Screen("SELECT 1; /*! SELECT 2 */", d); !strings.Contains(reason, "executable comments") {
		t.Errorf("an executable comment after the ;: %q, %q; want it refused", stmt, reason)
	}
}
