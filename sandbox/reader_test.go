package sandbox

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// testReaderName returns a reader name no other test run uses at the same time.
func testReaderName() string {
	return fmt.Sprintf("cs_rd_%d_%d_%d", os.Getpid()%100000, time.Now().UnixNano()%1_000_000, testSeq.Add(1))
}

// dsnOf returns the test server's DSN of dialect d.
func dsnOf(d datasets.Dialect) string {
	if d == datasets.Postgres {
		return shared.PostgresDSN()
	}
	return shared.MySQLDSN()
}

// grantReader creates (or updates) reader name on d's test server, granted targets, and drops
// it when the test ends.
func grantReader(t testing.TB, d datasets.Dialect, name string, targets ...string) ReaderReport {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := DropReader(ctx, d, dsnOf(d), name); err != nil {
			t.Errorf("drop reader: %v", err)
		}
	})
	rep, err := EnsureReader(context.Background(), d, dsnOf(d), ReaderSetup{Name: name}, targets)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// testReader is grantReader under a fresh name, returned as the Access to open with.
func testReader(t testing.TB, d datasets.Dialect, targets ...string) Access {
	t.Helper()
	name := testReaderName()
	grantReader(t, d, name, targets...)
	return Access{Reader: name}
}

// storedPassword reads the password EnsureReader kept for name.
func storedPassword(t *testing.T, admin *sql.DB, name string) string {
	t.Helper()
	var pw string
	if err := admin.QueryRow("SELECT password FROM " + ReaderMeta + ".readers WHERE name = " + SQLString(name)).Scan(&pw); err != nil {
		t.Fatalf("stored password of %s: %v", name, err)
	}
	return pw
}

