package mysql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestMySQLReaderUser: EnsureReader makes a user per host with SELECT on the target database
// only (its _ escaped, so a database differing there is not covered), a working stored password,
// and resets an account that was given more.
func TestMySQLReaderUser(t *testing.T) {
	admin := sandboxtest.MyAdmin(t)
	ctx := context.Background()
	target := sandboxtest.MyDatabase(t, admin, "CREATE TABLE t (x INT)", "INSERT INTO t VALUES (1), (2)")
	// target with its first _ replaced: `target`.* unescaped would cover it.
	lookalike := strings.Replace(target, "_", "X", 1)
	if _, err := admin.Exec("CREATE DATABASE " + lookalike + "; CREATE TABLE " + lookalike + ".secret (x INT); INSERT INTO " + lookalike + ".secret VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + lookalike) })
	name := sandboxtest.FreshReaderName()
	rep := sandboxtest.GrantReader(t, datasets.MySQL, name, target)
	if !rep.Created || len(rep.Granted) != 1 {
		t.Errorf("report %+v", rep)
	}
	hosts, err := sandbox.QueryStrings(ctx, admin, "SELECT Host FROM mysql.user WHERE User = ? ORDER BY Host", name)
	if err != nil || strings.Join(hosts, ",") != "127.0.0.1,localhost" {
		t.Errorf("hosts %v %v", hosts, err)
	}
	db, err := Open(ctx, shared.MySQLDSN(), target, sandbox.Access{Reader: name})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if r := sandboxtest.MustExec(t, db, "SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1), count(*) FROM t", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != name || r.Rows[0][1] != int64(2) {
		t.Errorf("reader reads its database: %+v", r)
	}
	raw := db.(*mysqlDB)
	for _, q := range []string{
		"SELECT x FROM " + lookalike + ".secret",
		"SELECT name, password FROM " + sandbox.ReaderMeta + ".readers",
		"SELECT User, authentication_string FROM mysql.user",
		"SELECT * FROM mysql.global_priv",
	} {
		r, err := raw.run(ctx, time.Now(), q, 5*time.Second, sandbox.ExecOptions{MaxRows: 10})
		if err != nil || r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "denied") {
			t.Errorf("%s (unscreened, as the reader): %v %+v", q, err, r)
		}
	}
	if _, err := Open(ctx, shared.MySQLDSN(), lookalike, sandbox.Access{Reader: name}); !errors.Is(err, sandbox.ErrReader) {
		t.Errorf("ungranted database: %v", err)
	}

	// The login holds nothing itself: its task role holds the SELECT.
	role := mysqlTaskRole(name, target, true)
	if got, err := sandbox.QueryStrings(ctx, admin, "SELECT CONCAT(GRANTEE, ' ', TABLE_SCHEMA, ' ', PRIVILEGE_TYPE) FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE LIKE ? ORDER BY 1", "'"+name+"%"); err != nil ||
		len(got) != 1 || got[0] != "'"+role+"'@'' "+strings.ReplaceAll(target, "_", `\_`)+" SELECT" {
		t.Errorf("database grants: %q %v", got, err)
	}

	// An account given more is brought back to its task roles, and a task role given more to
	// SELECT on its database.
	if _, err := admin.Exec("GRANT FILE, PROCESS ON *.* TO '" + name + "'@'127.0.0.1'; GRANT INSERT ON " + lookalike + ".* TO '" + name + "'@'127.0.0.1'" +
		"; GRANT SELECT ON " + lookalike + ".* TO '" + name + "'@'localhost'; GRANT INSERT ON " + lookalike + ".* TO '" + role + "'"); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, shared.MySQLDSN(), target, sandbox.Access{Reader: name})
	for _, want := range []string{"FILE", "role " + role + ": GRANT INSERT"} {
		if !errors.Is(err, sandbox.ErrReader) || !strings.Contains(err.Error(), want) {
			t.Errorf("privileged reader opened (want %q named): %v", want, err)
		}
	}
	pw := sandboxtest.StoredPassword(t, admin, name)
	rep, err = sandbox.EnsureReader(ctx, datasets.MySQL, shared.MySQLDSN(), sandbox.ReaderSetup{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Created || len(rep.Changes) != 3 || !strings.Contains(strings.Join(rep.Changes, "; "), "FILE") {
		t.Errorf("update report %+v", rep)
	}
	if sandboxtest.StoredPassword(t, admin, name) != pw {
		t.Error("an update changed the stored password")
	}
	again, err := Open(ctx, shared.MySQLDSN(), target, sandbox.Access{Reader: name})
	if err != nil {
		t.Fatalf("after the reset (the SELECT grant on %s must stay): %v", target, err)
	}
	again.Close()
	// A wrong stored password is a clear error naming distill load.
	if _, err := admin.Exec("UPDATE "+sandbox.ReaderMeta+".readers SET password = 'wrong' WHERE name = ?", name); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, shared.MySQLDSN(), target, sandbox.Access{Reader: name}); !errors.Is(err, sandbox.ErrReader) || !strings.Contains(err.Error(), "distill load") {
		t.Errorf("wrong password: %v", err)
	}
	if _, err := admin.Exec("UPDATE "+sandbox.ReaderMeta+".readers SET password = ? WHERE name = ?", pw, name); err != nil {
		t.Fatal(err)
	}
}
