package postgres

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

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
	admin := sandboxtest.PGAdmin(t)
	ctx := context.Background()
	target := sandboxtest.PGSchema(t, admin, "CREATE TABLE t (x int)", "INSERT INTO t VALUES (1), (2)")
	other := sandboxtest.PGSchema(t, admin, "CREATE TABLE secret (x int)", "INSERT INTO secret VALUES (42)")
	name := sandboxtest.FreshReaderName()
	rep := sandboxtest.GrantReader(t, datasets.Postgres, name, target)
	if !rep.Created || len(rep.Changes) != 0 || len(rep.Granted) != 1 || rep.Granted[0] != target || len(rep.Warnings) != 0 {
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
	pw := sandboxtest.StoredPassword(t, admin, name)
	var verifier string
	if err := admin.QueryRow("SELECT rolpassword FROM pg_authid WHERE rolname = $1", name).Scan(&verifier); err != nil {
		t.Fatal(err)
	}
	if !scramMatches(t, verifier, pw) {
		t.Error("the stored password is not the one the server checks logins against")
	}

	db, err := Open(ctx, shared.PostgresDSN(), target, sandbox.Access{Reader: name})
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
	if r := sandboxtest.MustExec(t, db, "SELECT session_user, current_user, count(*) FROM t GROUP BY 1, 2", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != name || r.Rows[0][1] != pgTaskRole(name, target) || r.Rows[0][2] != int64(2) {
		t.Errorf("reader reads its schema: %+v", r)
	}
	raw := db.(*pgDB)
	for _, q := range []string{
		"SELECT x FROM " + other + ".secret",
		"SELECT name, password FROM " + sandbox.ReaderMeta + ".readers",
		"SELECT rolpassword FROM pg_authid",
	} {
		r, err := raw.run(ctx, time.Now(), q, 5*time.Second, sandbox.ExecOptions{MaxRows: 10})
		if err != nil || r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "permission denied") {
			t.Errorf("%s (unscreened, as the reader): %v %+v", q, err, r)
		}
	}
	// The role's defaults hold in its sessions, and a session advisory lock ends with the execution.
	r, err := raw.run(ctx, time.Now(), "SELECT current_setting('default_transaction_read_only'), current_setting('temp_file_limit'), current_setting('idle_in_transaction_session_timeout'), current_setting('log_min_messages'), current_setting('log_min_error_statement')", 5*time.Second, sandbox.ExecOptions{MaxRows: 1})
	if err != nil || !r.OK() || r.Rows[0][0] != "on" || r.Rows[0][1] != "4GB" || r.Rows[0][3] != "fatal" || r.Rows[0][4] != "panic" {
		t.Errorf("role settings: %v %+v", err, r)
	}
	key := time.Now().UnixNano() % 1_000_000_000
	if r, err := raw.run(ctx, time.Now(), fmt.Sprintf("SELECT pg_advisory_lock(%d)", key), 5*time.Second, sandbox.ExecOptions{MaxRows: 1}); err != nil || !r.OK() {
		t.Fatalf("advisory lock: %v %+v", err, r)
	}
	var held int
	if err := admin.QueryRow("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1", key).Scan(&held); err != nil || held != 0 {
		t.Errorf("%d advisory locks still held after the execution: %v", held, err)
	}
	if _, err := Open(ctx, shared.PostgresDSN(), other, sandbox.Access{Reader: name}); !errors.Is(err, sandbox.ErrReader) || !strings.Contains(err.Error(), "distill load") {
		t.Errorf("ungranted schema: %v", err)
	}

	// An existing role given more is brought back; the stored password stays.
	// So are grants on the login itself (an INHERIT login with grants of its own, as an earlier
	// version made it) and a task role given a login or a membership.
	task := sandbox.QuoteIdent(datasets.Postgres, pgTaskRole(name, target))
	if _, err := admin.Exec("ALTER ROLE " + name + " SUPERUSER REPLICATION CREATEDB INHERIT; GRANT pg_read_all_settings, pg_monitor TO " + name +
		"; GRANT USAGE ON SCHEMA " + other + " TO " + name + "; GRANT SELECT ON ALL TABLES IN SCHEMA " + other + " TO " + name +
		"; ALTER ROLE " + task + " LOGIN; GRANT pg_read_all_data TO " + task); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, shared.PostgresDSN(), target, sandbox.Access{Reader: name})
	for _, want := range []string{"SUPERUSER", "pg_monitor", "INHERIT", "grants on schema " + other, "LOGIN", "pg_read_all_data"} {
		if !errors.Is(err, sandbox.ErrReader) || !strings.Contains(err.Error(), want) {
			t.Errorf("privileged reader opened (want %q named): %v", want, err)
		}
	}
	rep, err = sandbox.EnsureReader(ctx, datasets.Postgres, shared.PostgresDSN(), sandbox.ReaderSetup{Name: name}, []string{target})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Created || len(rep.Changes) != 6 {
		t.Errorf("update report %+v", rep)
	}
	if sandboxtest.StoredPassword(t, admin, name) != pw {
		t.Error("an update changed the stored password")
	}
	again, err := Open(ctx, shared.PostgresDSN(), target, sandbox.Access{Reader: name})
	if err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	again.Close()
}

// TestPostgresReaderSettingsNoSuperuser: a DSN user that is no superuser sets the role defaults
// it may and is warned of the superuser-only ones (the temporary-file cap and the log levels)
// instead of leaving them unset in silence.
func TestPostgresReaderSettingsNoSuperuser(t *testing.T) {
	set, warning := pgReaderSettings("r", false)
	all, none := pgReaderSettings("r", true)
	if none != "" || len(all) != len(set)+3 {
		t.Errorf("superuser: %d settings, warning %q; without: %d", len(all), none, len(set))
	}
	for _, want := range []string{"temp_file_limit", "log_min_messages", "log_min_error_statement", "superuser"} {
		if !strings.Contains(warning, want) {
			t.Errorf("warning %q does not name %s", warning, want)
		}
	}
	for _, q := range set {
		if strings.Contains(q, "temp_file_limit") || strings.Contains(q, "log_min") {
			t.Errorf("without a superuser: %q", q)
		}
	}
}