// scramMatches reports whether password matches a PostgreSQL SCRAM-SHA-256 verifier
// (RFC 5802/7677: StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword,
// "Server Key")), which is what the server checks a login against.
func scramMatches(t *testing.T, verifier, password string) bool {
	t.Helper()
	var iter int
	var salt, stored, server string
	head, keys, ok := strings.Cut(strings.TrimPrefix(verifier, "SCRAM-SHA-256$"), "$")
	if !ok {
		t.Fatalf("not a SCRAM verifier: %.20s…", verifier)
	}
	is, saltB64, _ := strings.Cut(head, ":")
	iter, _ = strconv.Atoi(is)
	stored, server, _ = strings.Cut(keys, ":")
	saltB, err := base64.StdEncoding.DecodeString(saltB64)
	if err != nil {
		t.Fatal(err)
	}
	salt = string(saltB)
	salted, err := pbkdf2.Key(sha256.New, password, []byte(salt), iter, 32)
	if err != nil {
		t.Fatal(err)
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	sk := sha256.Sum256(clientKey)
	return base64.StdEncoding.EncodeToString(sk[:]) == stored && base64.StdEncoding.EncodeToString(mac(salted, "Server Key")) == server
}

// TestPostgresReaderRole: EnsureReader makes a plain login role granted exactly the target
// schema, keeps its password where only administrators read it (and it is the password the
// server checks), resets an existing role that was given more, and the reader reads the target
// and nothing else.
func TestPostgresReaderRole(t *testing.T) {
	admin := pgAdmin(t)
	ctx := context.Background()
	target := pgSchema(t, admin, "CREATE TABLE t (x int)", "INSERT INTO t VALUES (1), (2)")
	other := pgSchema(t, admin, "CREATE TABLE secret (x int)", "INSERT INTO secret VALUES (42)")
	name := testReaderName()
	rep := grantReader(t, datasets.Postgres, name, target)
	if !rep.Created || len(rep.Changes) != 0 || len(rep.Granted) != 1 || rep.Granted[0] != target {
		t.Errorf("report %+v", rep)
	}
	var super, repl, bypass, createRole, createDB, login bool
	var members int
	if err := admin.QueryRow(`SELECT rolsuper, rolreplication, rolbypassrls, rolcreaterole, rolcreatedb, rolcanlogin,
		(SELECT count(*) FROM pg_auth_members m WHERE m.member = r.oid) FROM pg_roles r WHERE rolname = $1`, name).
		Scan(&super, &repl, &bypass, &createRole, &createDB, &login, &members); err != nil {
		t.Fatal(err)
	}
	if super || repl || bypass || createRole || createDB || !login || members != 1 {
		t.Errorf("attributes: super %v repl %v bypassrls %v createrole %v createdb %v login %v, %d memberships", super, repl, bypass, createRole, createDB, login, members)
	}
	pw := storedPassword(t, admin, name)
	var verifier string
	if err := admin.QueryRow("SELECT rolpassword FROM pg_authid WHERE rolname = $1", name).Scan(&verifier); err != nil {
		t.Fatal(err)
	}
	if !scramMatches(t, verifier, pw) {
		t.Error("the stored password is not the one the server checks logins against")
	}

	db, err := OpenPostgres(ctx, shared.PostgresDSN(), target, Access{Reader: name})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The login is a member of its task role only, and holds nothing itself.
	var inherit bool
	var taskMember, direct int
	if err := admin.QueryRow(`SELECT r.rolinherit, (SELECT count(*) FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid AND g.rolname = $2 AND NOT g.rolcanlogin),
		(SELECT count(*) FROM pg_namespace n, aclexplode(n.nspacl) a WHERE a.grantee = r.oid) FROM pg_roles r WHERE r.rolname = $1`, name, pgTaskRole(name, target)).Scan(&inherit, &taskMember, &direct); err != nil {
		t.Fatal(err)
	}
	if inherit || taskMember != 1 || direct != 0 {
		t.Errorf("login: inherit %v, member of its task role %d, %d schema grants of its own", inherit, taskMember, direct)
	}
	if r := mustExec(t, db, "SELECT session_user, current_user, count(*) FROM t GROUP BY 1, 2", ExecOptions{}); !r.OK() || r.Rows[0][0] != name || r.Rows[0][1] != pgTaskRole(name, target) || r.Rows[0][2] != int64(2) {
		t.Errorf("reader reads its schema: %+v", r)
	}
	raw := db.(*pgDB)
	for _, q := range []string{
		"SELECT x FROM " + other + ".secret",
		"SELECT name, password FROM " + ReaderMeta + ".readers",
		"SELECT rolpassword FROM pg_authid",
	} {
		r, err := raw.run(ctx, time.Now(), q, 5*time.Second, 10)
		if err != nil || r.Outcome != OutcomeError || !strings.Contains(r.Error, "permission denied") {
			t.Errorf("%s (unscreened, as the reader): %v %+v", q, err, r)
		}
	}
	// The role's defaults hold in its sessions, and a session advisory lock ends with the execution.
	r, err := raw.run(ctx, time.Now(), "SELECT current_setting('default_transaction_read_only'), current_setting('temp_file_limit'), current_setting('idle_in_transaction_session_timeout')", 5*time.Second, 1)
	if err != nil || !r.OK() || r.Rows[0][0] != "on" || r.Rows[0][1] != "4GB" {
		t.Errorf("role settings: %v %+v", err, r)
	}
	key := time.Now().UnixNano() % 1_000_000_000
	if r, err := raw.run(ctx, time.Now(), fmt.Sprintf("SELECT pg_advisory_lock(%d)", key), 5*time.Second, 1); err != nil || !r.OK() {
		t.Fatalf("advisory lock: %v %+v", err, r)
	}
	var held int
	if err := admin.QueryRow("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1", key).Scan(&held); err != nil || held != 0 {
		t.Errorf("%d advisory locks still held after the execution: %v", held, err)
	}
	if _, err := OpenPostgres(ctx, shared.PostgresDSN(), other, Access{Reader: name}); !errors.Is(err, ErrReader) || !strings.Contains(err.Error(), "distill load") {
		t.Errorf("ungranted schema: %v", err)
	}

	// An existing role given more is brought back; the stored password stays.
	// So are grants on the login itself (an INHERIT login with grants of its own, as an earlier
	// version made it) and a task role given a login or a membership.
	task := QuoteIdent(datasets.Postgres, pgTaskRole(name, target))
	if _, err := admin.Exec("ALTER ROLE " + name + " SUPERUSER REPLICATION CREATEDB INHERIT; GRANT pg_read_all_settings, pg_monitor TO " + name +
		"; GRANT USAGE ON SCHEMA " + other + " TO " + name + "; GRANT SELECT ON ALL TABLES IN SCHEMA " + other + " TO " + name +
		"; ALTER ROLE " + task + " LOGIN; GRANT pg_read_all_data TO " + task); err != nil {
		t.Fatal(err)
	}
	_, err = OpenPostgres(ctx, shared.PostgresDSN(), target, Access{Reader: name})
	for _, want := range []string{"SUPERUSER", "pg_monitor", "INHERIT", "grants on schema " + other, "LOGIN", "pg_read_all_data"} {
		if !errors.Is(err, ErrReader) || !strings.Contains(err.Error(), want) {
			t.Errorf("privileged reader opened (want %q named): %v", want, err)
		}
	}
	rep, err = EnsureReader(ctx, datasets.Postgres, shared.PostgresDSN(), ReaderSetup{Name: name}, []string{target})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Created || len(rep.Changes) != 6 {
		t.Errorf("update report %+v", rep)
	}
	if storedPassword(t, admin, name) != pw {
		t.Error("an update changed the stored password")
	}
	again, err := OpenPostgres(ctx, shared.PostgresDSN(), target, Access{Reader: name})
	if err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	again.Close()
}

// TestReaderMissing: with no reader, opening a server database fails with ErrReader naming
// distill load; AsDSNUser opens as the DSN's user.
func TestReaderMissing(t *testing.T) {
	ctx := context.Background()
	pg := pgSchema(t, pgAdmin(t), "CREATE TABLE t (x int)")
	my := myDatabase(t, myAdmin(t), "CREATE TABLE t (x INT)")
	for _, d := range []datasets.Dialect{datasets.Postgres, datasets.MySQL} {
		target := map[datasets.Dialect]string{datasets.Postgres: pg, datasets.MySQL: my}[d]
		c := &Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN(), datasets.MySQL: shared.MySQLDSN()}, Access: Access{Reader: testReaderName()}}
		_, err := c.Open(ctx, d, datasets.Task{ID: "t1", DBID: target})
		if !errors.Is(err, ErrReader) || !strings.Contains(err.Error(), "distill load") || !strings.Contains(err.Error(), c.Access.Reader) {
			t.Errorf("%s: %v", d, err)
		}
		c.Close()
		c = &Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN(), datasets.MySQL: shared.MySQLDSN()}, Access: Access{AsDSNUser: true}}
		db, err := c.Open(ctx, d, datasets.Task{ID: "t1", DBID: target})
		if err != nil {
			t.Fatalf("%s as the DSN's user: %v", d, err)
		}
		if r := mustExec(t, db, "SELECT count(*) FROM t", ExecOptions{}); !r.OK() {
			t.Errorf("%s as the DSN's user: %+v", d, r)
		}
		c.Close()
		who, err := DescribeDSNUser(ctx, d, dsnOf(d))
		if err != nil || !strings.Contains(who, map[datasets.Dialect]string{datasets.Postgres: "SUPERUSER", datasets.MySQL: "SUPER"}[d]) {
			t.Errorf("%s: describe: %q %v", d, who, err)
		}
	}
	if _, err := EnsureReader(ctx, datasets.Postgres, shared.PostgresDSN(), ReaderSetup{Name: "Bad-Name"}, nil); err == nil {
		t.Error("bad reader name accepted")
	}
	if _, err := EnsureReader(ctx, datasets.MySQL, shared.MySQLDSN(), ReaderSetup{Name: testReaderName(), Hosts: []string{"x'y"}}, nil); err == nil {
		t.Error("bad host accepted")
	}
	if _, err := EnsureReader(ctx, datasets.Postgres, shared.PostgresDSN(), ReaderSetup{Name: testReaderName()}, []string{"cs_no_such_schema_x"}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing target: %v", err)
	}
}

// TestMySQLReaderUser: EnsureReader makes a user per host with SELECT on the target database
// only (its _ escaped, so a database differing there is not covered), a working stored password,
// and resets an account that was given more.
func TestMySQLReaderUser(t *testing.T) {
	admin := myAdmin(t)
	ctx := context.Background()
	target := myDatabase(t, admin, "CREATE TABLE t (x INT)", "INSERT INTO t VALUES (1), (2)")
	// target with its first _ replaced: `target`.* unescaped would cover it.
	lookalike := strings.Replace(target, "_", "X", 1)
	if _, err := admin.Exec("CREATE DATABASE " + lookalike + "; CREATE TABLE " + lookalike + ".secret (x INT); INSERT INTO " + lookalike + ".secret VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + lookalike) })
	name := testReaderName()
	rep := grantReader(t, datasets.MySQL, name, target)
	if !rep.Created || len(rep.Granted) != 1 {
		t.Errorf("report %+v", rep)
	}
	hosts, err := QueryStrings(ctx, admin, "SELECT Host FROM mysql.user WHERE User = ? ORDER BY Host", name)
	if err != nil || strings.Join(hosts, ",") != "127.0.0.1,localhost" {
		t.Errorf("hosts %v %v", hosts, err)
	}
	db, err := OpenMySQL(ctx, shared.MySQLDSN(), target, Access{Reader: name})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if r := mustExec(t, db, "SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1), count(*) FROM t", ExecOptions{}); !r.OK() || r.Rows[0][0] != name || r.Rows[0][1] != int64(2) {
		t.Errorf("reader reads its database: %+v", r)
	}
	raw := db.(*mysqlDB)
	for _, q := range []string{
		"SELECT x FROM " + lookalike + ".secret",
		"SELECT name, password FROM " + ReaderMeta + ".readers",
		"SELECT User, authentication_string FROM mysql.user",
		"SELECT * FROM mysql.global_priv",
	} {
		r, err := raw.run(ctx, time.Now(), q, 5*time.Second, 10)
		if err != nil || r.Outcome != OutcomeError || !strings.Contains(r.Error, "denied") {
			t.Errorf("%s (unscreened, as the reader): %v %+v", q, err, r)
		}
	}
	if _, err := OpenMySQL(ctx, shared.MySQLDSN(), lookalike, Access{Reader: name}); !errors.Is(err, ErrReader) {
		t.Errorf("ungranted database: %v", err)
	}

	// The login holds nothing itself: its task role holds the SELECT.
	role := mysqlTaskRole(name, target, true)
	if got, err := QueryStrings(ctx, admin, "SELECT CONCAT(GRANTEE, ' ', TABLE_SCHEMA, ' ', PRIVILEGE_TYPE) FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE LIKE ? ORDER BY 1", "'"+name+"%"); err != nil ||
		len(got) != 1 || got[0] != "'"+role+"'@'' "+strings.ReplaceAll(target, "_", `\_`)+" SELECT" {
		t.Errorf("database grants: %q %v", got, err)
	}

	// An account given more is brought back to its task roles, and a task role given more to
	// SELECT on its database.
	if _, err := admin.Exec("GRANT FILE, PROCESS ON *.* TO '" + name + "'@'127.0.0.1'; GRANT INSERT ON " + lookalike + ".* TO '" + name + "'@'127.0.0.1'" +
		"; GRANT SELECT ON " + lookalike + ".* TO '" + name + "'@'localhost'; GRANT INSERT ON " + lookalike + ".* TO '" + role + "'"); err != nil {
		t.Fatal(err)
	}
	_, err = OpenMySQL(ctx, shared.MySQLDSN(), target, Access{Reader: name})
	for _, want := range []string{"FILE", "role " + role + ": GRANT INSERT"} {
		if !errors.Is(err, ErrReader) || !strings.Contains(err.Error(), want) {
			t.Errorf("privileged reader opened (want %q named): %v", want, err)
		}
	}
	pw := storedPassword(t, admin, name)
	rep, err = EnsureReader(ctx, datasets.MySQL, shared.MySQLDSN(), ReaderSetup{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Created || len(rep.Changes) != 3 || !strings.Contains(strings.Join(rep.Changes, "; "), "FILE") {
		t.Errorf("update report %+v", rep)
	}
	if storedPassword(t, admin, name) != pw {
		t.Error("an update changed the stored password")
	}
	again, err := OpenMySQL(ctx, shared.MySQLDSN(), target, Access{Reader: name})
	if err != nil {
		t.Fatalf("after the reset (the SELECT grant on %s must stay): %v", target, err)
	}
	again.Close()
	// A wrong stored password is a clear error naming distill load.
	if _, err := admin.Exec("UPDATE "+ReaderMeta+".readers SET password = 'wrong' WHERE name = ?", name); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenMySQL(ctx, shared.MySQLDSN(), target, Access{Reader: name}); !errors.Is(err, ErrReader) || !strings.Contains(err.Error(), "distill load") {
		t.Errorf("wrong password: %v", err)
	}
	if _, err := admin.Exec("UPDATE "+ReaderMeta+".readers SET password = ? WHERE name = ?", pw, name); err != nil {
		t.Fatal(err)
	}
}

func TestReservedTargets(t *testing.T) {
	for _, name := range []string{"chainedsql_meta", "mysql", "information_schema", "performance_schema", "sys", "public", "pg_catalog", "PG_toast", "cs_tmp_0011"} {
		if _, err := CopySQLite(context.Background(), "/nonexistent.sqlite", datasets.Postgres, "postgres://x@127.0.0.1/x", name); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
